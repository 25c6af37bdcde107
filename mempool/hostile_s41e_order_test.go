package mempool_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
)

// s41eWorker runs s41c's worker (one goroutine, queues a and b, at most
// one buffer open) against the readers until the peak passes 1 or the
// time is up, and returns the last Stats.
func s41eWorker(t *testing.T, p *mempool.Pool, a, b *mempool.QueueAllocator, readers ...func()) mempool.Stats {
	require.NoError(t, hsAlloc(t, a.Allocate, 4096).Close())
	require.NoError(t, hsAlloc(t, b.Allocate, 4096).Close())
	x := hsAlloc(t, a.Allocate, 4096)
	p.ResetPeak()
	var stop atomic.Bool
	var wg sync.WaitGroup
	for _, r := range readers {
		wg.Go(func() {
			for !stop.Load() {
				r()
			}
		})
	}
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		require.NoError(t, x.Close())                     // a: -1
		y := hsAlloc(t, b.Allocate, 4096)                 // b: a hit, +1
		require.NoError(t, y.Close())                     // b: -1
		w := hsAlloc(t, a.Allocate, 8192+512*int64(i%24)) // a: a miss, holding a's lock while it waits for p.mu
		require.NoError(t, w.Close())
		x = hsAlloc(t, a.Allocate, 4096) // a: a hit, +1
		if i%256 == 255 && p.Stats().Allocation.All.Peak > 1 {
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	s := p.Stats()
	require.NoError(t, x.Close())
	return s
}

// Found (s41e): s41c's test with the two queues the other way round in
// the pool's cache list: b (the pool's own queue, registered at New)
// comes before a (On's second queue). Fixed: releaseCaches lets go of the
// caches' locks before p.mu, and a cache lockCaches holds without p.mu is
// marked frozen, for a queue's flush to bring in with the others
// (flushIdle, Pool.frozen).
//
// lockCaches (snapshot.go), which ResetAccumulated, ResetPeak and
// flushAll now use, tries every cache's lock under p.mu, in the list's
// order, and stops at the first one taken: it then holds b's lock and
// finds a's taken (the worker's miss holds it while it waits for p.mu).
// releaseCaches then lets go of p.mu *before* the caches' locks, and after
// lockTries tries lockCaches waits for each cache's lock in turn holding
// the earlier ones, p.mu not held. Either way the worker's miss can take
// p.mu while b's lock is still held by the reader: flushCaches(a)
// (qflush.go) brings in a's turn and the miss's +1, and b's older turn
// (+1, -1: y's hit and Close) comes in after them: the ledger counts y
// while w is active, peak 2. lockCaches's comment says "it holds no
// cache's lock while it waits for p.mu, and a queue's flush meanwhile
// finds none held for it (it would bring in its own newer turns before
// that cache's)": it does hold them. Expected peak 1 (one goroutine
// uses queues, doc.go "# Many goroutines").
func TestHostileS41eResetAccumulatedSplitsTurnsListOrder(t *testing.T) {
	q := cltest.Queue(t)
	p := hsPool(t, q, mempool.WithArena())
	b := p.On(q)
	a := p.On(cltest.SecondQueue(t, q, 0))
	s := s41eWorker(t, p, a, b, p.ResetAccumulated)
	assert.Equal(t, int64(1), s.Allocation.All.Peak, "one buffer open at most, on one goroutine")
}

// The same, with a second reader taking Snapshots, which hold every
// cache's lock a long while: ResetAccumulated's tries fail and it waits
// for each cache's lock in turn, holding the earlier ones (lockCaches's
// second way). Expected peak 1.
func TestHostileS41eResetAccumulatedBesideSnapshots(t *testing.T) {
	q := cltest.Queue(t)
	p := hsPool(t, q, mempool.WithArena())
	a := p.On(q)
	b := p.On(cltest.SecondQueue(t, q, 0))
	s := s41eWorker(t, p, a, b, p.ResetAccumulated, func() { _ = p.Snapshot() })
	assert.Equal(t, int64(1), s.Allocation.All.Peak, "one buffer open at most, on one goroutine")
}

// Found (s41e), same cause, fixed as above (the gap between lockCaches's
// Lock of a cache and its mark is narrowed, not closed: see Pool.frozen),
// no Reset at all: two goroutines calling only
// Stats, one worker as above (b before a in the cache list). Expected
// Allocation.All.Peak 1 (in the readers' Stats too), got 2, within a
// fraction of a second. One reader holds every cache's lock; the other's
// tries under p.mu fail, and lockCaches (snapshot.go) then waits for each
// cache's lock in list order holding the earlier ones, without p.mu, or
// lets go of p.mu before the caches it holds (releaseCaches): the
// worker's miss on a takes p.mu meanwhile, flushCaches(a) (qflush.go)
// finds b's lock held and brings a's newer turn and the miss in before
// b's older turn. So lockCaches's own claim ("it holds no cache's lock
// while it waits for p.mu, and a queue's flush meanwhile finds none held
// for it") is false, and Stats, Snapshot, ResetPeak, ResetAccumulated and
// flushAll all inherit it.
func TestHostileS41eTwoStatsReaders(t *testing.T) {
	q := cltest.Queue(t)
	p := hsPool(t, q, mempool.WithArena())
	b := p.On(q)
	a := p.On(cltest.SecondQueue(t, q, 0))
	var peak atomic.Int64
	read := func() { peak.Store(max(peak.Load(), p.Stats().Allocation.All.Peak)) }
	s := s41eWorker(t, p, a, b, read, read)
	assert.Equal(t, int64(1), s.Allocation.All.Peak, "one buffer open at most, on one goroutine")
	assert.Equal(t, int64(1), peak.Load())
}
