package mempool_test

import (
	"bytes"
	"fmt"
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
			require.NoError(t, mempool.CheckBlockCounts(p), "%s, step %d", tc.name, step)
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

// splitInSnapshot counts the blocks and bytes a Snapshot shows as
// inactive splits.
func splitInSnapshot(s mempool.Snapshot) (blocks, bytes int64) {
	for _, seg := range s.Segments {
		for _, b := range seg.Blocks {
			if b.State == mempool.StateInactiveSplit {
				blocks++
				bytes += b.Size
			}
		}
	}
	return blocks, bytes
}

// The inactive-split peaks are the most Stats and Snapshot showed. Two
// blocks cut from one arena segment are closed in turn into their queue's
// cache: after the first Close the segment has two inactive splits (the
// first block and the free tail), after the second none (it is idle: its
// only blocks not free wait in the cache). The peak is 2 blocks, not the
// 3 blocks and the whole segment's bytes a cached block counted as in
// use would make of the idle segment.
func TestInactiveSplitPeakIsTheMostShown(t *testing.T) {
	f := newFixture(t, nil, mempool.WithArena())
	a, err := f.pool.Allocate(4096)
	require.NoError(t, err)
	b, err := f.pool.Allocate(4096)
	require.NoError(t, err)
	var maxBlocks, maxBytes int64
	look := func() {
		s := f.pool.Stats()
		nb, nby := splitInSnapshot(f.pool.Snapshot())
		require.Equal(t, nb, s.InactiveSplit.All.Current, "Stats and Snapshot agree")
		require.Equal(t, nby, s.InactiveSplitBytes.All.Current)
		maxBlocks, maxBytes = max(maxBlocks, nb), max(maxBytes, nby)
	}
	look()
	require.NoError(t, a.Close())
	look()
	require.NoError(t, b.Close())
	look()
	s := f.pool.Stats()
	assert.Equal(t, int64(2), maxBlocks)
	assert.Equal(t, maxBlocks, s.InactiveSplit.All.Peak, "the peak is the most there ever were")
	assert.Equal(t, maxBytes, s.InactiveSplitBytes.All.Peak)
	assert.Less(t, s.InactiveSplitBytes.All.Peak, s.ManagedBytes, "an idle segment is never all inactive split")
	m := f.pool.MemoryStats()
	assert.Equal(t, maxBytes, m["inactive_split_bytes.all.peak"], "MemoryStats' peak is Stats'")
}

// The inactive-split totals never fall, and Current is always Allocated -
// Freed: when a cached block of an idle segment is taken again, the
// segment's other blocks become inactive splits again, counted as
// allocated.
func TestInactiveSplitTotalsNeverFall(t *testing.T) {
	f := newFixture(t, nil, mempool.WithArena())
	a, err := f.pool.Allocate(4096)
	require.NoError(t, err)
	b, err := f.pool.Allocate(4096)
	require.NoError(t, err)
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	before := f.pool.Stats()
	c, err := f.pool.Allocate(4096) // a hit from the queue's cache
	require.NoError(t, err)
	after := f.pool.Stats()
	require.NoError(t, c.Close())
	for _, g := range []struct {
		name          string
		before, after mempool.Stat
	}{{"blocks", before.InactiveSplit.All, after.InactiveSplit.All}, {"bytes", before.InactiveSplitBytes.All, after.InactiveSplitBytes.All}} {
		assert.GreaterOrEqual(t, g.after.Freed, g.before.Freed, "%s: a total since New cannot fall", g.name)
		assert.GreaterOrEqual(t, g.after.Allocated, g.before.Allocated, "%s: a total since New cannot fall", g.name)
		assert.Equal(t, g.after.Current, g.after.Allocated-g.after.Freed, g.name)
	}
	assert.Equal(t, int64(2), after.InactiveSplit.All.Current, "the cached block and the tail, c in use")
}

// splitWatch follows a pool's inactive splits step by step.
type splitWatch struct {
	maxBlocks, maxBytes int64 // the most Snapshot showed
	last                mempool.Stats
}

// check checks, after a step, that Stats agrees with Snapshot, that the
// peaks are the most Snapshot showed, that Current is Allocated - Freed,
// and that no total fell.
func (w *splitWatch) check(t *testing.T, p *mempool.Pool, step string) {
	t.Helper()
	require.NoError(t, mempool.CheckBlockCounts(p), step)
	s := p.Stats()
	nb, nby := splitInSnapshot(p.Snapshot())
	require.Equal(t, nb, s.InactiveSplit.All.Current, "%s: Stats and Snapshot agree", step)
	require.Equal(t, nby, s.InactiveSplitBytes.All.Current, step)
	w.maxBlocks, w.maxBytes = max(w.maxBlocks, nb), max(w.maxBytes, nby)
	for _, g := range []struct {
		name     string
		st, prev mempool.StatGroup
		max      int64
	}{{"blocks", s.InactiveSplit, w.last.InactiveSplit, w.maxBlocks}, {"bytes", s.InactiveSplitBytes, w.last.InactiveSplitBytes, w.maxBytes}} {
		require.Equal(t, g.max, g.st.All.Peak, "%s: %s: the peak is the most shown", step, g.name)
		require.Equal(t, g.st.All.Current, g.st.Small.Current+g.st.Large.Current, "%s: %s", step, g.name)
		for i, st := range []mempool.Stat{g.st.All, g.st.Small, g.st.Large} {
			prev := []mempool.Stat{g.prev.All, g.prev.Small, g.prev.Large}[i]
			require.Equal(t, st.Current, st.Allocated-st.Freed, "%s: %s", step, g.name)
			require.GreaterOrEqual(t, st.Allocated, prev.Allocated, "%s: %s", step, g.name)
			require.GreaterOrEqual(t, st.Freed, prev.Freed, "%s: %s", step, g.name)
		}
	}
	w.last = s
}

// On one queue, step by step, the inactive splits' peaks are the most
// Snapshot showed after any step, whichever way the blocks went (the
// queue's cache, an eviction from it, the policy, a drain before a new
// segment), and no total falls.
func TestInactiveSplitPeaksFollowARandomRun(t *testing.T) {
	f := newFixture(t, nil, mempool.WithArena())
	rng := rand.New(rand.NewPCG(3, 4))
	var open []*mempool.PooledBuffer
	var w splitWatch
	for step := range 400 {
		if len(open) > 0 && rng.IntN(2) == 0 {
			i := rng.IntN(len(open))
			require.NoError(t, open[i].Close())
			open = append(open[:i], open[i+1:]...)
		} else {
			b, err := f.pool.Allocate(int64(rng.IntN(96 << 10)))
			require.NoError(t, err)
			open = append(open, b)
		}
		w.check(t, f.pool, fmt.Sprint("step ", step))
	}
	for _, b := range open {
		require.NoError(t, b.Close())
	}
	assert.Zero(t, f.pool.Stats().InactiveSplit.All.Current, "an idle arena")
}

// Blocks in the sanitizer's quarantine are held as cached ones are: a
// segment, small or large, whose only blocks not free wait there is idle,
// and has no inactive split.
func TestQuarantinedBlocksLeaveTheirSegmentIdle(t *testing.T) {
	f := newSanFixture(t, mempool.WithArena())
	var open []*mempool.PooledBuffer
	var w splitWatch
	for _, size := range []int64{4096, 4096, 3 << 20, 3 << 20} { // two small blocks, two large ones
		b, err := f.pool.Allocate(size)
		require.NoError(t, err)
		open = append(open, b)
		w.check(t, f.pool, fmt.Sprint("allocate ", size))
	}
	for i, b := range open {
		require.NoError(t, b.Close())
		w.check(t, f.pool, fmt.Sprint("close ", i))
	}
	s := f.pool.Stats()
	assert.Zero(t, s.InactiveSplit.All.Current, "every segment is idle")
	assert.Positive(t, s.InactiveSplit.Large.Peak, "a large segment had inactive splits")
}

// A queue's cache brings its inactive splits into the counts in batches
// (every 64 operations, or when Stats looks): peaks and totals come out
// as if counted one by one. Two pools run the same requests, one looked
// at after each, the other at the end only; blocks are taken and given
// back over and over (which the batch lists as round trips), of several
// sizes and segments.
func TestInactiveSplitBatchesCountAsOneByOne(t *testing.T) {
	sizes := []int64{4096, 4096, 8192, 64 << 10, 200 << 10}
	for seed := range uint64(4) {
		stepwise, batched := newFixture(t, nil, mempool.WithArena()), newFixture(t, nil, mempool.WithArena())
		for _, f := range []*fixture{stepwise, batched} {
			look := func() {
				if f == stepwise {
					f.pool.Stats() // flushes the queue's cache
				}
			}
			rng := rand.New(rand.NewPCG(seed, 5))
			var open []*mempool.PooledBuffer
			for range 500 {
				if len(open) > 0 && rng.IntN(2) == 0 {
					j := len(open) - 1 - rng.IntN(min(len(open), 2)) // mostly the newest: round trips
					require.NoError(t, open[j].Close())
					open = append(open[:j], open[j+1:]...)
				} else {
					b, err := f.pool.Allocate(sizes[rng.IntN(len(sizes))])
					require.NoError(t, err)
					open = append(open, b)
				}
				look()
			}
			for _, b := range open {
				require.NoError(t, b.Close())
				look()
			}
		}
		require.NoError(t, mempool.CheckBlockCounts(stepwise.pool))
		require.NoError(t, mempool.CheckBlockCounts(batched.pool))
		want, got := stepwise.pool.Stats(), batched.pool.Stats()
		assert.Equal(t, want.InactiveSplit, got.InactiveSplit, "seed %d: blocks", seed)
		assert.Equal(t, want.InactiveSplitBytes, got.InactiveSplitBytes, "seed %d: bytes", seed)
		assert.Equal(t, want.Allocation, got.Allocation, "seed %d", seed)
	}
}
