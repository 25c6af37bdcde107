package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s30dHandover runs trials of: a block used by a slow kernel on in-order
// queue A, closed, then taken by an Allocate on out-of-order queue C
// (a handover: the pool enqueues its gate and barrier on C); then
// between(C) (the user's own, legal, commands on C); then a fill of the
// block on C. It returns how many trials A's kernel read a filled value,
// and how many trials reused A's block.
func s30dHandover(t *testing.T, between func(t *testing.T, qc *cl.CommandQueue, qb *cl.CommandQueue)) (corrupted, reused, trials int) {
	q := cltest.Queue(t)
	qa := cltest.SecondQueue(t, q, 0)
	qb := cltest.SecondQueue(t, q, 0)
	qc := cltest.SecondQueue(t, q, cl.QueueOutOfOrder)
	f := pooltest.New(t, q, mempool.WithoutQueueCaches())
	ka := cltest.SlowReadKernel(t, qa)
	n := 64
	itersA := cltest.Size(q, 100, 2000000)
	outA, err := q.Context().CreateBuffer(cl.MemReadWrite, int64(4*n))
	require.NoError(t, err)
	t.Cleanup(func() { outA.Release() })
	size := int64(1 << 20)
	trials = cltest.Size(q, 2, 8)
	for range trials {
		x, err := f.On(qa).Allocate(size)
		require.NoError(t, err)
		require.NoError(t, qa.WriteBuffer(x.Base(), x.Offset(), cl.Bytes(allOnes(n))))
		require.NoError(t, ka.SetArgs(x.Buffer(), outA, int32(itersA)))
		require.NoError(t, qa.EnqueueKernel(ka, []int{n}, nil))
		require.NoError(t, qa.Flush())
		xb, xo := x.Base(), x.Offset()
		require.NoError(t, x.Close())

		x2, err := f.On(qc).Allocate(size) // the pool's gate and barrier on C
		require.NoError(t, err)
		if x2.Base() == xb && x2.Offset() == xo {
			reused++
		}
		between(t, qc, qb)
		fill, err := qc.EnqueueFillBuffer(x2.Base(), cl.Bytes([]int32{7}), x2.Offset(), x2.Size())
		require.NoError(t, err)
		require.NoError(t, fill.Wait())
		require.NoError(t, fill.Release())
		require.NoError(t, qc.Finish())
		require.NoError(t, x2.Close())
		require.NoError(t, qa.Finish())
		if slowReadCorrupted(t, qa, outA, n, itersA) {
			corrupted++
		}
	}
	return corrupted, reused, trials
}

// After the pool's handover barrier on an out-of-order queue, the user
// enqueues a barrier of their own on that queue, with a wait list (an
// event of another queue, already complete: say "wait for my upload on
// B"). That is legal OpenCL and says nothing about the block. POCL
// honours only the last of two barriers in a row on an out-of-order queue
// (the very defect the gate was added for), so the user's barrier
// replaces the pool's and the fill after it no longer waits for A's
// kernel. (Control: with a barrier with no wait list, a marker, or
// nothing in between, 0 of 8 trials are corrupted; s30c's test is the
// same harness.)
//
// Expected: A's kernel reads only ones (package doc: the pool never hands
// its memory to any queue before the commands enqueued before Close may
// have finished with it; nothing in the doc forbids the user's barriers).
// Cause: queue.go:60-85 (barrier) chains the pool's own barriers
// through gates, but the last command the pool leaves on C is still a
// bare barrier (queue.go:76, EnqueueBarrier(gate)), which a following
// barrier of the user's supersedes (root cause in cl: see
// TestHostileS30dTwoBarriersInARowOutOfOrder).
//
// Fixed at that root: cl's EnqueueBarrier, on an out-of-order queue, makes
// a barrier with a wait list wait on a marker of it, which waits for the
// barrier before; the pool's gates went with it.
func TestHostileS30dUserBarrierAfterHandoverOutOfOrder(t *testing.T) {
	corrupted, reused, trials := s30dHandover(t, func(t *testing.T, qc, qb *cl.CommandQueue) {
		ev, err := qb.EnqueueMarker()
		require.NoError(t, err)
		require.NoError(t, ev.Wait())
		require.NoError(t, qc.EnqueueBarrier(ev))
		require.NoError(t, ev.Release())
	})
	require.Positive(t, reused, "the test must exercise reuse")
	assert.Zero(t, corrupted, "A's kernel read a block the out-of-order queue filled, in %d of %d trials", corrupted, trials)
}

// A request under way when Close begins can hand a block over after
// Close released the queues (qstate.release sets gateOff); queue.go
// barrier then enqueues a bare barrier (the "a handover racing the
// pool's Close keeps no gate" branch), which, on POCL's out-of-order
// queues, supersedes the gated barrier of the handover before it. The
// block that earlier handover gave out (before Close, still open and
// valid after it, as the doc says) loses its ordering: the user's fill of
// it, enqueued after, overwrites it under A's kernel.
//
// The test puts the racing handover there without a race: it does to C's
// state what Close does (S30dReleaseQueue, hostile_s30d_export_test.go)
// between the two Allocates; the rest is the s30c test's sequence.
//
// Expected: A's kernel reads only ones (a handover racing Close is still
// ordered; blocks open at Close stay valid). Cause: queue.go barrier,
// the gateOff branch (queue.go:66-67, `return r.q.EnqueueBarrier(wait...)`):
// after release it drops the chaining, so the barrier is again a bare
// one after a gated one, the sequence the gate was added to avoid.
// (Fixed in cl's EnqueueBarrier, as the test above; no gate is left.)
func TestHostileS30dHandoverRacingClose(t *testing.T) {
	q := cltest.Queue(t)
	qa := cltest.SecondQueue(t, q, 0)
	qb := cltest.SecondQueue(t, q, 0)
	qc := cltest.SecondQueue(t, q, cl.QueueOutOfOrder)
	ka := cltest.SlowReadKernel(t, qa)
	kb := cltest.SlowReadKernel(t, qb)
	n := 64
	itersA, itersB := cltest.Size(q, 100, 2000000), cltest.Size(q, 10, 20000)
	outA, err := q.Context().CreateBuffer(cl.MemReadWrite, int64(4*n))
	require.NoError(t, err)
	t.Cleanup(func() { outA.Release() })
	outB, err := q.Context().CreateBuffer(cl.MemReadWrite, int64(4*n))
	require.NoError(t, err)
	t.Cleanup(func() { outB.Release() })
	sizeA, sizeB := int64(1<<20), int64(3<<20)

	corrupted, reused := 0, 0
	trials := cltest.Size(q, 2, 8)
	for range trials {
		f := pooltest.New(t, q, mempool.WithoutQueueCaches()) // a pool per trial: each trial's Close
		x, err := f.On(qa).Allocate(sizeA)
		require.NoError(t, err)
		require.NoError(t, qa.WriteBuffer(x.Base(), x.Offset(), cl.Bytes(allOnes(n))))
		require.NoError(t, ka.SetArgs(x.Buffer(), outA, int32(itersA)))
		require.NoError(t, qa.EnqueueKernel(ka, []int{n}, nil))
		require.NoError(t, qa.Flush())
		xb, xo := x.Base(), x.Offset()
		require.NoError(t, x.Close())

		y, err := f.On(qb).Allocate(sizeB)
		require.NoError(t, err)
		require.NoError(t, qb.WriteBuffer(y.Base(), y.Offset(), cl.Bytes(allOnes(n))))
		require.NoError(t, kb.SetArgs(y.Buffer(), outB, int32(itersB)))
		require.NoError(t, qb.EnqueueKernel(kb, []int{n}, nil))
		require.NoError(t, qb.Flush())
		require.NoError(t, y.Close())

		x2, err := f.On(qc).Allocate(sizeA) // before Close: gated barrier on C for A's marker
		require.NoError(t, err)
		require.NoError(t, mempool.S30dReleaseQueue(f, qc)) // Close reaches C's state
		y2, err := f.On(qc).Allocate(sizeB)                 // the request under way: bare barrier on C for B's marker
		require.NoError(t, err)
		if x2.Base() == xb && x2.Offset() == xo {
			reused++
		}
		fill, err := qc.EnqueueFillBuffer(x2.Base(), cl.Bytes([]int32{7}), x2.Offset(), x2.Size())
		require.NoError(t, err)
		require.NoError(t, fill.Wait())
		require.NoError(t, fill.Release())
		require.NoError(t, qc.Finish())
		require.NoError(t, x2.Close())
		require.NoError(t, y2.Close())
		require.NoError(t, qa.Finish())
		if slowReadCorrupted(t, qa, outA, n, itersA) {
			corrupted++
		}
	}
	require.Positive(t, reused, "the test must exercise reuse")
	assert.Zero(t, corrupted, "A's kernel read a block the out-of-order queue filled, in %d of %d trials", corrupted, trials)
}
