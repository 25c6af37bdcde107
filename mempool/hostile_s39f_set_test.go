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
	ws := newS39fWaitingSet(t, "")
	if ws == nil {
		return
	}
	require.NoError(t, ws.dead.Release()) // before the Set makes anything of it
	close(ws.releaseA)
	require.NoError(t, <-ws.aDone)
	r := <-ws.bDone
	if r.err == nil {
		t.Logf("Set.Pool of the queue released before the pool was made returned a pool (stats: %+v)", countersOf(r.p.Stats()))
	}

	b, err := ws.s.On(ws.qb).Allocate(100)
	if assert.NoError(t, err, "a live queue of context B is served: the released queue made no pool of B") {
		require.NoError(t, b.Close())
	}
}

// s39fWaitingSet is a Set (closed at the test's end) whose making of
// context A's pool blocks, holding the Set's lock, until releaseA is
// closed, and a request for the pool of dead, a new queue of context B
// (qb's), that waits for that lock: Set.Pool's answer comes on bDone, the
// pool of A's error on aDone.
type s39fWaitingSet struct {
	s        *mempool.Set
	qb, dead *cl.CommandQueue
	releaseA chan struct{}
	aDone    chan error
	bDone    chan s39fPoolResult
}

// s39fPoolResult is what Set.Pool returned.
type s39fPoolResult struct {
	p   *mempool.Pool
	err error
}

// newS39fWaitingSet makes an s39fWaitingSet once its request is seen
// waiting (s39fBlockedIn); nil if it is not (the test has failed, and
// releaseA is closed). If skip is not "", the test is skipped on a
// simulator, with that reason, before a queue of B is made.
func newS39fWaitingSet(t *testing.T, skip string) *s39fWaitingSet {
	t.Helper()
	qa := cltest.Queue(t) // context A: its pool's making blocks, holding the Set's lock
	qb := cltest.Queue(t) // context B: live
	require.True(t, qa.Context() != qb.Context(), "two contexts")
	if skip != "" && cltest.Simulator(qb) {
		t.Skip(skip)
	}
	dead, err := cl.NewCommandQueue(qb.Context(), qb.Device(), 0)
	require.NoError(t, err)

	enteredA := make(chan struct{})
	ws := &s39fWaitingSet{qb: qb, dead: dead, releaseA: make(chan struct{}), aDone: make(chan error, 1), bDone: make(chan s39fPoolResult, 1)}
	ws.s = mempool.NewSet(func(q *cl.CommandQueue) (allocator.Allocator, error) {
		if q.Context() == qa.Context() {
			close(enteredA)
			<-ws.releaseA
		}
		return allocator.NewImmediate(q, cl.MemReadWrite)
	})
	t.Cleanup(func() { assert.NoError(t, ws.s.Close()) })
	go func() {
		_, err := ws.s.Pool(qa)
		ws.aDone <- err
	}()
	<-enteredA
	go func() {
		p, err := ws.s.Pool(dead) // not released yet: its first look passes
		ws.bDone <- s39fPoolResult{p, err}
	}()
	if !s39fBlockedIn(t, "(*Set).poolOf") {
		close(ws.releaseA)
		return nil
	}
	return ws
}
