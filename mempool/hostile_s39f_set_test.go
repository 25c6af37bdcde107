package mempool_test

import (
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fixed this session (it failed before): a Set asked first on a queue whose Release ends while the request
// waits for the Set's lock (another context's pool being made) makes the
// context's pool over the released queue, and every later request of the
// context, on live queues too, fails for good: the bug aac4774 fixed,
// back through a window.
//
// Contract: Set.Pool (after aac4774): "a released queue makes none (an
// error matching cl.ErrInvalidCommandQueue)"; Set.On: "a pool that
// cannot be made (a released queue makes none) give an allocator whose
// Allocate and FreeHeld return the error"; package doc, Misuse: "Bad
// input ... is an error that changes nothing". The queue here is released
// before the Set makes anything of it.
//
// Likely cause: mempool/set.go, Set.poolOf reads q.Finished() before it
// takes s.mu ("before s.mu: it waits for a Release under way") and
// trusts it after: newAlloc runs under s.mu and may take as long as it
// likes (the doc allows it), and the queue's Release lands in between.
func TestHostileS39fSetQueueReleasedWhileWaitingForTheSetsLock(t *testing.T) {
	cltest.Watchdog(t, 5*time.Minute)
	qa := cltest.Queue(t) // context A: its pool's making blocks, holding the Set's lock
	qb := cltest.Queue(t) // context B: live
	dead, err := cl.NewCommandQueue(qb.Context(), qb.Device(), 0)
	require.NoError(t, err)

	enteredA, releaseA := make(chan struct{}), make(chan struct{})
	s := mempool.NewSet(func(q *cl.CommandQueue) (allocator.Allocator, error) {
		if q.Context() == qa.Context() {
			close(enteredA)
			<-releaseA
		}
		return allocator.NewImmediate(q, cl.MemReadWrite)
	})
	defer func() { assert.NoError(t, s.Close()) }()

	aDone := make(chan error, 1)
	go func() {
		_, err := s.Pool(qa)
		aDone <- err
	}()
	<-enteredA
	type result struct {
		p   *mempool.Pool
		err error
	}
	bDone := make(chan result, 1)
	go func() {
		p, err := s.Pool(dead)
		bDone <- result{p, err}
	}()
	if !s39fBlockedIn(t, "(*Set).poolOf") {
		close(releaseA)
		return
	}
	require.NoError(t, dead.Release()) // before the Set makes anything of it
	close(releaseA)
	require.NoError(t, <-aDone)
	r := <-bDone
	if r.err == nil {
		t.Logf("Set.Pool of the queue released before the pool was made returned a pool (stats: %+v)", countersOf(r.p.Stats()))
	}

	b, err := s.On(qb).Allocate(100)
	if assert.NoError(t, err, "a live queue of context B is served: the released queue made no pool of B") {
		require.NoError(t, b.Close())
	}
}
