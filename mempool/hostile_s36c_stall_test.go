package mempool_test

import (
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// order's doc: "The pool holds one queue at a time, and while it holds one
// waits for no hold, nor for a lock whose holder may wait for one" (s36a
// made forgetting use FinishedNoWait, "an On waited for another queue's
// kernel"; s36b moved the sanitizer's waits out of s.mu, "an Allocate
// waited on the sanitizer's lock for another task's Release"). But with
// the sanitizer, fence holds the marker lock of the queue waited for
// (qs.mu of the shared queue B) while it Holds the closed buffer's queue
// A (barrier, holdR): when A's Release begins between checkAtClose's
// queueOf and that Hold, the Hold waits for A's whole Release (its long
// kernel) with B's marker lock held, and every other request or Close
// that must wait for B's commands waits for A's kernel too.
//
// Here task A's buffer and task D's buffer were both used on the shared
// queue B (RecordQueue). A hold of A by a third goroutine (cl's Hold: a
// goroutine that does not own A calls on it) only widens the window: A's
// Release is pending when the consumer closes A's buffer, and the hold
// ends at once after. Then D's owner closes D's buffer, on D, which has
// nothing to do with A: it waits for A's kernel.
func TestHostileS36cCloseOnOtherQueueWaitsForAnotherTasksKernel(t *testing.T) {
	f := newFixture(t, nil, mempool.WithSanitizer(), mempool.WithSanitizerOutput(&syncBuffer{}))
	qb := cltest.SecondQueue(t, f.q, 0)
	qd := cltest.SecondQueue(t, f.q, 0)
	const n = 64
	iters := int32(cltest.Size(f.q, 20000, 40000000))
	x, err := f.q.Context().CreateBuffer(cl.MemReadWrite, 4*n)
	require.NoError(t, err)
	defer x.Release()
	scratch, err := f.q.Context().CreateBuffer(cl.MemReadWrite, 4*n)
	require.NoError(t, err)
	defer scratch.Release()

	// Control: D's Close, alone.
	d0, err := f.pool.On(qd).Allocate(4096)
	require.NoError(t, err)
	require.NoError(t, d0.RecordQueue(qb))
	start := time.Now()
	require.NoError(t, d0.Close())
	alone := time.Since(start)

	qa, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
	require.NoError(t, err)
	k := cltest.SlowReadKernel(t, qa)
	a, err := f.pool.On(qa).Allocate(4096)
	require.NoError(t, err)
	require.NoError(t, a.RecordQueue(qb))
	d, err := f.pool.On(qd).Allocate(4096)
	require.NoError(t, err)
	require.NoError(t, d.RecordQueue(qb))
	require.NoError(t, k.SetArgs(x, scratch, iters))
	// Control 2: a Close on D while A's kernel runs, nothing else pending.
	d1, err := f.pool.On(qd).Allocate(4096)
	require.NoError(t, err)
	require.NoError(t, d1.RecordQueue(qb))
	require.NoError(t, qa.EnqueueKernel(k, []int{n}, nil))
	require.NoError(t, qa.Flush())
	time.Sleep(10 * time.Millisecond)
	start = time.Now()
	require.NoError(t, d1.Close())
	busy := time.Since(start)
	require.NoError(t, qa.Finish())
	require.NoError(t, qa.EnqueueKernel(k, []int{n}, nil))
	require.NoError(t, qa.Flush())

	require.True(t, qa.Hold()) // a goroutine that calls on A, not its owner
	released := make(chan time.Duration, 1)
	relStart := time.Now()
	go func() { _ = qa.Release(); released <- time.Since(relStart) }()
	for qa.TryHold() { // until A's Release waits
		qa.Unhold()
		time.Sleep(time.Millisecond)
	}
	closedA := make(chan error, 1)
	go func() { closedA <- a.Close() }() // a consumer closes A's buffer
	time.Sleep(100 * time.Millisecond)   // it reaches the fence on B
	qa.Unhold()                          // the hold ends: A's Release runs its kernel

	start = time.Now()
	var dErr error
	if !within(t, "D's Close", func() { dErr = d.Close() }) {
		return
	}
	took := time.Since(start)
	rel := <-released
	require.NoError(t, <-closedA)
	require.NoError(t, dErr)
	t.Logf("D's Close alone: %v; while A's kernel runs: %v; beside A's Release: %v (A's Release took %v)", alone, busy, took, rel)
	assert.Less(t, took, 20*max(alone, busy)+50*time.Millisecond,
		"D's Close, on D, waited for task A's kernel (A's Release: %v) through B's marker lock", rel)
}
