package mempool_test

import (
	"bytes"
	"math/rand/v2"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
)

// splitOf returns what each of the pool's four views says of its
// inactive splits, in bytes: Stats, MemoryStats, WriteSummary's row
// (parsed back to bytes where it prints them exactly) and Snapshot.
func splitOf(t *testing.T, p *mempool.Pool) (stats, memory, snapshot int64, summary string) {
	t.Helper()
	stats = p.Stats().InactiveSplitBytes.All.Current
	memory = p.MemoryStats()["inactive_split_bytes.all.current"]
	for _, seg := range p.Snapshot().Segments {
		for _, b := range seg.Blocks {
			if b.State == mempool.StateInactiveSplit {
				snapshot += b.Size
			}
		}
	}
	var buf bytes.Buffer
	require.NoError(t, p.WriteSummary(&buf))
	summary = regexp.MustCompile(`(?m)^.*Non-releasable memory.*$`).FindString(buf.String())
	return stats, memory, snapshot, summary
}

// An idle arena (every block closed) has no inactive split, whether its
// blocks wait unmerged, in a queue's cache (allocator.Immediate's queue),
// or in the cache of requests on no queue; and the four views agree on
// it after every step of a random run.
func TestIdleArenaHasNoInactiveSplit(t *testing.T) {
	q := cltest.Queue(t)
	deferred, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		a    allocator.Allocator // nil: over q, checked for leaks
		opts []mempool.Option
	}{
		{"queue", nil, []mempool.Option{mempool.WithArena()}},
		{"uncached", nil, []mempool.Option{mempool.WithArena(), mempool.WithoutQueueCaches()}},
		{"no drop safety", nil, []mempool.Option{mempool.WithArena(), mempool.WithDropSafety(false)}},
		{"no queue", deferred, []mempool.Option{mempool.WithArena()}},
	} {
		t.Log(tc.name)
		var p *mempool.Pool
		if tc.a == nil {
			p = pooltest.New(t, q, tc.opts...)
		} else {
			p, err = mempool.New(tc.a, tc.opts...)
			require.NoError(t, err)
			defer p.Close()
		}
		rng := rand.New(rand.NewPCG(1, 2))
		var open []*mempool.PooledBuffer
		for step := range 300 {
			if len(open) > 0 && rng.IntN(2) == 0 {
				i := rng.IntN(len(open))
				require.NoError(t, open[i].Close())
				open = append(open[:i], open[i+1:]...)
			} else {
				b, err := p.Allocate(int64(rng.IntN(64 << 10)))
				require.NoError(t, err)
				open = append(open, b)
			}
			st, mem, snap, _ := splitOf(t, p)
			require.Equal(t, st, mem, "%s, step %d: Stats and MemoryStats", tc.name, step)
			require.Equal(t, st, snap, "%s, step %d: Stats and Snapshot", tc.name, step)
		}
		for _, b := range open {
			require.NoError(t, b.Close())
		}
		st, mem, snap, row := splitOf(t, p)
		assert.Zero(t, st, "%s: Stats of an idle arena", tc.name)
		assert.Zero(t, mem, "%s: MemoryStats of an idle arena", tc.name)
		assert.Zero(t, snap, "%s: Snapshot of an idle arena", tc.name)
		assert.Regexp(t, `\|\s+0 B\s+\|`, row, "%s: WriteSummary of an idle arena", tc.name)
	}
}
