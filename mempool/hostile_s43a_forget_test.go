package mempool_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
)

// Found (s43a): a goroutine that registers queues and releases them
// (On of a new queue, no request on it: "a queue per task, released
// after", which RecordQueue's doc invites) beside the one-goroutine
// worker on queues a and b, at most one buffer open. Every 16th or so
// On runs forgetReleased, which, per forgotten queue, empties its cache
// with emptyCacheLocked -> flushCaches(qs) -> flushIdle: it brings in
// every cache whose lock is free and skips the one the worker's miss
// holds while it waits for p.mu (marked waiting: heldByOp). That is the
// per-cache flush s41g took out of drain (a cache brought in alone, its
// newer turns before a busy cache's older ones), left in
// forgetReleased. The registering goroutine uses no queue's operation;
// doc.go's "# Many goroutines" says only goroutines using queues at the
// same time can make a peak off. Expected peak 1. Fixed: forgetReleased
// takes every cache's lock at once (lockCaches), which brings every
// cache's sums in, turn by turn, before it empties the released ones.
func TestHostileS43aForgetReleasedSplitsTurns(t *testing.T) {
	q := cltest.Queue(t)
	p := hsPool(t, q, mempool.WithArena())
	b := p.On(q)
	a := p.On(cltest.SecondQueue(t, q, 0))
	register := func() {
		q3, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
		require.NoError(t, err)
		_ = p.On(q3) // registered: no request on it
		require.NoError(t, q3.Release())
	}
	s := s41eWorker(t, p, a, b, register)
	assert.Equal(t, int64(1), s.Allocation.All.Peak, "one buffer open at most, on one goroutine")
}
