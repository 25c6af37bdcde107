package mempool_test

import (
	"sync"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Review s46e: queueState's slow path (a lockCaches held p.listMu, so
// its TryLock failed) takes p.listMu for writing and looks again from the
// top (queueStateListed), q.Finished() included, which waits for a
// Release of q under way: as long as q's commands take, holding p.listMu.
// Meanwhile the On of any other new queue (and any lockCaches past its
// tries under p.mu: Stats, Snapshot, FreeHeld, drains) waited for that
// unrelated queue's commands, the very wait s36a took out of On (an On
// waited for another queue's commands). Here x's On is kept on p.listMu
// by a Stats, x's Release begins behind a slow kernel, and the On of a
// fresh queue y must not wait for x's kernel (with the fix x's On may
// register x, as when x's Release begins just after its first look).
func TestHostileS46eOnWaitsNotForAnotherQueuesRelease(t *testing.T) {
	q := cltest.Queue(t)
	p := hsPool(t, q)
	x, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
	require.NoError(t, err)
	const n = 64
	k, _ := s35dSlowKernel(t, x, n, 3*time.Second)
	buf, err := q.Context().CreateBuffer(cl.MemReadWrite, 4*n)
	require.NoError(t, err)
	t.Cleanup(func() { buf.Release() })
	iters := s46eSlowIters(t, x, k, buf, n, 3*time.Second)

	var wg sync.WaitGroup
	released := make(chan struct{})
	first := true
	undo := mempool.SetLockCachesWaited(func() {
		if !first {
			return
		}
		first = false
		// This Stats holds p.listMu (read) now: x's On finds it taken,
		// lets p.mu go and waits for it.
		wg.Go(func() { _ = p.On(x) })      // x is registered or not: its Release begins after On's first look
		time.Sleep(200 * time.Millisecond) // x's On waits for p.listMu
		// x's Release begins, its clFinish waiting for the slow kernel.
		require.NoError(t, k.SetArgs(buf, int64(0), int32(1), int32(iters)))
		require.NoError(t, x.EnqueueKernel(k, []int{n}, nil))
		require.NoError(t, x.Flush())
		go func() {
			defer close(released)
			t1 := time.Now()
			assert.NoError(t, x.Release())
			t.Logf("x's Release took %v", time.Since(t1))
		}()
		deadline := time.Now().Add(5 * time.Second)
		for x.Flush() == nil { // refused once Release has begun
			require.True(t, time.Now().Before(deadline), "Release never began")
			time.Sleep(100 * time.Microsecond)
		}
	})
	_ = p.Stats()
	undo()

	// x's On holds p.listMu now, in x.Finished(), until x's kernel ends.
	y := cltest.SecondQueue(t, q, 0)
	onY := make(chan struct{})
	t0 := time.Now()
	go func() {
		defer close(onY)
		_ = p.On(y)
	}()
	select {
	case <-onY:
	case <-time.After(30 * time.Second):
		require.Fail(t, "On(y) did not return")
	}
	took := time.Since(t0)
	t.Logf("On(y) took %v", took)
	select {
	case <-released:
		assert.Fail(t, "On of a new queue waited for another queue's Release (its commands)", "On(y) took %v", took)
	default:
	}
	<-released
	wg.Wait()
	lines := p.Stats().Queues
	assert.Equal(t, y, lines[len(lines)-1].Queue, "y registered")
}

// s46eSlowIters returns the iterations that make k (s35dSlow) over n
// work-items run about d on x: doubled from a warm probe until a run takes
// 200ms at least (s35dSlowKernel's one probe, cold, is often far off).
func s46eSlowIters(t *testing.T, x *cl.CommandQueue, k *cl.Kernel, buf *cl.Buffer, n int, d time.Duration) int {
	t.Helper()
	for iters := 1 << 14; ; iters *= 2 {
		require.NoError(t, k.SetArgs(buf, int64(0), int32(1), int32(iters)))
		t0 := time.Now()
		require.NoError(t, x.EnqueueKernel(k, []int{n}, nil))
		require.NoError(t, x.Finish())
		if took := time.Since(t0); took >= 200*time.Millisecond || iters >= 1<<29 {
			return min(int(float64(iters)*float64(d)/float64(took)), 1<<30)
		}
	}
}
