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

// Found (s41c), failing at 0ea326b: expected Allocation.All.Peak 1, got
// 2 (within a few thousand rounds, well under a second here). Fixed:
// flushAll, ResetPeak and ResetAccumulated take every cache's lock
// (lockCaches) before they bring anything in.
//
// One worker goroutine on two in-order queues A and B, never more than
// one buffer open; another goroutine calls only ResetAccumulated (no
// queue). doc.go ("# Many goroutines") says the counters see every
// operation in order, "so only a peak across queues used by goroutines at
// the same time can be off": here one goroutine alone uses queues, so the
// peak must be 1.
//
// Each round: x.Close() on A (a put: A's turn, -1), a hit and its Close on
// B (B's turn: +1, -1), then a miss on A, which holds A's cache lock while
// it waits for p.mu (allocateCached's miss, then lockFlushed). If
// ResetAccumulated takes p.mu then, flushAll's first pass, flushIdle(nil)
// (qflush.go:flushAll), finds A's lock taken and brings in every other
// cache, B's turn included, without A's older turn: the ledger counts B's
// hit while x is still active (1 + 1 = 2), then A's put. ResetAccumulated
// zeroes the totals but keeps that peak. flushAll's comment says it holds
// no lock while it waits "so that a queue's flush never ... brings in
// newer turns before that cache's (a Stats reader would split one
// goroutine's turns)", but its own first pass does just that. Stats and
// Snapshot do not (lockCaches takes every cache's lock before it flushes
// anything), and ResetPeak resets the peak it inflated; ResetAccumulated
// does not, nor the ladder's rungCollect.
func TestHostileS41cResetAccumulatedSplitsOneWorkersTurns(t *testing.T) {
	q := cltest.Queue(t)
	p := hsPool(t, q, mempool.WithArena())
	a, b := p.On(q), p.On(cltest.SecondQueue(t, q, 0))
	require.NoError(t, hsAlloc(t, a.Allocate, 4096).Close())
	require.NoError(t, hsAlloc(t, b.Allocate, 4096).Close())
	x := hsAlloc(t, a.Allocate, 4096)
	p.ResetPeak()
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Go(func() {
		for !stop.Load() {
			p.ResetAccumulated()
		}
	})
	deadline := time.Now().Add(3 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		require.NoError(t, x.Close())                          // A: -1
		y := hsAlloc(t, b.Allocate, 4096)                      // B: a hit, +1
		require.NoError(t, y.Close())                          // B: -1
		w := hsAlloc(t, a.Allocate, 8192+512*int64(i%24))      // A: a miss (a size not cached), +1
		require.NoError(t, w.Close())                          // -1
		x = hsAlloc(t, a.Allocate, 4096)                       // A: a hit, +1
		if i%256 == 255 && p.Stats().Allocation.All.Peak > 1 { // Stats flushes in order
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	s := p.Stats()
	require.NoError(t, x.Close())
	assert.Equal(t, int64(1), s.Allocation.All.Peak, "one buffer open at most, on one goroutine")
	assert.Equal(t, int64(1), s.Allocation.Small.Peak)
}
