package metrics_test

import (
	"bytes"
	"encoding/json"
	"expvar"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool/metrics"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHostileS45dPublishNamesNotUTF8Collide: two pools published under
// two names, "x\xff" and "x\uFFFD". Publish checks only expvar.Get, which
// tells the two apart, so both succeed; but /debug/vars writes keys as
// JSON strings, with invalid UTF-8 as U+FFFD, so the two pools' stats come
// under one key, twice, and a JSON reader keeps one of them: a pool
// published without error that no reader of /debug/vars can see. The
// Collector guards against exactly this (Add refuses a name that is not
// valid UTF-8: "no label may hold it"); Publish should too: refuse such
// a name, or find it taken (ErrNameTaken), or else publish each pool
// under a key of its own.
func TestHostileS45dPublishNamesNotUTF8Collide(t *testing.T) {
	q := cltest.Queue(t)
	p1 := pooltest.New(t, q)
	p2 := pooltest.New(t, q)
	b, err := p2.Allocate(4000) // p2's figures differ from p1's
	require.NoError(t, err)
	defer b.Close()

	valid := uniqueName(t) + "\uFFFD"
	invalid := valid[:len(valid)-len("\uFFFD")] + "\xff"
	require.NoError(t, metrics.Publish(valid, p1))
	err = metrics.Publish(invalid, p2)
	if err != nil {
		// Refused, or found taken: /debug/vars stays one key per pool.
		assert.Nil(t, expvar.Get(invalid), "refused, and nothing published")
		return
	}

	srv := httptest.NewServer(expvar.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/debug/vars")
	require.NoError(t, err)
	defer resp.Body.Close()
	var body bytes.Buffer
	_, err = body.ReadFrom(resp.Body)
	require.NoError(t, err)

	// Count the keys of the top-level object that are the valid name.
	dec := json.NewDecoder(bytes.NewReader(body.Bytes()))
	_, err = dec.Token() // {
	require.NoError(t, err)
	keys := 0
	for dec.More() {
		tok, err := dec.Token()
		require.NoError(t, err)
		if tok.(string) == valid {
			keys++
		}
		var skip json.RawMessage
		require.NoError(t, dec.Decode(&skip))
	}
	assert.Equal(t, 1, keys, "Publish(%q) and Publish(%q) both succeeded: /debug/vars has %d keys %q, so one pool's stats hide the other's", valid, invalid, keys, valid)
}
