package memhooks_test

import (
	"bytes"
	"testing"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s45dProfileTotals sums the samples of a LineProfile's pprof profile,
// by sample type.
func s45dProfileTotals(t *testing.T, lp *memhooks.LineProfile) map[string]int64 {
	t.Helper()
	p := lp.Profile()
	require.NoError(t, p.CheckValid())
	out := map[string]int64{}
	for _, s := range p.Sample {
		for i, st := range p.SampleType {
			out[st.Type] += s.Value[i]
		}
	}
	return out
}

// TestHostileS45dHookAddedTwice: AddHook takes the same hook twice (each
// call is a registration of its own, removed by its own remove func;
// nothing refuses the second), as a program does that registers its
// recorder where it makes the pool and again where it starts tracing.
// Each event then reaches the hook twice. The ready-made hooks count
// each allocation twice and each free once: the TraceRecorder numbers
// every block and segment twice and frees one number of each, so its
// trace has a live block for every block ever allocated and twice the
// pool's segment bytes; the LineProfile keeps the bytes of every freed
// block in use; History's WriteTrace the same as the recorder's. A pool
// with nothing open must not trace as one leaking every block: either
// AddHook refuses (or ignores) a hook registered already, or the hooks
// count an event told twice once.
func TestHostileS45dHookAddedTwice(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q)
	var buf bytes.Buffer
	rec := memhooks.NewTraceRecorder(&buf, memhooks.WithFlushEvery(0))
	lp := memhooks.NewLineProfile()
	h := memhooks.NewHistory(64)
	for _, hk := range []mempool.Hook{rec, lp, h, rec, lp, h} {
		p.AddHook(hk)
	}
	for range 3 {
		b, err := p.Allocate(1000)
		require.NoError(t, err)
		require.NoError(t, b.Close())
	}
	require.NoError(t, rec.Close())
	s := p.Stats()
	require.Zero(t, s.ActiveBlocks)

	_, liveBlocks, liveSegBytes := s41dCheck(t, buf.Bytes())
	assert.Equal(t, s.ActiveBlocks, liveBlocks, "TraceRecorder: blocks live at the end of the trace; trace:\n%s", buf.String())
	assert.Equal(t, s.ManagedBytes, liveSegBytes, "TraceRecorder: segment bytes live at the end of the trace")

	var hbuf bytes.Buffer
	require.NoError(t, h.WriteTrace(&hbuf))
	_, liveBlocks, liveSegBytes = s41dCheck(t, hbuf.Bytes())
	assert.Equal(t, s.ActiveBlocks, liveBlocks, "History: blocks live at the end of its trace")
	assert.Equal(t, s.ManagedBytes, liveSegBytes, "History: segment bytes live at the end of its trace")

	tot := s45dProfileTotals(t, lp)
	assert.Equal(t, s.AllocatedBytes.All.Current, tot["inuse_space"], "LineProfile: bytes in use")
	assert.Equal(t, s.AllocatedBytes.All.Allocated, tot["alloc_space"], "LineProfile: bytes served")
}
