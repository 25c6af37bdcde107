package mempool_test

// Hostile tests of commit d880f25 (tiny segments in the arena; big
// blocks in an arena's queue cache counted apart). Each test says whether
// it FAILS on d880f25 (a defect) or passes (an attack that held, kept as
// a regression test).

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FAILS on d880f25. doc.go: "a queue's cache holds at most a sixteenth
// of the pool, and, apart, blocks that each cover a segment of at least
// an eighth of it, up to half" (now a 128th: CacheShare). putCached's
// eviction loop did not keep them apart: when a small block took the
// cache past its share, it evicted the oldest blocks whatever their
// kind, so a big block (which does not count against the share at all)
// went back to the pool first, and the small share was still over, so a
// small one went too. A CG solver's cached array was lost to a few small
// temporaries: the very miss the commit meant to remove.
func TestHostileTinyBigCachedBlockEvictedBySmallShare(t *testing.T) {
	f := newFixture(t, nil, mempool.WithArena())
	on := f.pool.On(f.q)
	var arrays []*mempool.PooledBuffer
	for range 7 {
		b, err := on.Allocate(512 << 10)
		require.NoError(t, err)
		arrays = append(arrays, b)
	}
	// The small blocks take a segment of their own: their size is of the
	// share of the pool with it (grown by a twelfth, policy.GrowthDivisor).
	share := f.pool.Stats().ManagedBytes * 13 / 12 / mempool.CacheShare
	n := share * 2 / 7 / 512 * 512 // three fit in the share, four do not
	var small []*mempool.PooledBuffer
	for range 4 {
		b, err := on.Allocate(n)
		require.NoError(t, err)
		small = append(small, b)
	}
	s := f.pool.Stats()
	share = s.ManagedBytes / mempool.CacheShare
	require.Greater(t, 4*n, share, "four small blocks pass the cache's share")
	require.LessOrEqual(t, 3*n, share, "three do not")
	require.GreaterOrEqual(t, int64(512<<10), s.ManagedBytes/8, "a 512 KiB array's segment is big")

	require.NoError(t, arrays[0].Close()) // big: waits apart
	for _, b := range small[:3] {
		require.NoError(t, b.Close())
	}
	require.Equal(t, int64(4), queueStats(t, f.pool.Stats(), f.q).Cached)
	require.NoError(t, small[3].Close()) // the share is over by one small block: the oldest small one goes
	assert.Equal(t, int64(4), queueStats(t, f.pool.Stats(), f.q).Cached,
		"the big array and the three newest small blocks wait; only the oldest small one went back")

	locks := mempool.CountLocks(f.pool)
	b, err := on.Allocate(512 << 10)
	require.NoError(t, err)
	assert.Zero(t, locks.Load(), "the array is served by the queue's cache, not the pool")
	require.NoError(t, b.Close())
	for _, b := range arrays[1:] {
		require.NoError(t, b.Close())
	}
}

// Holds on d880f25 (regression). Tiny segments never go when the pool
// grows, but FreeHeld and Close free every one: each device allocation
// is freed exactly once (newFixture checks it at Close), FreeHeld leaves
// nothing managed, and the statistics agree throughout.
func TestHostileTinySegmentsFreedByFreeHeld(t *testing.T) {
	f := newFixture(t, nil, mempool.WithArena())
	for round := range 3 {
		var live []*mempool.PooledBuffer
		for i := range 3000 {
			size := int64(1 + i%256) // tiny
			if i%100 == 0 {
				size = 256 << 10 // now and then an array
			}
			b, err := f.pool.Allocate(size)
			require.NoError(t, err)
			live = append(live, b)
		}
		pooltest.CheckStats(t, f.pool.Stats())
		for _, b := range live {
			require.NoError(t, b.Close())
		}
		s := f.pool.Stats()
		pooltest.CheckStats(t, s)
		assert.Equal(t, s.ManagedBytes, s.HeldBytes, "round %d: every block held", round)
		require.NoError(t, mempool.CheckBlockCounts(f.pool))
		if round == 1 {
			continue // round 2 starts over what round 1 left
		}
		require.NoError(t, f.pool.FreeHeld())
		s = f.pool.Stats()
		assert.Zero(t, s.ManagedBytes, "round %d: FreeHeld frees the tiny segments too", round)
		assert.Zero(t, s.Segment.All.Current)
		assert.Zero(t, s.InactiveSplit.All.Current)
		assert.Equal(t, s.DeviceAllocs, s.DeviceFrees)
		assert.Equal(t, f.count.Stats().Allocs, f.count.Stats().Frees)
	}
}

// Holds on d880f25 (regression). The out-of-memory ladder, under a
// device budget, serves requests that fit while tiny segments and big
// cached blocks hold memory, from goroutines on several queues, without
// hanging; the statistics stay consistent (checked while they run) and
// every device allocation is freed once.
func TestHostileTinyLadderStorm(t *testing.T) {
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	q3 := cltest.SecondQueue(t, q, cl.QueueOutOfOrder)
	const budget = 4 << 20
	p, count := pooltest.NewOver(t, q, func(a allocator.Allocator) allocator.Allocator {
		return allocator.NewBudget(a, budget)
	}, mempool.WithArena())
	stop := pooltest.ReadStats(t, p, func(i int) {
		switch i % 50 {
		case 10:
			_ = p.FreeHeld()
		case 20:
			p.ResetPeak() // not ResetAccumulated: NewOver's check compares DeviceAllocs with the device's
		case 30:
			_ = p.Snapshot()
		}
	})
	var wg sync.WaitGroup
	var ooms, fails sync.Map
	for g, qq := range []*cl.CommandQueue{q, q2, q3, nil} {
		wg.Go(func() {
			alloc := p.Allocate // no queue: the pool's host cache
			if qq != nil {
				alloc = p.On(qq).Allocate
			}
			r := rand.New(rand.NewPCG(uint64(g), 7))
			var live []*mempool.PooledBuffer
			for range 1500 {
				if len(live) > 0 && r.IntN(2) == 0 {
					i := r.IntN(len(live))
					assert.NoError(t, live[i].Close())
					live = append(live[:i], live[i+1:]...)
					continue
				}
				var size int64
				switch r.IntN(4) {
				case 0:
					size = int64(1 + r.IntN(512)) // tiny
				case 1:
					size = int64(1 + r.IntN(64<<10))
				default:
					size = 512 << 10 // an array, big in a cache
				}
				b, err := alloc(size)
				if err != nil {
					if errors.Is(err, mempool.ErrOutOfMemory) {
						ooms.Store(size, true)
					} else {
						fails.Store(size, err)
					}
					// Everything this goroutine holds goes: the next
					// request must then fit what is left.
					for _, b := range live {
						assert.NoError(t, b.Close())
					}
					live = live[:0]
					continue
				}
				live = append(live, b)
			}
			for _, b := range live {
				assert.NoError(t, b.Close())
			}
		})
	}
	done := withinWork(t, "the storm", wg.Wait)
	stop()
	if !done {
		return
	}
	fails.Range(func(k, v any) bool {
		t.Errorf("a %d-byte request failed: %v", k, v)
		return true
	})
	s := p.Stats()
	t.Logf("OOMs %d, OOM retries %d, device allocs %d", s.OOMs, s.OOMRetries, s.DeviceAllocs)
	pooltest.CheckStats(t, s)
	assert.Zero(t, s.ActiveBlocks)
	assert.Equal(t, s.ManagedBytes, s.HeldBytes)
	assert.LessOrEqual(t, s.ManagedBytes, int64(budget))
	_ = count
	require.NoError(t, mempool.CheckBlockCounts(p))
	// Nothing active: now every request that fits the budget must be
	// served, the tiny segments and cached arrays notwithstanding.
	big, err := p.Allocate(budget - 64<<10)
	if assert.NoError(t, err, "with nothing active, a request of nearly the budget fits") {
		require.NoError(t, big.Close())
	}
}
