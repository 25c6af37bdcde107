package cl_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s30fSlow enqueues the slow kernel on qa and returns its event: a
// command that runs for a good while.
func s30fSlow(t *testing.T, qa *cl.CommandQueue, k *cl.Kernel, x, out *cl.Buffer, n, iters int) *cl.Event {
	require.NoError(t, k.SetArgs(x, out, int32(iters)))
	ev, err := qa.EnqueueNDRangeKernel(k, nil, []int{n}, nil)
	require.NoError(t, err)
	require.NoError(t, qa.Flush())
	return ev
}

// EnqueueBarrier on an out-of-order queue is now two enqueues (a marker
// on the wait list, then a barrier on the marker), and nothing keeps them
// together, while CommandQueue's doc says a queue "is safe for concurrent
// use". On POCL a marker waits for every command before it on the queue
// (so a marker enqueued between ours and our barrier still waits for
// ours), but when another goroutine's EnqueueBarrier straddles ours (its
// marker before our marker, its barrier after our barrier), its barrier
// is the last one, POCL honours only the last barrier, and that one waits
// on a marker enqueued before ours: our barrier's wait is lost, as before
// the fix. (mempool lost its barrierMu in the same commit: see
// mempool/hostile_s30f_order_test.go.)
//
// Here one goroutine keeps calling qc.EnqueueBarrier(done) (done:
// complete) while another calls qc.EnqueueBarrier(slow) once (slow: a
// long kernel on in-order queue A) and then stops the first. With one P,
// the runtime's preemption (every 10 ms, at any instruction) now and then
// parks the first goroutine between its marker and its barrier, and the
// second makes its whole call meanwhile. Once both have returned, a fill
// (an ordinary command) is enqueued on qc and waited for.
//
// Expected: slow has completed whenever the fill has (EnqueueBarrier's
// doc: no command enqueued on q after it starts before the events of
// wait complete). Observed on POCL: in a few of 100 trials (3 to 6 of 60
// in four runs) the fill completes while slow still runs. Cause:
// cl/sync.go:38-45, the marker and the barrier are two enqueues with no
// lock around them. Control: with a (test-only) mutex around the pair in
// a scratch copy, 0 of 60 in three runs.
func TestHostileS30fConcurrentBarriersOutOfOrder(t *testing.T) {
	q := cltest.Queue(t)
	if cltest.Simulator(q) {
		t.Skip("the simulator runs an out-of-order queue in order, and a stream of barriers is slow there")
	}
	qa := cltest.SecondQueue(t, q, 0)
	qc := cltest.SecondQueue(t, q, cl.QueueOutOfOrder)
	k := cltest.SlowReadKernel(t, qa)
	n := 64
	iters := cltest.Size(q, 100, 4000000)
	x, err := q.Context().CreateBuffer(cl.MemReadWrite, int64(4*n))
	require.NoError(t, err)
	defer x.Release()
	out, err := q.Context().CreateBuffer(cl.MemReadWrite, int64(4*n))
	require.NoError(t, err)
	defer out.Release()
	out2, err := q.Context().CreateBuffer(cl.MemReadWrite, 64)
	require.NoError(t, err)
	defer out2.Release()
	done, err := q.EnqueueMarker()
	require.NoError(t, err)
	require.NoError(t, done.Wait())
	defer done.Release()

	// One P: the goroutine spamming barriers keeps it until the runtime
	// preempts it (after 10 ms, at any instruction), here and there
	// between the marker and the barrier of one EnqueueBarrier; the other
	// goroutine then makes its whole call, and the spammer, resumed,
	// enqueues its barrier after it and stops.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	lost := 0
	trials := cltest.Size(q, 3, 40)
	for range trials {
		slow := s30fSlow(t, qa, k, x, out, n, iters)
		var stop atomic.Bool
		started := make(chan struct{})
		var wg sync.WaitGroup
		var errS, errM error
		wg.Add(2)
		go func() { // another goroutine's barriers, on a complete event
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
			errM = qc.EnqueueBarrier(slow) // nothing after it before slow ends
			stop.Store(true)
		}()
		wg.Wait()
		require.NoError(t, errS)
		require.NoError(t, errM)
		probe, err := qc.EnqueueFillBuffer(out2, cl.Bytes([]int32{7}), 0, 4)
		require.NoError(t, err)
		require.NoError(t, probe.Wait())
		ss, err := slow.Status()
		require.NoError(t, err)
		if ss != cl.Complete {
			lost++
		}
		require.NoError(t, probe.Release())
		require.NoError(t, slow.Release())
	}
	require.NoError(t, qa.Finish())
	require.NoError(t, qc.Finish())
	assert.Zero(t, lost, "a command enqueued after EnqueueBarrier(slow) returned completed before slow, in %d of %d trials", lost, trials)
}
