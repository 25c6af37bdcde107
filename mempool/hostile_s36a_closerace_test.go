package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Run with -race. Pool.Close takes `queues := p.queues` under p.mu, lets
// go of it, and reads each element (pool.go: `if qs == nil`, then
// qs.release()) without the lock; forgetReleased, on another goroutine,
// writes `p.queues[qs.id-1] = nil` (on.go) under p.mu into the same
// backing array. Here the forgetting pass of an On of a new queue is kept
// waiting on an unrelated queue's Release (Finished waits for it) while
// Close runs; when the Release returns, the pass forgets that queue and
// writes its slot, which Close read unsynchronized: the race detector
// reports a data race (on.go:198 write vs pool.go:206 read). Before the
// feature no element of p.queues was ever written after it was appended.
func TestHostileS36aCloseRacesForgetReleased(t *testing.T) {
	for range 4 {
		f := newFixture(t, nil)
		iters := cltest.Size(f.q, 20000, 30000000)
		s36aFill(t, f, mempool.ForgetMin-1)
		released := s36aSlowRelease(t, f, iters) // the pass will wait on it
		fresh := cltest.SecondQueue(t, f.q, 0)
		done := make(chan *mempool.QueueAllocator, 1)
		go func() { done <- f.pool.On(fresh) }() // runs the pass
		require.True(t, within(t, "Close", func() { assert.NoError(t, f.pool.Close()) }))
		require.True(t, withinWork(t, "On", func() { <-released; <-done }))
	}
}
