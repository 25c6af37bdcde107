package mempool_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The pool hands a block over to an out-of-order queue C with
// cl.CommandQueue.EnqueueBarrier (queue.go:130 and :234), which there is
// now a marker and a barrier enqueued one after the other with nothing
// holding them together; the commit that moved the chaining into cl also
// took out the pool's barrierMu. Meanwhile another goroutine of the user
// enqueues barriers of its own on C (a queue "is safe for concurrent use",
// cl's doc; mempool's doc forbids nothing of the sort): when one of them
// straddles the pool's (its marker before the pool's marker, its barrier
// after the pool's barrier), POCL honours only that last barrier, which
// does not wait for A's kernel, and the user's fill of the block after the
// Allocate returned overwrites it under A's kernel. (Two handovers racing
// on C, from two goroutines allocating there, can interleave the same
// way; not tested here.)
//
// GOMAXPROCS(1) lets the runtime's preemption (every 10 ms, anywhere)
// sometimes stop the user's barrier goroutine between its marker and its
// barrier while the Allocate runs whole.
//
// Expected: A's kernel reads only ones in every trial (package doc: the
// pool never hands its memory to another queue before the commands
// enqueued before Close may have finished with it). Observed on POCL: 9,
// 12, 16, 11 and 13 of 60 trials corrupted in five runs (with a test-only
// mutex around EnqueueBarrier's marker and barrier, in a scratch copy: 0
// of 60 in two runs). Cause: cl/sync.go:38-45 (EnqueueBarrier's marker
// and barrier are not enqueued atomically); see
// TestHostileS30fConcurrentBarriersOutOfOrder in package cl.
func TestHostileS30fHandoverRacingUserBarriers(t *testing.T) {
	q := cltest.Queue(t)
	if cltest.Simulator(q) {
		t.Skip("the simulator runs an out-of-order queue in order, and a stream of barriers is slow there")
	}
	qa := cltest.SecondQueue(t, q, 0)
	qc := cltest.SecondQueue(t, q, cl.QueueOutOfOrder)
	f := pooltest.New(t, q, mempool.WithoutQueueCaches())
	ka := cltest.SlowReadKernel(t, qa)
	n := 64
	itersA := cltest.Size(q, 100, 4000000)
	outA, err := q.Context().CreateBuffer(cl.MemReadWrite, int64(4*n))
	require.NoError(t, err)
	t.Cleanup(func() { outA.Release() })
	done, err := q.EnqueueMarker()
	require.NoError(t, err)
	require.NoError(t, done.Wait())
	t.Cleanup(func() { done.Release() })
	size := int64(1 << 20)

	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	corrupted, reused := 0, 0
	trials := cltest.Size(q, 3, 30)
	for range trials {
		x, err := f.On(qa).Allocate(size)
		require.NoError(t, err)
		require.NoError(t, qa.WriteBuffer(x.Base(), x.Offset(), cl.Bytes(allOnes(n))))
		require.NoError(t, ka.SetArgs(x.Buffer(), outA, int32(itersA)))
		require.NoError(t, qa.EnqueueKernel(ka, []int{n}, nil))
		require.NoError(t, qa.Flush())
		xb, xo := x.Base(), x.Offset()
		require.NoError(t, x.Close())

		var stop atomic.Bool
		started := make(chan struct{})
		var wg sync.WaitGroup
		var errS, errM error
		var x2 *mempool.PooledBuffer
		wg.Add(2)
		go func() { // the user's own barriers on C, on a complete event
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				if errS = qc.EnqueueBarrier(done); errS != nil {
					return
				}
				if i == 0 {
					close(started)
				}
			}
		}()
		go func() {
			defer wg.Done()
			<-started
			x2, errM = f.On(qc).Allocate(size) // the pool's handover barrier on C
			stop.Store(true)
		}()
		wg.Wait()
		require.NoError(t, errS)
		require.NoError(t, errM)
		if x2.Base() == xb && x2.Offset() == xo {
			reused++
		}
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
	require.Positive(t, reused, "the test must exercise reuse")
	assert.Zero(t, corrupted, "A's kernel read a block the out-of-order queue filled, in %d of %d trials", corrupted, trials)
}
