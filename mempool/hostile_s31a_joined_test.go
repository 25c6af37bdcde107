package mempool_test

// Hostile tests of the queue caches' turns (qflush.go): the "joined"
// mode a cache enters when, at its 9th turn, it finds another queue's
// operation in progress, and what it does to one goroutine's statistics
// afterwards. On 02957d1 the pool's lock taken (by Limit, say) was
// enough, and the mode outlived the concurrency by 16 of the cache's
// flushes, with turns numbered before every other cache's.

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
)

// s31aPair is a pool on three in-order queues, A, B and C, each with one
// 4 KiB block waiting in its cache.
type s31aPair struct {
	f       *fixture
	a, b, c *mempool.QueueAllocator
}

func s31aNewPair(t *testing.T, opts ...mempool.Option) *s31aPair {
	f := newFixture(t, nil, opts...)
	q2, q3 := cltest.SecondQueue(t, f.q, 0), cltest.SecondQueue(t, f.q, 0)
	p := &s31aPair{f: f, a: f.pool.On(f.q), b: f.pool.On(q2), c: f.pool.On(q3)}
	// All open at once, so that each queue's cache gets a block of its
	// own (a miss drains the other caches).
	xa, xb, xc := s31aAlloc(t, p.a, 4096), s31aAlloc(t, p.b, 4096), s31aAlloc(t, p.c, 4096)
	require.NoError(t, xa.Close()) // waits in A's cache
	require.NoError(t, xb.Close()) // waits in B's cache
	require.NoError(t, xc.Close()) // waits in C's cache
	return p
}

func s31aAlloc(t *testing.T, on *mempool.QueueAllocator, n int64) *mempool.PooledBuffer {
	t.Helper()
	x, err := on.Allocate(n)
	require.NoError(t, err)
	return x
}

// s31aRound is one goroutine's round on both queues: a cache hit and its
// Close on A, then on B: one turn of each cache.
func s31aRound(t *testing.T, p *s31aPair) {
	t.Helper()
	require.NoError(t, s31aAlloc(t, p.a, 4096).Close())
	require.NoError(t, s31aAlloc(t, p.b, 4096).Close())
}

// s31aJoinA puts A's cache in the joined mode the way goroutines on
// several queues do: one goroutine takes turns on A and B until A's cache
// is at its 9th turn (maxTurns), and at that one operation an operation
// on C is in progress (its cache's lock held). Then C's operation ends.
func s31aJoinA(t *testing.T, p *s31aPair) {
	t.Helper()
	_ = p.f.pool.Stats() // every cache flushed: no turn pending
	for range 8 {
		s31aRound(t, p)
	}
	_, turns := mempool.S31aJoined(p.f.pool, p.f.q)
	require.Equal(t, 8, turns, "A's cache is at maxTurns")
	release := mempool.S31aHoldCacheLock(p.f.pool, p.c.Queue()) // C's operation in progress
	x, err := p.a.Allocate(4096)                                // a hit: does not wait for C
	require.NoError(t, err)
	require.NoError(t, x.Close())
	joined, _ := mempool.S31aJoined(p.f.pool, p.f.q)
	release()
	require.True(t, joined, "A's cache joined its turns")
}

// s31aProbe is what one goroutine does on its own, with nothing else
// running: from no buffer open, a hit on B and its Close, then a hit on
// A. At no moment were two buffers open: every peak since ResetPeak is
// one buffer's. It returns the Stats then, and closes A's buffer.
func s31aProbe(t *testing.T, p *s31aPair) mempool.Stats {
	t.Helper()
	p.f.pool.ResetPeak()
	s := p.f.pool.Stats()
	require.Equal(t, int64(0), s.Allocation.All.Current)
	require.NoError(t, s31aAlloc(t, p.b, 4096).Close())
	x := s31aAlloc(t, p.a, 4096)
	s = p.f.pool.Stats()
	require.NoError(t, x.Close())
	return s
}

// FAILS on 02957d1: once a cache had joined its turns, its next turns
// kept the number of its last one, older than every turn another cache
// began meanwhile, so the ledger brought its later operations in first:
// one goroutine alone, which never had two buffers open after the other
// queue's operation ended, got Allocation.All.Peak 2 (expected 1) and
// RequestedBytes peak 8192 (expected 4096), in every probe until A's
// cache had been flushed 16 times. Now A's cache leaves the mode at its
// next turn, no other queue's operation being in progress.
func TestHostileS31aJoinedCacheMisordersOneGoroutine(t *testing.T) {
	for _, pol := range policies[2:] {
		t.Run(pol.name, func(t *testing.T) {
			p := s31aNewPair(t, pol.opts...)
			s31aJoinA(t, p)
			// From here on, one goroutine, nothing else running.
			wrong := 0
			for i := range 4 {
				s := s31aProbe(t, p)
				if !assert.Equal(t, int64(1), s.Allocation.All.Peak, "probe %d: never two buffers open at once", i) ||
					!assert.Equal(t, int64(4096), s.RequestedBytes.All.Peak, "probe %d: never 8 KiB asked for at once", i) {
					wrong++
				}
			}
			t.Logf("%d of 4 probes wrong, one goroutine alone", wrong)
		})
	}
}

// FAILS on 02957d1: the joined mode lasted 16 flushes of the joined
// cache itself, not of the pool: a cache that joined and then went unused
// kept it through 2000 round trips of one goroutine on B and C, a
// ResetPeak every 20, and its first probe on A was misordered
// (Allocation.All.Peak 2, expected 1).
func TestHostileS31aJoinedModeOutlivesEveryOtherFlush(t *testing.T) {
	p := s31aNewPair(t, mempool.WithDropSafety(false))
	s31aJoinA(t, p)
	for i := range 2000 {
		require.NoError(t, s31aAlloc(t, p.b, 4096).Close())
		require.NoError(t, s31aAlloc(t, p.c, 4096).Close())
		if i%20 == 0 {
			p.f.pool.ResetPeak()
		}
	}
	s := s31aProbe(t, p)
	assert.Equal(t, int64(1), s.Allocation.All.Peak, "never two buffers open at once")
}

// FAILS on 02957d1: a joined cache's own flush brought in its sums
// only, and so did the flush before an operation of its queue that takes
// p.mu (lockFlushed). So one goroutine's miss on A (2 MiB with bins,
// 8 KiB in an arena) reached the ledger before the hit and Close it made
// on B just before: Allocation.All.Peak 2 (expected 1), RequestedBytes
// peak n + 4 KiB (expected n). Now a flush that finds no other queue's
// operation in progress brings in every cache, and ends the mode.
func TestHostileS31aJoinedCacheTakesPoolLockBeforeOthersFlush(t *testing.T) {
	for _, pol := range policies[2:] {
		t.Run(pol.name, func(t *testing.T) {
			p := s31aNewPair(t, pol.opts...)
			s31aJoinA(t, p)
			// A miss the policy serves without draining the caches (a
			// drain flushes them all): with bins, a large block; in an
			// arena, a size no cache holds, from the segment's free room.
			n := int64(2 << 20)
			if pol.name == "arena/cached" {
				n = 8192
			}
			p.f.pool.ResetPeak() // flushes every cache; A stays joined
			require.NoError(t, s31aAlloc(t, p.b, 4096).Close())
			large := s31aAlloc(t, p.a, n) // takes p.mu on A
			s := p.f.pool.Stats()
			require.NoError(t, large.Close())
			assert.Equal(t, int64(1), s.Allocation.All.Peak, "B's buffer was closed before the other was allocated")
			assert.Equal(t, n, s.RequestedBytes.All.Peak, "never both asked for at once")
		})
	}
}

// FAILS on 02957d1 (it retries for up to 1 s): the same misorder,
// reached through the public API only. A goroutine reads the pool's
// Limit (it takes p.mu, on no queue) while one worker goroutine takes
// turns on two queues: the worker's cache at its 9th turn found p.mu
// taken and joined its turns. The reader stops; the worker, alone, then
// has never more than one buffer open, yet Stats showed a peak of two.
// Expected: 1. Now the 9th turn waits for p.mu: only another queue's
// operation in progress makes a cache join.
func TestHostileS31aLimitReaderLeavesWorkerMisordered(t *testing.T) {
	p := s31aNewPair(t, mempool.WithDropSafety(false))
	deadline := time.Now().Add(time.Second)
	rounds, worst := 0, int64(1)
	for time.Now().Before(deadline) && worst == 1 {
		rounds++
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Go(func() {
			for !stop.Load() {
				_ = p.f.pool.Limit()
			}
		})
		for range 200 {
			s31aRound(t, p)
		}
		stop.Store(true)
		wg.Wait()
		// The worker alone from here.
		for range 2 {
			s := s31aProbe(t, p)
			worst = max(worst, s.Allocation.All.Peak)
			p.f.pool.ResetPeak()
			// and the other way round: a hit on A and its Close, then on B.
			require.NoError(t, s31aAlloc(t, p.a, 4096).Close())
			x := s31aAlloc(t, p.b, 4096)
			s = p.f.pool.Stats()
			require.NoError(t, x.Close())
			worst = max(worst, s.Allocation.All.Peak)
		}
	}
	assert.Equal(t, int64(1), worst, fmt.Sprintf("one goroutine alone, never two buffers open (after %d rounds with a Limit reader)", rounds))
}
