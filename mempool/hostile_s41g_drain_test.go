package mempool_test

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
)

// Found (s41g): FreeHeld from another goroutine (which uses no queue)
// beside s41c's one-goroutine worker (queues b, then a, in the cache
// list; at most one buffer open). Expected Allocation.All.Peak 1 (doc.go
// "# Many goroutines": only goroutines using queues at the same time can
// be off); got 2 within a fraction of a second (every run on 2+ CPUs).
// Cause: drain (qcache.go), which FreeHeld and StopHolding use, takes
// b's cache lock and then waits for p.mu holding it, without the frozen
// mark that dd77f3d gives lockCaches. The worker's miss on a, under p.mu,
// then finds b's lock taken; flushIdle (qflush.go) asks Pool.frozen,
// which says no at once (p.inspecting is 0), so it counts b busy and
// brings a's newer turns and the miss (+1) in before b's older turn
// (y's hit and Close, +1 -1), which drain's emptyCacheLocked(b) brings in
// after, while w is active: peak 2. The same split dd77f3d closed for
// Stats and the Resets, on the drain path it left as it was. Fixed: drain
// takes every cache's lock at once (lockCaches) and empties them all in
// one hold of p.mu; forgetReleased marks the cache it holds frozen
// (lockFrozen).
func TestHostileS41gFreeHeldSplitsTurns(t *testing.T) {
	q := cltest.Queue(t)
	p := hsPool(t, q, mempool.WithArena())
	b := p.On(q)
	a := p.On(cltest.SecondQueue(t, q, 0))
	s := s41eWorker(t, p, a, b, func() { _ = p.FreeHeld() })
	assert.Equal(t, int64(1), s.Allocation.All.Peak, "one buffer open at most, on one goroutine")
}

// Guard (s41g): eight readers (six Stats, ResetAccumulated, Snapshot)
// beside the one-goroutine worker: lockCaches's blocking phase and its
// frozen marks under contention. Peak 1 in the last Stats and in every
// reader's. (The gap between a Lock and its mark that Pool.frozen admits
// did not show here, with -cpu 1, 2 and 4.)
func TestHostileS41gManyStatsReaders(t *testing.T) {
	q := cltest.Queue(t)
	p := hsPool(t, q, mempool.WithArena())
	b := p.On(q)
	a := p.On(cltest.SecondQueue(t, q, 0))
	var peak atomic.Int64
	read := func() { peak.Store(max(peak.Load(), p.Stats().Allocation.All.Peak)) }
	s := s41eWorker(t, p, a, b, read, read, read, read, read, read, p.ResetAccumulated, func() { _ = p.Snapshot() })
	assert.Equal(t, int64(1), s.Allocation.All.Peak, "one buffer open at most, on one goroutine")
	assert.Equal(t, int64(1), peak.Load())
}
