package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lockedBuffer is an output that run writes from its goroutine while the
// test may read it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// sample gets url, a Prometheus text page, and returns the value of the
// first series of metric name, and whether there is one.
func sample(t *testing.T, url, name string) (float64, bool) {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		line := lines.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		require.NoError(t, err, line)
		return v, true
	}
	require.NoError(t, lines.Err())
	return 0, false
}

// The program serves both pages while its pool works, and stops when its
// context is done, with the pool's summary.
func TestRunServesMetricsAndVars(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	base := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out lockedBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, ln, config{name: "served", every: time.Millisecond}, &out) }()

	// Blocks come back for reuse once nine have been asked for.
	require.Eventually(t, func() bool {
		hits, ok := sample(t, base+"/metrics", "clpool_hits_total")
		return ok && hits > 0
	}, 20*time.Second, 10*time.Millisecond, "no hits on /metrics")
	_, ok := sample(t, base+"/metrics", "go_goroutines")
	assert.True(t, ok, "the Go runtime's metrics are served too")

	resp, err := http.Get(base + "/debug/vars")
	require.NoError(t, err)
	var vars struct {
		Served map[string]int64 `json:"served"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&vars))
	resp.Body.Close()
	assert.Positive(t, vars.Served["num_device_alloc"])
	assert.Positive(t, vars.Served["allocation.all.allocated"])

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("run did not return after its context was done")
	}
	assert.Contains(t, out.String(), "serving "+base+"/metrics and "+base+"/debug/vars\n")
	assert.Contains(t, out.String(), "clpool memory summary")
	_, err = http.Get(base + "/metrics")
	assert.Error(t, err, "the server is down")
}

// -duration ends the program.
func TestServeStopsAfterDuration(t *testing.T) {
	var out lockedBuffer
	start := time.Now()
	require.NoError(t, serve("127.0.0.1:0", 200*time.Millisecond, config{name: "timed", every: time.Millisecond, arena: true}, &out))
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
	assert.Contains(t, out.String(), "policy: arena")
}

// An address it cannot listen on is an error, before any work.
func TestServeRefusesABadAddress(t *testing.T) {
	var out lockedBuffer
	err := serve("127.0.0.1:-1", time.Minute, config{name: "bad", every: time.Millisecond}, &out)
	assert.ErrorContains(t, err, "invalid port")
	assert.Empty(t, out.String())
}
