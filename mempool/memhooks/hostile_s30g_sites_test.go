package memhooks_test

// Hostile review, session 30g: sites of events.

import (
	"bytes"
	"strings"
	"testing"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// WithSites says an event's site is "the innermost frame outside
// clpool". Replaying a trace through a pool with clpool's own
// trace.Replay (what `clpool replay` and any replay harness do), every
// event's site is a frame of package trace, "trace.go:NNN:
// trace.replayEvents[...]", a frame inside clpool: the callsite filter
// (mempool/internal/callsite ownPackages) leaves package trace out.
// Expected: the caller of trace.Replay, this test function, as the site.
func TestHostileS30gReplaySitesAreInsideClpool(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q)
	var w bytes.Buffer
	rec := memhooks.NewTraceRecorder(&w, memhooks.WithSites(), memhooks.WithFlushEvery(0))
	p.AddHook(rec)
	h := memhooks.NewHistory(16, memhooks.WithSites())
	p.AddHook(h)

	events := []trace.Event{{Op: trace.Alloc, ID: 1, Size: 100}, {Op: trace.Free, ID: 1}}
	require.NoError(t, trace.Replay(events, p.Allocate, (*mempool.PooledBuffer).Close))
	require.NoError(t, rec.Close())

	recorded, err := trace.ReadComplete(bytes.NewReader(w.Bytes()))
	require.NoError(t, err)
	require.NotEmpty(t, recorded)
	for _, ev := range append(recorded, h.Events()...) {
		assert.False(t, strings.HasPrefix(ev.Site, "trace.go:"), "%c %d: site %q is a frame of clpool's package trace", ev.Op, ev.ID, ev.Site)
		assert.Contains(t, ev.Site, "TestHostileS30gReplaySitesAreInsideClpool", "%c %d: the site is the caller outside clpool", ev.Op, ev.ID)
	}
}
