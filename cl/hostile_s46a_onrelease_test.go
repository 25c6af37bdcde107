package cl_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s46aWithin runs f on a goroutine of its own and reports whether it
// returned within d (a hang is left behind, not waited for).
func s46aWithin(d time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// A DefaultQueue's Release released its context, and so ran the context's
// OnRelease functions, with the queue's releasing lock held: a function
// that asked the queue Finished (or Hold, as mempool does on the queues it
// orders on: a pool Closed from OnRelease) waited for that lock for ever.
// OnRelease promises "no lock of the context held"; the queue's was. So
// did a function that releases the queues made on the context (the
// DefaultQueue among them: Release is idempotent), as a cache of queues
// would: the lock is not reentrant.
func TestHostileS46aOnReleaseMayAskTheDefaultQueue(t *testing.T) {
	q, err := cl.DefaultQueue()
	require.NoError(t, err)
	var finished, held bool
	var again error
	require.NoError(t, q.Context().OnRelease(func() {
		again = q.Release()
		finished = q.Finished()
		held = q.Hold()
		if held {
			q.Unhold()
		}
	}))
	ok := s46aWithin(10*time.Second, func() { assert.NoError(t, q.Release()) })
	require.True(t, ok, "the queue's Release hung in its context's OnRelease function")
	assert.NoError(t, again, "a second Release of the queue is a no-op")
	assert.True(t, finished, "the queue was released, its commands finished")
	assert.False(t, held, "a released queue is not held")
}

// Release recovered a panic in an OnRelease function but not
// runtime.Goexit (t.FailNow, require in a test's hook): the goroutine
// unwound through Release, the later functions did not run, and
// clReleaseContext was never called, yet the context was marked released,
// so no later Release could release it (leaked for good).
func TestHostileS46aOnReleaseGoexitStillReleases(t *testing.T) {
	ctx := onReleaseContext(t)
	ran := false
	require.NoError(t, ctx.OnRelease(func() { ran = true }))
	require.NoError(t, ctx.OnRelease(func() { runtime.Goexit() }))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ctx.Release()
	}()
	<-done
	assert.True(t, ran, "the function registered before the one that called Goexit ran, and then clReleaseContext")
}
