package mempool_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// statsOf is Stats without what differs by design between a pool whose
// queues cache blocks and one whose do not: the cache's own count, and
// what depends on the shapes of free blocks, which an arena merges at once
// but a cache keeps apart until drained (as the arena's quick lists do).
func statsOf(p *mempool.Pool) mempool.Stats {
	s := p.Stats()
	for i := range s.Queues {
		s.Queues[i].Cached = 0
	}
	if s.Policy == "arena" {
		s.Fragmentation = 0
		s.HeldBlocks = 0
		s.InactiveSplit, s.InactiveSplitBytes = mempool.StatGroup{}, mempool.StatGroup{}
	}
	return s
}

// queueStats returns the figures of q in s.
func queueStats(t *testing.T, s mempool.Stats, q *cl.CommandQueue) mempool.QueueStats {
	t.Helper()
	for _, qs := range s.Queues {
		if qs.Queue == q {
			return qs
		}
	}
	t.Fatalf("no figures for queue %p", q)
	return mempool.QueueStats{}
}

// The queue caches change where held blocks wait, not what the pool
// counts: a random sequence on one queue gives the same statistics, peaks
// included, step by step, with them (with drop safety and without) and
// without them.
func TestQueueCacheCountsLikeThePool(t *testing.T) {
	for i, pol := range policies[:2] {
		for _, drop := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/dropsafety=%v", pol.name, drop), func(t *testing.T) {
				cachedOpts := []mempool.Option{mempool.WithDropSafety(drop)}
				if i == 1 {
					cachedOpts = append(cachedOpts, mempool.WithArena())
				}
				queueCacheCountsLikeThePool(t, newFixture(t, nil, pol.opts...), newFixture(t, nil, cachedOpts...))
			})
		}
	}
}

func queueCacheCountsLikeThePool(t *testing.T, plain, cached *fixture) {
	rng := rand.New(rand.NewPCG(1, 2))
	var live [2][]*mempool.PooledBuffer
	for step := range cltest.Size(plain.q, 300, 3000) {
		if len(live[0]) > 0 && rng.IntN(2) == 0 {
			i := rng.IntN(len(live[0]))
			for k, f := range []*fixture{plain, cached} {
				require.NoError(t, live[k][i].Close())
				live[k] = append(live[k][:i], live[k][i+1:]...)
				_ = f
			}
		} else {
			size := int64(64 << rng.IntN(8))
			for k, f := range []*fixture{plain, cached} {
				b, err := f.pool.Allocate(size)
				require.NoError(t, err)
				live[k] = append(live[k], b)
			}
		}
		if step%7 == 0 {
			require.Equal(t, statsOf(plain.pool), statsOf(cached.pool), "step %d", step)
		}
	}
	for k := range live {
		for _, b := range live[k] {
			require.NoError(t, b.Close())
		}
	}
	s := cached.pool.Stats()
	assert.Positive(t, s.Queues[0].Cached, "blocks waited in the queue's cache")
	assert.Equal(t, statsOf(plain.pool), statsOf(cached.pool))
}

// A block waiting in one queue's cache serves another queue (after a
// handover) rather than the pool allocating more; FreeHeld frees it; the
// snapshot shows it held. (An arena would serve the other queue from its
// segment's free space: exact bins show the drain.)
func TestQueueCacheIsSharedAndFreed(t *testing.T) {
	for _, pol := range policies[2:3] {
		t.Run(pol.name, func(t *testing.T) {
			f := newFixture(t, nil, pol.opts...)
			q1, q2 := f.pool.On(cltest.SecondQueue(t, f.q, 0)), f.pool.On(cltest.SecondQueue(t, f.q, 0))
			of := func(s mempool.Stats, a *mempool.QueueAllocator) mempool.QueueStats {
				return queueStats(t, s, a.Queue())
			}
			b, err := q1.Allocate(4096)
			require.NoError(t, err)
			require.NoError(t, b.Close())
			s := f.pool.Stats()
			require.Equal(t, int64(1), of(s, q1).Cached)
			assert.Equal(t, 1, s.HeldBlocks)
			for _, seg := range f.pool.Snapshot().Segments {
				for _, blk := range seg.Blocks {
					assert.NotEqual(t, mempool.StateActive, blk.State)
				}
			}

			c, err := q2.Allocate(4096)
			require.NoError(t, err)
			s = f.pool.Stats()
			assert.Equal(t, int64(1), s.DeviceAllocs, "the cached block served the other queue")
			assert.Equal(t, int64(1), of(s, q2).Handovers)
			assert.Zero(t, of(s, q1).Cached)
			require.NoError(t, c.Close())

			b, err = q2.Allocate(4096)
			require.NoError(t, err)
			assert.Equal(t, c.Offset(), b.Offset())
			assert.Equal(t, int64(1), of(f.pool.Stats(), q2).Handovers, "reuse on its own queue needs no handover")
			require.NoError(t, b.Close())

			require.NoError(t, f.pool.FreeHeld())
			s = f.pool.Stats()
			assert.Zero(t, s.HeldBlocks)
			assert.Zero(t, s.ManagedBytes)
			assert.Zero(t, of(s, q2).Cached)
		})
	}
}

// Stats read while goroutines allocate on their queues stay consistent.
func TestQueueCacheStatsUnderConcurrency(t *testing.T) {
	f := newFixture(t, nil, mempool.WithArena(), mempool.WithDropSafety(false))
	stopReading := pooltest.ReadStats(t, f.pool, func(int) { _ = f.pool.Snapshot() })
	var workers sync.WaitGroup
	for w := range 4 {
		on := f.pool.On(cltest.SecondQueue(t, f.q, 0))
		workers.Add(1)
		go func() {
			defer workers.Done()
			for i := range 500 {
				b, err := on.Allocate(int64(64 << ((w + i) % 12)))
				if assert.NoError(t, err) {
					assert.NoError(t, b.Close())
				}
			}
		}()
	}
	workers.Wait()
	stopReading()
	s := f.pool.Stats()
	var requests int64
	for _, q := range s.Queues {
		requests += q.Requests
	}
	assert.Equal(t, int64(2000), requests)
	assert.Equal(t, requests, s.Hits+s.Misses)
}

// FreeHeld frees an arena's segment whose blocks wait in queue caches.
func TestQueueCacheFreeHeldInAnArena(t *testing.T) {
	f := newFixture(t, nil, mempool.WithArena(), mempool.WithDropSafety(false))
	on := f.pool.On(cltest.SecondQueue(t, f.q, 0))
	var bs []*mempool.PooledBuffer
	for _, n := range []int64{500, 1000, 2000} { // within the cache's share of a first segment
		b, err := on.Allocate(n)
		require.NoError(t, err)
		bs = append(bs, b)
	}
	for _, b := range bs {
		require.NoError(t, b.Close())
	}
	s := f.pool.Stats()
	require.Equal(t, int64(3), queueStats(t, s, on.Queue()).Cached)
	assert.Equal(t, s.ManagedBytes, s.HeldBytes)
	require.NoError(t, f.pool.FreeHeld())
	s = f.pool.Stats()
	assert.Zero(t, s.ManagedBytes)
	assert.Zero(t, queueStats(t, s, on.Queue()).Cached)
}

// The review's cases: a cached block is the largest held one; a block
// given back after a hook panicked does not go to a cache; RecordQueue and
// Close may race without a data race (the race detector checks).
func TestQueueCacheEdges(t *testing.T) {
	f := newFixture(t, nil, mempool.WithDropSafety(false))
	b, err := f.pool.Allocate(4096)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	s := f.pool.Stats()
	require.Equal(t, int64(1), s.Queues[0].Cached)
	assert.Zero(t, s.Fragmentation, "one held block: nothing fragmented")

	remove := f.pool.AddHook(&panicOnce{kind: mempool.MallocAfter})
	_, err = f.pool.Allocate(100)
	require.ErrorIs(t, err, mempool.ErrPanicked)
	remove()
	s = f.pool.Stats()
	assert.Equal(t, 2, s.HeldBlocks)
	assert.Zero(t, s.Queues[0].Cached, "the miss drained the cache, and the block given back under a hook went to the pool, not the cache")

	q2 := cltest.SecondQueue(t, f.q, 0)
	for range 50 {
		b, err := f.pool.Allocate(4096)
		require.NoError(t, err)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.RecordQueue(q2); err != nil {
				assert.ErrorIs(t, err, mempool.ErrClosed)
			}
		}()
		require.NoError(t, b.Close())
		wg.Wait()
	}
}

// A pool of a few segments, each one array (a CG solver's seven 512 KiB
// vectors), keeps a block that covers its segment in the queue's cache
// though it is larger than the cache's share of the pool: waiting there
// it keeps nothing from merging. Before, every such Close went back to
// the policy, and every request after took the pool's lock (cg's replay
// ran at 2.3 times exact bins' time).
func TestQueueCacheKeepsWholeSegments(t *testing.T) {
	f := newFixture(t, nil, mempool.WithArena())
	on := f.pool.On(f.q)
	var arrays []*mempool.PooledBuffer
	for range 7 {
		b, err := on.Allocate(512 << 10)
		require.NoError(t, err)
		arrays = append(arrays, b)
	}
	require.Equal(t, int64(7), f.pool.Stats().DeviceAllocs, "one segment each")
	for _, b := range arrays[:3] {
		require.NoError(t, b.Close())
	}
	assert.Equal(t, int64(3), queueStats(t, f.pool.Stats(), f.q).Cached,
		"three whole 512 KiB segments wait (up to half the pool), where the share is 1/16")
	for range 5 {
		b, err := on.Allocate(512 << 10)
		require.NoError(t, err)
		require.NoError(t, b.Close())
	}
	for _, b := range arrays[3:] {
		require.NoError(t, b.Close())
	}
	s := f.pool.Stats()
	assert.Equal(t, int64(3), queueStats(t, s, f.q).Cached, "at most half the pool: the oldest went back")
	assert.Equal(t, int64(7), s.DeviceAllocs)
}

// One goroutine on two queues: a put into B's cache, then a hit from A's
// cache. Summed per cache and brought in A's first (as the pool did when
// an operation on A took its lock), they counted one buffer more than
// were ever open at once. The caches' turns bring them in the order they
// were made (qflush.go), on both policies.
func TestQueueCachesCountInTheOrderOfTheirTurns(t *testing.T) {
	for _, pol := range policies[2:4] {
		t.Run(pol.name, func(t *testing.T) {
			f := newFixture(t, nil, pol.opts...)
			onA, onB := f.pool.On(f.q), f.pool.On(cltest.SecondQueue(t, f.q, 0))
			alloc := func(on *mempool.QueueAllocator, n int64) *mempool.PooledBuffer {
				b, err := on.Allocate(n)
				require.NoError(t, err)
				return b
			}
			large := alloc(onA, 2<<20) // never cached: its Close takes p.mu on A
			a := alloc(onA, 4096)
			require.NoError(t, a.Close()) // into A's cache
			b := alloc(onB, 4096)
			s := f.pool.Stats() // every cache flushed: large and b open
			require.Equal(t, int64(2), s.Allocation.All.Current)
			require.Equal(t, int64(2), s.Allocation.All.Peak)
			require.NoError(t, b.Close()) // into B's cache: 1 open
			a = alloc(onA, 4096)          // from A's cache: 2 open
			require.NoError(t, large.Close())
			s = f.pool.Stats()
			assert.Equal(t, int64(1), s.Allocation.All.Current)
			assert.Equal(t, int64(2), s.Allocation.All.Peak, "never more than 2 buffers open")
			assert.Equal(t, int64(1), s.Allocation.Small.Peak, "never more than 1 small buffer open")
			require.NoError(t, a.Close())
		})
	}
}

// One goroutine on three queues of one pool keeps 8 buffers open: it
// closes one on one queue, then allocates one on another, many more
// times than a cache keeps turns between two flushes (maxTurns), with
// every block from a cache but the first 8. Applied out of order, a
// cache's allocations came before another's Closes, and the peak passed
// 8.
func TestQueueCachesPeaksOfOneGoroutineOnThreeQueues(t *testing.T) {
	for _, pol := range policies[2:4] {
		t.Run(pol.name, func(t *testing.T) {
			f := newFixture(t, nil, pol.opts...)
			ons := []*mempool.QueueAllocator{f.pool.On(f.q), f.pool.On(cltest.SecondQueue(t, f.q, 0)), f.pool.On(cltest.SecondQueue(t, f.q, 0))}
			rng := rand.New(rand.NewPCG(7, 31))
			type held struct {
				b  *mempool.PooledBuffer
				on int
			}
			var open []held
			alloc := func(on int) {
				b, err := ons[on].Allocate(4096)
				require.NoError(t, err)
				open = append(open, held{b, on})
			}
			for i := range 8 {
				alloc(i % len(ons))
			}
			for range 2000 {
				i := rng.IntN(len(open))
				h := open[i]
				require.NoError(t, h.b.Close())
				open = append(open[:i], open[i+1:]...)
				alloc((h.on + 1 + rng.IntN(len(ons)-1)) % len(ons)) // another queue
			}
			s := f.pool.Stats()
			assert.Equal(t, int64(8), s.Allocation.All.Peak, "buffers open at once")
			assert.Equal(t, int64(8*4096), s.RequestedBytes.All.Peak, "bytes asked for at once")
			assert.Less(t, s.Misses, int64(100), "most requests served by a queue's cache")
			for _, h := range open {
				require.NoError(t, h.b.Close())
			}
		})
	}
}
