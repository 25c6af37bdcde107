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

// s36aSlowRelease registers a queue x with the pool (On), runs a slow
// kernel on it, and starts x.Release() on a goroutine: until the kernel
// ends, x.Finished() (which forgetReleased calls) waits. It returns a
// channel closed once Release returned, and how long the kernel runs
// about.
func s36aSlowRelease(t *testing.T, f *fixture, iters int) <-chan struct{} {
	t.Helper()
	x, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
	require.NoError(t, err)
	k := cltest.SlowReadKernel(t, x)
	n := 64
	out, err := f.q.Context().CreateBuffer(cl.MemReadWrite, int64(4*n))
	require.NoError(t, err)
	t.Cleanup(func() { out.Release() })
	b, err := f.pool.On(x).Allocate(int64(4 * n))
	require.NoError(t, err)
	require.NoError(t, x.WriteBuffer(b.Base(), b.Offset(), cl.Bytes(allOnes(n))))
	require.NoError(t, k.SetArgs(b.Buffer(), out, int32(iters)))
	require.NoError(t, x.EnqueueKernel(k, []int{n}, nil))
	require.NoError(t, x.Flush())
	require.NoError(t, b.Close())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = x.Release() // clFinish: as long as the kernel runs
	}()
	time.Sleep(100 * time.Millisecond) // Release under way: Finished now waits for it
	return done
}

// s36aFill registers live queues with the pool (On) until it keeps want
// queue states; they are released at the test's end.
func s36aFill(t *testing.T, f *fixture, want int) {
	t.Helper()
	for mempool.QueueStates(f.pool) < want {
		q := cltest.SecondQueue(t, f.q, 0)
		b, err := f.pool.On(q).Allocate(256)
		require.NoError(t, err)
		require.NoError(t, b.Close())
	}
}

// Two goroutines register the same new queue while the pool's forgetting
// pass runs (here a pass kept waiting by an unrelated queue's Release:
// Finished waits for it). The goroutine that ran the pass finds the queue
// registered by the other when it comes back, and returns early, without
// setting forgetAt back from math.MaxInt: the pool never forgets a
// released queue again, and a program making a queue per task grows
// without bound, which is what the feature was for (doc.go: "a queue per
// task costs the pool a line of Stats.Queues, not a queue's state").
func TestHostileS36aForgetStopsAfterRegistrationRace(t *testing.T) {
	f := newFixture(t, nil)
	iters := cltest.Size(f.q, 20000, 200000000)
	s36aFill(t, f, mempool.ForgetMin-1)
	released := s36aSlowRelease(t, f, iters) // the 16th state: the next new queue runs a pass
	require.Equal(t, mempool.ForgetMin, mempool.QueueStates(f.pool))

	shared := cltest.SecondQueue(t, f.q, 0)
	var wg sync.WaitGroup
	start := time.Now()
	var took time.Duration
	wg.Go(func() { f.pool.On(shared); took = time.Since(start) }) // runs the pass, waits in it
	time.Sleep(100 * time.Millisecond)
	f.pool.On(shared) // registers shared meanwhile (no pass: one at a time)
	t.Logf("second On returned after %v", time.Since(start))
	ok := withinWork(t, "the forgetting pass", func() { <-released; wg.Wait() })
	require.True(t, ok)
	t.Logf("first On (the pass) took %v", took)

	// Now a queue per task, each released after use.
	const tasks = 6 * mempool.ForgetMin
	for range tasks {
		useOnce(t, f, 4096)
	}
	assert.LessOrEqual(t, mempool.QueueStates(f.pool), 4*mempool.ForgetMin,
		"queue states kept after %d released task queues: the pool stopped forgetting", tasks)
}
