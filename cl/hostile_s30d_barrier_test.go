package cl_test

import (
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// EnqueueBarrier's doc (sync.go) promises: "no command enqueued on q
// after it starts before the events of wait complete". On a POCL
// out-of-order queue, two barriers with wait lists in a row break it: a
// command after the second waits only for the second's events. Here
// barrier 1 waits for a slow kernel on queue A that reads x, barrier 2
// for an event already complete; the fill of x after them runs at once
// and the kernel reads 7s.
//
// Expected: the kernel reads only ones (every barrier's wait holds, as
// the specification and the doc say; the package doc says it checks
// runtimes' deviations itself so that every runtime answers the same).
// Observed on POCL: the fill overtakes barrier 1. This is the root of
// mempool's s30c fix (which chains the pool's own barriers through
// gates) and of TestHostileS30dUserBarrierAfterHandoverOutOfOrder
// (a user's barrier after the pool's breaks the pool's ordering): fixing
// it here (on an out-of-order queue, a barrier with a wait list as a
// marker on the list, then a barrier on that marker: POCL makes every
// non-barrier command wait for the last barrier) would fix both.
func TestHostileS30dTwoBarriersInARowOutOfOrder(t *testing.T) {
	q := cltest.Queue(t)
	qa := cltest.SecondQueue(t, q, 0)
	qc := cltest.SecondQueue(t, q, cl.QueueOutOfOrder)
	k := cltest.SlowReadKernel(t, qa)
	n := 64
	iters := cltest.Size(q, 100, 2000000)
	x, err := q.Context().CreateBuffer(cl.MemReadWrite, int64(4*n))
	require.NoError(t, err)
	defer x.Release()
	out, err := q.Context().CreateBuffer(cl.MemReadWrite, int64(4*n))
	require.NoError(t, err)
	defer out.Release()
	ones := make([]int32, n)
	for i := range ones {
		ones[i] = 1
	}
	corrupted := 0
	trials := cltest.Size(q, 2, 8)
	for range trials {
		require.NoError(t, qa.WriteBuffer(x, 0, cl.Bytes(ones)))
		require.NoError(t, k.SetArgs(x, out, int32(iters)))
		ev, err := qa.EnqueueNDRangeKernel(k, nil, []int{n}, nil)
		require.NoError(t, err)
		require.NoError(t, qa.Flush())
		done, err := q.EnqueueMarker()
		require.NoError(t, err)
		require.NoError(t, done.Wait())

		require.NoError(t, qc.EnqueueBarrier(ev))   // nothing after it before the kernel ends
		require.NoError(t, qc.EnqueueBarrier(done)) // nor before done (complete)
		fill, err := qc.EnqueueFillBuffer(x, cl.Bytes([]int32{7}), 0, int64(4*n))
		require.NoError(t, err)
		require.NoError(t, fill.Wait())
		require.NoError(t, fill.Release())
		require.NoError(t, qc.Finish())
		require.NoError(t, qa.Finish())
		require.NoError(t, ev.Release())
		require.NoError(t, done.Release())
		got := make([]int32, n)
		require.NoError(t, qa.ReadBuffer(out, 0, cl.Bytes(got)))
		for _, v := range got {
			if v != int32(iters) {
				corrupted++
				break
			}
		}
	}
	assert.Zero(t, corrupted, "a command after two barriers ran before the first barrier's event, in %d of %d trials", corrupted, trials)
}
