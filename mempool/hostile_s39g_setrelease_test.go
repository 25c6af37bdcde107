package mempool_test

// Hostile review s39g: Set.poolOf's second look at a released queue.

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s39gSeenIn waits (at most a minute) until some goroutine's stack holds
// every one of frames, and reports whether one was seen (no timing: a
// goroutine is seen where it is).
func s39gSeenIn(t *testing.T, frames ...string) bool {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	buf := make([]byte, 8<<20)
	for time.Now().Before(deadline) {
		n := runtime.Stack(buf, true)
	next:
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			for _, f := range frames {
				if !strings.Contains(g, f) {
					continue next
				}
			}
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Errorf("no goroutine was seen in %q within a minute", frames)
	return false
}

// Fixed this session (it failed before): a Set asked first on a queue whose Release has begun (it
// waits in clFinish for the queue's last kernel) while the request waits
// for the Set's lock makes the context's pool over that queue: once the
// Release ends, every request of the context, on live queues too, fails
// for good.
//
// Contract: Set.Pool: "a released queue makes none (an error matching
// cl.ErrInvalidCommandQueue)"; Set.On: "a pool that cannot be made (a
// released queue makes none) give an allocator whose Allocate and
// FreeHeld return the error"; the fix of s39f: "a Set checks again, under
// its lock, that the queue was not released meanwhile". Here the Release
// began before that second check (seen in clFinish, past its flag).
//
// Observed: Set.Pool(dead) returns a pool and no error; a live queue of
// the context is refused.
//
// Likely cause: mempool/set.go, Set.poolOf's second check is
// q.FinishedNoWait(), false "while a Release is under way": a Release
// begun (released set, not yet finished) passes it. The check under s.mu
// has to refuse a Release begun too (Hold/TryHold fail then), not only one
// finished.
func TestHostileS39gSetQueueReleaseUnderWayAtTheSecondCheck(t *testing.T) {
	cltest.Watchdog(t, 5*time.Minute)
	ws := newS39fWaitingSet(t, "needs a kernel that keeps a Release in clFinish a while: too slow on a simulator")
	if ws == nil {
		return
	}
	s, qb, dead, releaseA := ws.s, ws.qb, ws.dead, ws.releaseA

	// A long kernel on dead, so that its Release stays in clFinish.
	n := 64
	k := cltest.SlowReadKernel(t, dead)
	x, err := qb.Context().CreateBuffer(cl.MemReadWrite, int64(4*n))
	require.NoError(t, err)
	defer x.Release()
	out, err := qb.Context().CreateBuffer(cl.MemReadWrite, int64(4*n))
	require.NoError(t, err)
	defer out.Release()
	iters := int32(1 << 27)
	require.NoError(t, k.SetArgs(x, out, iters))
	require.NoError(t, dead.EnqueueKernel(k, []int{n}, nil))
	require.NoError(t, dead.Flush())
	relDone := goErr(dead.Release)
	if !s39gSeenIn(t, "(*CommandQueue).Release", "_Cfunc_clFinish") {
		close(releaseA)
		return
	}
	// The Release has begun (its flag is set before clFinish): now the
	// request's second check, under the Set's lock.
	close(releaseA)
	require.NoError(t, <-ws.aDone)
	r := <-ws.bDone
	select {
	case err := <-relDone:
		require.NoError(t, err)
	case <-time.After(workLimit):
		t.Fatal("the queue's Release did not return")
	}
	if r.err == nil {
		t.Logf("Set.Pool of a queue whose Release had begun returned a pool (stats: %+v)", countersOf(r.p.Stats()))
	}
	assert.True(t, r.err == nil || errors.Is(r.err, cl.ErrInvalidCommandQueue), "Set.Pool's error: %v", r.err)
	b, err := s.On(qb).Allocate(100)
	if assert.NoError(t, err, "a live queue of context B is served: the released queue made no pool of B") {
		require.NoError(t, b.Close())
	}
}
