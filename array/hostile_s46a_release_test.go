package array_test

import (
	"sync"
	"testing"
	"time"

	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s46aContext returns a context of its own on the selected device and n
// queues of it; the queues are released at the end of the test.
func s46aContext(t *testing.T, n int) (*cl.Context, []*cl.CommandQueue) {
	t.Helper()
	dev := cltest.Queue(t).Device()
	ctx, err := cl.CreateContext(dev)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ctx.Release() })
	qs := make([]*cl.CommandQueue, n)
	for i := range qs {
		qs[i], err = cl.NewCommandQueue(ctx, dev, 0)
		require.NoError(t, err)
		q := qs[i]
		t.Cleanup(func() { _ = q.Release() })
	}
	return ctx, qs
}

// Operations on several queues of one context, from several goroutines,
// while the context is released and ReleaseKernels is called: each
// operation succeeds or fails with an error, none crashes, and the cache
// ends empty and unhooked.
func TestHostileS46aOpsRaceContextRelease(t *testing.T) {
	cltest.Watchdog(t, 2*time.Minute)
	for range 3 {
		ctx, qs := s46aContext(t, 3)
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			ok, fail int
		)
		for _, q := range qs {
			x, err := array.Full[float32](q, 256, 1, array.Alloc(nil))
			require.NoError(t, err)
			wg.Go(func() {
				defer x.Close()
				for range 20 {
					if s, err := array.Sum(x); err == nil {
						assert.Equal(t, float32(256), s)
					}
					err := x.IScale(1)
					if err != nil {
						assert.ErrorIs(t, err, cl.ErrInvalidContext)
					}
					mu.Lock()
					if err == nil {
						ok++
					} else {
						fail++
					}
					mu.Unlock()
				}
			})
		}
		wg.Go(func() { array.ReleaseKernels(ctx) })
		wg.Go(func() { time.Sleep(5 * time.Millisecond); assert.NoError(t, ctx.Release()) })
		wg.Wait()
		t.Logf("%d operations ran, %d failed on the released context", ok, fail)
		sets, hooked := array.BuiltSets(ctx)
		assert.Zero(t, sets)
		assert.False(t, hooked)
	}
}

// Arrays outlive their context's release: operations fail with
// ErrInvalidContext, reading and closing still work, and nothing is built
// (or hooked) again.
func TestHostileS46aArraysAfterContextRelease(t *testing.T) {
	ctx, qs := s46aContext(t, 1)
	x, err := array.Full[int32](qs[0], 16, 3, array.Alloc(nil))
	require.NoError(t, err)
	require.NoError(t, ctx.Release())
	_, err = array.Add(x, x)
	assert.ErrorIs(t, err, cl.ErrInvalidContext)
	assert.ErrorIs(t, x.IScale(2), cl.ErrInvalidContext)
	_, err = array.Sum(x)
	assert.ErrorIs(t, err, cl.ErrInvalidContext)
	got, err := x.Get()
	require.NoError(t, err)
	assert.Equal(t, []int32{3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3}, got)
	assert.NoError(t, x.Close())
	sets, hooked := array.BuiltSets(ctx)
	assert.Zero(t, sets)
	assert.False(t, hooked)
}

// OnRelease functions that use arrays, on the context being released
// and on another: no deadlock (Release holds no lock of array's cache
// while it runs them), and the other context's kernels are released
// with it when a function releases it.
func TestHostileS46aOnReleaseUsesArrays(t *testing.T) {
	cltest.Watchdog(t, time.Minute)
	ctx, qs := s46aContext(t, 1)
	ctx2, qs2 := s46aContext(t, 1)
	x, err := array.Full[float32](qs[0], 8, 2, array.Alloc(nil))
	require.NoError(t, err)
	y, err := array.Full[float32](qs2[0], 8, 2, array.Alloc(nil))
	require.NoError(t, err)
	var errSame, errOther error
	var sumOther float32
	// Registered after array's hook: runs first, with the kernels there.
	require.NoError(t, ctx.OnRelease(func() {
		errSame = x.IScale(2)
		sumOther, errOther = array.Sum(y)
		array.ReleaseKernels(ctx)
		_ = ctx2.Release()
		_ = ctx.Release()            // already under way: nil at once
		_ = ctx.OnRelease(func() {}) // refused: released
	}))
	require.NoError(t, ctx.Release())
	assert.NoError(t, errSame)
	assert.NoError(t, errOther)
	assert.Equal(t, float32(16), sumOther)
	for _, c := range []*cl.Context{ctx, ctx2} {
		sets, hooked := array.BuiltSets(c)
		assert.Zero(t, sets)
		assert.False(t, hooked)
	}
	got, err := x.Get()
	require.NoError(t, err)
	assert.Equal(t, float32(4), got[0])
	assert.NoError(t, x.Close())
	assert.NoError(t, y.Close())
}

// A loop a user would write: the same context, kernels dropped and built
// again many times; array hooks the context once, and its release forgets
// it.
func TestHostileS46aReleaseKernelsLoopHooksOnce(t *testing.T) {
	ctx, qs := s46aContext(t, 1)
	x, err := array.Full[float32](qs[0], 8, 1, array.Alloc(nil))
	require.NoError(t, err)
	defer x.Close()
	for range 5 {
		require.NoError(t, x.IScale(1))
		array.ReleaseKernels(ctx)
		sets, hooked := array.BuiltSets(ctx)
		assert.Zero(t, sets)
		assert.True(t, hooked)
	}
	require.NoError(t, ctx.Release())
	sets, hooked := array.BuiltSets(ctx)
	assert.Zero(t, sets)
	assert.False(t, hooked)
}
