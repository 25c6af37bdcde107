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

// Two blocks handed over to one out-of-order queue by two Allocates in a
// row: the first from queue A (whose slow kernel still reads it), the
// second from queue B (whose kernel is short). Each handover enqueues a
// barrier of its own on C, so the two barriers are consecutive; POCL's
// out-of-order queues honour only the last of two barriers in a row
// (doc.go, issue 21), so the fill of the first block waits only for B's
// marker and overwrites the block under A's kernel.
//
// Expected: A's kernel reads only ones (the package doc: "the pool never
// hands its memory to any queue before the commands enqueued before Close
// may have finished with it"). Observed on POCL: 1 to 8 of 8 trials
// corrupted, every run. With the second Allocate on B instead of C (no
// second barrier on C), no trial is corrupted: one handover alone is
// ordered right. Cause: queue.go's fence (and order) enqueue a barrier per
// Allocate; nothing makes a later barrier on the same out-of-order queue
// also wait for the markers of the one before it.
func TestHostileS30cConsecutiveHandoversToOutOfOrderQueue(t *testing.T) {
	q := cltest.Queue(t)
	qa := cltest.SecondQueue(t, q, 0)
	qb := cltest.SecondQueue(t, q, 0)
	qc := cltest.SecondQueue(t, q, cl.QueueOutOfOrder)
	f := pooltest.New(t, q, mempool.WithoutQueueCaches())
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
	sizeA, sizeB := int64(1<<20), int64(3<<20) // different bins

	corrupted, reused := 0, 0
	trials := cltest.Size(q, 2, 8)
	for range trials {
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

		x2, err := f.On(qc).Allocate(sizeA) // barrier on C for A's marker
		require.NoError(t, err)
		y2, err := f.On(qc).Allocate(sizeB) // barrier on C for B's marker
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
