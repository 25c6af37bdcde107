package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fixed this session (it failed before): a Set asked first on a queue already released makes that
// context's pool over an allocator of the released queue (the default
// newAlloc's allocator.Immediate, or ImmediateSVM), and answers the
// request with "On of a released queue". The pool stays: every later
// request of the context, on live queues too, fails at its probe with
// CL_INVALID_COMMAND_QUEUE, for the life of the Set.
//
// Contracts: package doc, Misuse: "Bad input ... is an error that
// changes nothing"; Pool.On: "On of a released queue is an error"; Set.On:
// "A nil queue, a closed Set, or a pool that cannot be made give an
// allocator whose Allocate and FreeHeld return the error" (the Set's
// nil-queue check refuses before it makes a pool; a released queue is
// refused only after). The Set's doc asks that the first queue "stay
// unreleased until the Set is closed": a queue released before it was
// ever asked about is not that first queue, and the Set refused it.
//
// Cause (guess): mempool/set.go, Set.poolOf checks q == nil but not
// q.Finished() before it calls newSource(q) and keeps the pool; the
// released queue is refused only afterwards, by Pool.On's queueState.
func TestHostileS39aSetFirstAskedOnAReleasedQueue(t *testing.T) {
	for _, svm := range []bool{false, true} {
		name := "buffers"
		if svm {
			name = "svm"
		}
		t.Run(name, func(t *testing.T) {
			var q *cl.CommandQueue
			var s *mempool.Set
			if svm {
				q = cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
				s = mempool.NewSVMSet(nil)
			} else {
				q = cltest.Queue(t)
				s = mempool.NewSet(nil)
			}
			defer func() { assert.NoError(t, s.Close()) }()
			dead, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
			require.NoError(t, err)
			require.NoError(t, dead.Release())

			_, err = s.On(dead).Allocate(100)
			require.ErrorIs(t, err, cl.ErrInvalidCommandQueue, "a released queue is refused")

			b, err := s.On(q).Allocate(100)
			require.NoError(t, err, "a live queue of the same context is served: the refused request changed nothing")
			require.NoError(t, b.Close())
		})
	}
}

// Fixed this session (it failed before): the same through Set.Pool: asked for a released queue's pool, it
// makes and returns one whose allocator probes on the released queue,
// so that pool.Allocate (and every On of the context) fails for good.
// Set.Pool: "Pool returns the pool of q's context, making it if there is
// none yet" — a pool that cannot allocate at all.
func TestHostileS39aSetPoolOfAReleasedQueue(t *testing.T) {
	q := cltest.Queue(t)
	s := mempool.NewSet(nil)
	defer func() { assert.NoError(t, s.Close()) }()
	dead, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
	require.NoError(t, err)
	require.NoError(t, dead.Release())

	p, err := s.Pool(dead)
	if err != nil {
		require.ErrorIs(t, err, cl.ErrInvalidCommandQueue)
		assert.Empty(t, s.Stats().Devices, "a refused queue makes no pool")
	} else {
		b, err := p.Allocate(100)
		if err == nil {
			require.NoError(t, b.Close())
		}
		require.NoError(t, err, "the pool the Set made can allocate")
	}
	b, err := s.On(q).Allocate(100)
	require.NoError(t, err, "a live queue of the same context is served")
	require.NoError(t, b.Close())
}

// With an allocator of no queue (newAlloc: a Deferred), the pool a
// released queue makes still serves live queues. (Shows that it is the
// default allocator's queue that poisons the context above.)
func TestHostileS39aSetReleasedQueueWithDeferred(t *testing.T) {
	q := cltest.Queue(t)
	s := mempool.NewSet(func(q *cl.CommandQueue) (allocator.Allocator, error) {
		return allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	})
	defer func() { assert.NoError(t, s.Close()) }()
	dead, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
	require.NoError(t, err)
	require.NoError(t, dead.Release())
	_, err = s.On(dead).Allocate(100)
	require.ErrorIs(t, err, cl.ErrInvalidCommandQueue)
	b, err := s.On(q).Allocate(100)
	require.NoError(t, err)
	require.NoError(t, b.Close())
}
