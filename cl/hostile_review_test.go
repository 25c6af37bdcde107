package cl_test

import (
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// assertCallErr checks that err matches st and names call.
func assertCallErr(t *testing.T, err error, st cl.Status, call string, msg ...any) {
	t.Helper()
	if assert.ErrorIs(t, err, st, msg...) {
		assert.True(t, strings.Contains(err.Error(), call), "error %q does not name %s", err, call)
	}
}

// Double Release of every kind of object returns nil.
func TestHostileCLDoubleRelease(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.Queue(t)
	ctx := q.Context()
	b, err := ctx.CreateBuffer(cl.MemReadWrite, 256)
	require.NoError(t, err)
	sub, err := b.CreateSubBuffer(0, 0, 64)
	require.NoError(t, err)
	ev, err := q.EnqueueMarker()
	require.NoError(t, err)
	prog, err := ctx.BuildProgram(`kernel void k(global int *x) { x[0] = 1; }`, "")
	require.NoError(t, err)
	k, err := prog.Kernel("k")
	require.NoError(t, err)
	q2, err := cl.NewCommandQueue(ctx, q.Device(), 0)
	require.NoError(t, err)
	ctx2, err := cl.CreateContext(q.Device())
	require.NoError(t, err)

	for range 2 {
		assert.NoError(t, sub.Release())
		assert.NoError(t, b.Release())
		assert.NoError(t, b.Close())
		assert.NoError(t, ev.Release())
		assert.NoError(t, k.Release())
		assert.NoError(t, prog.Release())
		assert.NoError(t, q2.Release())
		assert.NoError(t, ctx2.Release())
	}
	ok, err := b.TryRelease()
	assert.False(t, ok)
	assert.NoError(t, err)
	assert.True(t, b.Released())
	assert.True(t, sub.Released())
}

// TryRelease: of racing calls, exactly one returns true.
func TestHostileCLTryReleaseRace(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.Queue(t)
	for range 50 {
		b, err := q.Context().CreateBuffer(cl.MemReadWrite, 64)
		require.NoError(t, err)
		var wins atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ok, err := b.TryRelease()
				assert.NoError(t, err)
				if ok {
					wins.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		require.Equal(t, int32(1), wins.Load())
	}
	var nb *cl.Buffer
	ok, err := nb.TryRelease()
	assert.False(t, ok)
	assertCallErr(t, err, cl.ErrInvalidMemObject, "clReleaseMemObject")
}

// Use after Release: every call refuses with the right Status, naming the
// call, without reaching the driver.
func TestHostileCLUseAfterRelease(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.Queue(t)
	ctx := q.Context()
	b, err := ctx.CreateBuffer(cl.MemReadWrite, 256)
	require.NoError(t, err)
	live, err := ctx.CreateBuffer(cl.MemReadWrite, 256)
	require.NoError(t, err)
	defer live.Release()
	require.NoError(t, b.Release())

	_, err = b.CreateSubBuffer(0, 0, 64)
	assertCallErr(t, err, cl.ErrInvalidMemObject, "clCreateSubBuffer")
	_, err = b.Info()
	assertCallErr(t, err, cl.ErrInvalidMemObject, "clGetMemObjectInfo")
	assertCallErr(t, q.WriteBuffer(b, 0, []byte{1}), cl.ErrInvalidMemObject, "clEnqueueWriteBuffer")
	assertCallErr(t, q.ReadBuffer(b, 0, []byte{1}), cl.ErrInvalidMemObject, "clEnqueueReadBuffer")
	_, err = q.EnqueueFillBuffer(b, []byte{0}, 0, 16)
	assertCallErr(t, err, cl.ErrInvalidMemObject, "clEnqueueFillBuffer")
	_, err = q.EnqueueCopyBuffer(b, live, 0, 0, 16)
	assertCallErr(t, err, cl.ErrInvalidMemObject, "clEnqueueCopyBuffer")
	_, err = q.EnqueueCopyBuffer(live, b, 0, 0, 16)
	assertCallErr(t, err, cl.ErrInvalidMemObject, "clEnqueueCopyBuffer")
	_, err = q.MapBuffer(b, cl.MapRead, 0, 16)
	assertCallErr(t, err, cl.ErrInvalidMemObject, "clEnqueueMapBuffer")
	assertCallErr(t, q.Touch(b), cl.ErrInvalidMemObject, "clEnqueueWriteBuffer")
	_, err = q.EnqueueMigrate([]*cl.Buffer{live, b}, 0, false)
	assertCallErr(t, err, cl.ErrInvalidMemObject, "clEnqueueMigrateMemObjects")

	// Events.
	ev, err := q.EnqueueMarker()
	require.NoError(t, err)
	require.NoError(t, ev.Release())
	assertCallErr(t, ev.Wait(), cl.ErrInvalidEvent, "clWaitForEvents")
	_, err = ev.Status()
	assertCallErr(t, err, cl.ErrInvalidEvent, "clGetEventInfo")
	_, err = ev.Done()
	assertCallErr(t, err, cl.ErrInvalidEvent, "clGetEventInfo")
	_, err = ev.Retain()
	assertCallErr(t, err, cl.ErrInvalidEvent, "clRetainEvent")
	assertCallErr(t, ev.OnComplete(func(cl.ExecStatus) {}), cl.ErrInvalidEvent, "clSetEventCallback")
	_, err = ev.Profile()
	assertCallErr(t, err, cl.ErrInvalidEvent, "clGetEventProfilingInfo")
	assertCallErr(t, cl.WaitAll(ev), cl.ErrInvalidEventWaitList, "clWaitForEvents")
	_, err = q.EnqueueMarker(ev)
	assertCallErr(t, err, cl.ErrInvalidEventWaitList, "clEnqueueMarkerWithWaitList")
	_, err = q.EnqueueWriteBuffer(live, false, 0, make([]byte, 4), ev)
	assertCallErr(t, err, cl.ErrInvalidEventWaitList, "clEnqueueWriteBuffer")

	// Queues.
	q2, err := cl.NewCommandQueue(ctx, q.Device(), 0)
	require.NoError(t, err)
	require.NoError(t, q2.Release())
	assertCallErr(t, q2.Finish(), cl.ErrInvalidCommandQueue, "clFinish")
	assertCallErr(t, q2.Flush(), cl.ErrInvalidCommandQueue, "clFlush")
	assertCallErr(t, q2.WriteBuffer(live, 0, []byte{1}), cl.ErrInvalidCommandQueue, "clEnqueueWriteBuffer")
	_, err = q2.EnqueueMarker()
	assertCallErr(t, err, cl.ErrInvalidCommandQueue, "clEnqueueMarkerWithWaitList")
	_, err = q2.MapBuffer(live, cl.MapRead, 0, 16)
	assertCallErr(t, err, cl.ErrInvalidCommandQueue, "clEnqueueMapBuffer")

	// Kernels and programs.
	prog, err := ctx.BuildProgram(`kernel void k(global int *x) { x[0] = 1; }`, "")
	require.NoError(t, err)
	k, err := prog.Kernel("k")
	require.NoError(t, err)
	require.NoError(t, k.Release())
	assertCallErr(t, k.SetArg(0, live), cl.ErrInvalidKernel, "clSetKernelArg")
	assertCallErr(t, q.EnqueueKernel(k, []int{1}, nil), cl.ErrInvalidKernel, "clEnqueueNDRangeKernel")
	require.NoError(t, prog.Release())
	_, err = prog.Kernel("k")
	assertCallErr(t, err, cl.ErrInvalidProgram, "clCreateKernel")

	// Contexts.
	ctx2, err := cl.CreateContext(q.Device())
	require.NoError(t, err)
	require.NoError(t, ctx2.Release())
	_, err = ctx2.CreateBuffer(cl.MemReadWrite, 64)
	assertCallErr(t, err, cl.ErrInvalidContext, "clCreateBuffer")
	_, err = cl.NewCommandQueue(ctx2, q.Device(), 0)
	assertCallErr(t, err, cl.ErrInvalidContext, "clCreateCommandQueue")
	_, err = ctx2.BuildProgram("kernel void k() {}", "")
	assertCallErr(t, err, cl.ErrInvalidContext, "clCreateProgramWithSource")
}

// Sub-buffer ranges: negative, zero, past the end, overflowing.
func TestHostileCLSubBufferRanges(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.Queue(t)
	const size = 4096
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, size)
	require.NoError(t, err)
	defer b.Release()
	align := q.Context().MemBaseAddrAlign()
	require.Positive(t, align)
	cases := []struct {
		origin, size int64
		want         cl.Status
	}{
		{-1, 64, cl.ErrInvalidValue},
		{0, -1, cl.ErrInvalidValue},
		{math.MinInt64, 64, cl.ErrInvalidValue},
		{0, 0, cl.ErrInvalidBufferSize},
		{0, size + 1, cl.ErrInvalidValue},
		{0, math.MaxInt64, cl.ErrInvalidValue},
		{math.MaxInt64, 1, cl.ErrInvalidValue},
		{size, 1, cl.ErrInvalidValue},
		{align, size, cl.ErrInvalidValue},
		{align, math.MaxInt64 - align + 1, cl.ErrInvalidValue},
		{1, 64, cl.ErrMisalignedSubBufferOffset},
	}
	for _, c := range cases {
		sub, err := b.CreateSubBuffer(0, c.origin, c.size)
		assert.Nil(t, sub, "origin %d size %d", c.origin, c.size)
		assertCallErr(t, err, c.want, "clCreateSubBuffer", "origin %d size %d", c.origin, c.size)
	}
	// The whole buffer and the last aligned byte range are fine.
	sub, err := b.CreateSubBuffer(0, 0, size)
	require.NoError(t, err)
	_, err = sub.CreateSubBuffer(0, 0, 64)
	assertCallErr(t, err, cl.ErrInvalidMemObject, "clCreateSubBuffer")
	require.NoError(t, sub.Release())
	sub, err = b.CreateSubBuffer(0, size-align, align)
	require.NoError(t, err)
	require.NoError(t, sub.Release())
}

// A sub-buffer outlives its released parent: the runtime keeps the parent.
func TestHostileCLSubBufferOutlivesParent(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.Queue(t)
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, 1024)
	require.NoError(t, err)
	sub, err := b.CreateSubBuffer(0, 0, 256)
	require.NoError(t, err)
	require.NoError(t, b.Release())
	want := []byte{1, 2, 3, 4}
	require.NoError(t, q.WriteBuffer(sub, 0, want))
	got := make([]byte, 4)
	require.NoError(t, q.ReadBuffer(sub, 0, got))
	assert.Equal(t, want, got)
	p, _ := sub.Parent()
	assert.Same(t, b, p)
	require.NoError(t, sub.Release())
}

// Bad buffer sizes and flags: an error matching the Status, naming the call.
func TestHostileCLCreateBufferBadInput(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.Queue(t)
	ctx := q.Context()
	for _, n := range []int64{0, -1, math.MinInt64, math.MaxInt64, ctx.MaxMemAllocSize() + 1} {
		b, err := ctx.CreateBuffer(cl.MemReadWrite, n)
		assert.Nil(t, b)
		assertCallErr(t, err, cl.ErrInvalidBufferSize, "clCreateBuffer", "size %d", n)
	}
	for _, f := range []cl.MemFlags{cl.MemReadWrite | cl.MemReadOnly, 1 << 40, cl.MemHostNoAccess | cl.MemHostReadOnly, cl.MemUseHostPtr | cl.MemCopyHostPtr} {
		b, err := ctx.CreateBuffer(f, 64)
		assert.Nil(t, b)
		assertCallErr(t, err, cl.ErrInvalidValue, "clCreateBuffer", "flags %v", f)
	}
	_, err := ctx.CreateBufferFromHost(cl.MemUseHostPtr, []byte{1})
	assertCallErr(t, err, cl.ErrInvalidValue, "clCreateBuffer")
	_, err = ctx.CreateBufferFromHost(cl.MemReadWrite, nil)
	assertCallErr(t, err, cl.ErrInvalidBufferSize, "clCreateBuffer")
}

// Transfers out of range: errors, nothing written.
func TestHostileCLTransferRanges(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.Queue(t)
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, 64)
	require.NoError(t, err)
	defer b.Release()
	assertCallErr(t, q.WriteBuffer(b, -1, []byte{1}), cl.ErrInvalidValue, "clEnqueueWriteBuffer")
	assertCallErr(t, q.WriteBuffer(b, 60, make([]byte, 8)), cl.ErrInvalidValue, "clEnqueueWriteBuffer")
	assertCallErr(t, q.WriteBuffer(b, math.MaxInt64, make([]byte, 8)), cl.ErrInvalidValue, "clEnqueueWriteBuffer")
	assertCallErr(t, q.ReadBuffer(b, 0, make([]byte, 65)), cl.ErrInvalidValue, "clEnqueueReadBuffer")
	_, err = q.EnqueueFillBuffer(b, []byte{0, 0, 0, 0}, 0, math.MaxInt64-3)
	assertCallErr(t, err, cl.ErrInvalidValue, "clEnqueueFillBuffer")
	_, err = q.EnqueueFillBuffer(b, []byte{0, 0, 0}, 0, 3)
	assertCallErr(t, err, cl.ErrInvalidValue, "clEnqueueFillBuffer")
	_, err = q.EnqueueFillBuffer(b, []byte{0}, math.MaxInt64, 1)
	assertCallErr(t, err, cl.ErrInvalidValue, "clEnqueueFillBuffer")
	_, err = q.EnqueueCopyBuffer(b, b, 0, 8, 16)
	assertCallErr(t, err, cl.ErrMemCopyOverlap, "clEnqueueCopyBuffer")
	_, err = q.EnqueueCopyBuffer(b, b, math.MaxInt64, 0, 1)
	assertCallErr(t, err, cl.ErrInvalidValue, "clEnqueueCopyBuffer")
	_, err = q.EnqueueCopyBuffer(b, b, 0, 32, math.MaxInt64)
	assertCallErr(t, err, cl.ErrInvalidValue, "clEnqueueCopyBuffer")
	_, err = q.EnqueueCopyBuffer(b, b, 0, 32, -1)
	assertCallErr(t, err, cl.ErrInvalidValue, "clEnqueueCopyBuffer")
	_, err = q.MapBuffer(b, cl.MapRead, 0, math.MaxInt64)
	assertCallErr(t, err, cl.ErrInvalidValue, "clEnqueueMapBuffer")
	_, err = q.MapBuffer(b, cl.MapRead, math.MaxInt64, 1)
	assertCallErr(t, err, cl.ErrInvalidValue, "clEnqueueMapBuffer")
}

// Kernel arguments out of range: errors, no crash.
func TestHostileCLKernelArgs(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.Queue(t)
	prog, err := q.Context().BuildProgram(`kernel void k(global int *x, local int *l) { l[0] = 1; x[0] = l[0]; }`, "")
	require.NoError(t, err)
	defer prog.Release()
	k, err := prog.Kernel("k")
	require.NoError(t, err)
	defer k.Release()
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, 64)
	require.NoError(t, err)
	defer b.Release()
	assert.ErrorIs(t, k.SetArg(-1, b), cl.ErrInvalidArgIndex)
	assert.ErrorIs(t, k.SetArg(2, b), cl.ErrInvalidArgIndex)
	assert.ErrorIs(t, k.SetArg(1, cl.LocalMem(0)), cl.ErrInvalidArgSize)
	// LocalMem is an int: -1 would reach the runtime as a size_t of
	// 2^64-1, which POCL accepted without a word, even at the enqueue.
	assert.ErrorIs(t, k.SetArg(1, cl.LocalMem(-1)), cl.ErrInvalidArgSize)
	assertCallErr(t, k.SetArg(0, "str"), cl.ErrInvalidArgValue, "clSetKernelArg")
	assertCallErr(t, k.SetArg(0, (*cl.Buffer)(nil)), cl.ErrInvalidMemObject, "clSetKernelArg")
	_, err = prog.Kernel("nope")
	assertCallErr(t, err, cl.ErrInvalidKernelName, "clCreateKernel")
	_, err = q.EnqueueNDRangeKernel(k, nil, []int{0}, nil)
	assertCallErr(t, err, cl.ErrInvalidGlobalWorkSize, "clEnqueueNDRangeKernel")
	_, err = q.EnqueueNDRangeKernel(k, nil, []int{1, 1, 1, 1}, nil)
	assertCallErr(t, err, cl.ErrInvalidWorkDimension, "clEnqueueNDRangeKernel")
	_, err = q.EnqueueNDRangeKernel(k, []int{-1}, []int{1}, nil)
	assertCallErr(t, err, cl.ErrInvalidGlobalOffset, "clEnqueueNDRangeKernel")
	_, err = q.EnqueueNDRangeKernel(k, nil, []int{4}, []int{0})
	assertCallErr(t, err, cl.ErrInvalidWorkGroupSize, "clEnqueueNDRangeKernel")
}

// Unmap misuse: a second unmap, a reslice, an unmap after Release.
func TestHostileCLUnmapMisuse(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.Queue(t)
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, 256)
	require.NoError(t, err)
	m, err := q.MapBuffer(b, cl.MapWrite, 0, 64)
	require.NoError(t, err)
	assertCallErr(t, q.UnmapBuffer(b, m[1:]), cl.ErrInvalidValue, "clEnqueueUnmapMemObject")
	assertCallErr(t, q.UnmapBuffer(b, m[:32]), cl.ErrInvalidValue, "clEnqueueUnmapMemObject")
	assertCallErr(t, q.UnmapBuffer(b, nil), cl.ErrInvalidValue, "clEnqueueUnmapMemObject")
	require.NoError(t, q.UnmapBuffer(b, m))
	assertCallErr(t, q.UnmapBuffer(b, m), cl.ErrInvalidValue, "clEnqueueUnmapMemObject")
	require.NoError(t, b.Release())
	assertCallErr(t, q.UnmapBuffer(b, m), cl.ErrInvalidMemObject, "clEnqueueUnmapMemObject")
}

// A pending non-blocking read's event, released without Wait: Release
// waits, the data arrives, no hang.
func TestHostileCLReleasePendingEvent(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.Queue(t)
	b, err := q.Context().CreateBufferFromHost(cl.MemReadWrite, []byte{9, 8, 7, 6})
	require.NoError(t, err)
	defer b.Release()
	dst := make([]byte, 4)
	ev, err := q.EnqueueReadBuffer(b, false, 0, dst)
	require.NoError(t, err)
	r, err := ev.Retain()
	require.NoError(t, err)
	require.NoError(t, ev.Release())
	require.NoError(t, r.Wait(), "a retained handle stays usable after the first is released")
	require.NoError(t, r.Release())
	assert.Equal(t, []byte{9, 8, 7, 6}, dst)
	assertCallErr(t, r.Wait(), cl.ErrInvalidEvent, "clWaitForEvents")
}

// An event of another context in a wait list: ErrInvalidContext.
func TestHostileCLEventOfAnotherContext(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.Queue(t)
	ctx, err := cl.CreateContext(q.Device())
	require.NoError(t, err)
	defer ctx.Release()
	q3, err := cl.NewCommandQueue(ctx, q.Device(), 0)
	require.NoError(t, err)
	defer q3.Release()
	ev, err := q3.EnqueueMarker()
	require.NoError(t, err)
	defer ev.Release()
	_, err = q.EnqueueMarker(ev)
	assertCallErr(t, err, cl.ErrInvalidContext, "clEnqueueMarkerWithWaitList")
	b, err := ctx.CreateBuffer(cl.MemReadWrite, 64)
	require.NoError(t, err)
	defer b.Release()
	assertCallErr(t, q.WriteBuffer(b, 0, []byte{1}), cl.ErrInvalidContext, "clEnqueueWriteBuffer")
	assert.NoError(t, cl.WaitAll())
}

// OnComplete with a callback that panics: the panic, on the package's
// own goroutine, ended the whole program; now it is recovered and
// reported on standard error. Run in a child process.
func TestHostileCLOnCompletePanickingCallback(t *testing.T) {
	switch os.Getenv(cltest.ChildEnv) {
	case "panicking-callback":
		q := cltest.Queue(t)
		ev, err := q.EnqueueMarker()
		require.NoError(t, err)
		done := make(chan struct{})
		require.NoError(t, ev.OnComplete(func(cl.ExecStatus) {
			defer close(done)
			panic("user callback panics")
		}))
		require.NoError(t, q.Flush()) // Oclgrind runs nothing before a flush
		<-done
		time.Sleep(200 * time.Millisecond)
		ev.Release()
		return
	case "":
	default:
		t.Skip("a child of reexec for another test")
	}
	cltest.Watchdog(t, 15*time.Second)
	out, err := cltest.Reexec(t, "^TestHostileCLOnCompletePanickingCallback$", cltest.ChildEnv+"=panicking-callback")
	assert.NoError(t, err, "a panicking OnComplete callback crashed the process (want it recovered or reported):\n%s", out)
	assert.Contains(t, out, "cl: an OnComplete callback panicked: user callback panics", "the panic is reported")
}
