package cl_test

import (
	"strings"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const vectorAdd = `
kernel void add(global const float *a, global const float *b, global float *c, float scale, int n) {
	int i = get_global_id(0);
	if (i < n) c[i] = scale * (a[i] + b[i]);
}`

func newFloatBuffer(t *testing.T, q *cl.CommandQueue, xs []float32) *cl.Buffer {
	return newBuffer(t, q, xs)
}

// newBuffer returns a buffer holding xs, released at the end of the test.
func newBuffer[T cl.Scalar](t *testing.T, q *cl.CommandQueue, xs []T) *cl.Buffer {
	t.Helper()
	data := cl.Bytes(xs)
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, int64(len(data)))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Release()) })
	require.NoError(t, q.WriteBuffer(b, 0, data))
	return b
}

func TestVectorAddKernelWithProfiling(t *testing.T) {
	q := cltest.Queue(t)
	n := cltest.Size(q, 1000, 100000)
	a, b := make([]float32, n), make([]float32, n)
	for i := range a {
		a[i], b[i] = float32(i), float32(2*i)
	}
	da, db, dc := newFloatBuffer(t, q, a), newFloatBuffer(t, q, b), newFloatBuffer(t, q, make([]float32, n))

	prog, err := q.Context().BuildProgram(vectorAdd, "")
	require.NoError(t, err)
	defer prog.Release()
	k, err := prog.Kernel("add")
	require.NoError(t, err)
	defer k.Release()
	assert.Equal(t, "add", k.Name())
	require.NoError(t, k.SetArgs(da, db, dc, float32(0.5), int32(n)))

	global := (n + 63) / 64 * 64
	ev, err := q.EnqueueNDRangeKernel(k, nil, []int{global}, []int{64})
	require.NoError(t, err)
	require.NoError(t, ev.Wait())
	p, err := ev.Profile()
	require.NoError(t, err)
	assert.LessOrEqual(t, p.Queued, p.Submit)
	assert.LessOrEqual(t, p.Submit, p.Start)
	assert.LessOrEqual(t, p.Start, p.End)
	assert.Positive(t, p.End)
	assert.Equal(t, p.End-p.Start, uint64(p.Duration()))
	require.NoError(t, ev.Release())

	got := make([]float32, n)
	require.NoError(t, q.ReadBuffer(dc, 0, cl.Bytes(got)))
	for i := range got {
		if got[i] != 0.5*(a[i]+b[i]) {
			t.Fatalf("c[%d] = %v, want %v", i, got[i], 0.5*(a[i]+b[i]))
		}
	}
}

func TestKernelArgumentErrors(t *testing.T) {
	q := cltest.Queue(t)
	prog, err := q.Context().BuildProgram(vectorAdd, "")
	require.NoError(t, err)
	defer prog.Release()
	k, err := prog.Kernel("add")
	require.NoError(t, err)
	defer k.Release()

	assert.ErrorIs(t, k.SetArg(0, "a string"), cl.ErrInvalidArgValue)
	assert.ErrorIs(t, k.SetArg(9, int32(1)), cl.ErrInvalidArgIndex)
	assert.ErrorIs(t, k.SetArg(3, float64(1)), cl.ErrInvalidArgSize, "a double for a float")
	released, err := q.Context().CreateBuffer(cl.MemReadWrite, 4)
	require.NoError(t, err)
	require.NoError(t, released.Release())
	assert.ErrorIs(t, k.SetArg(0, released), cl.ErrInvalidMemObject)

	_, err = prog.Kernel("no_such_kernel")
	assert.ErrorIs(t, err, cl.ErrInvalidKernelName)
	assert.Contains(t, err.Error(), "no_such_kernel")

	_, err = q.EnqueueNDRangeKernel(k, nil, nil, nil)
	assert.ErrorIs(t, err, cl.ErrInvalidWorkDimension)
	_, err = q.EnqueueNDRangeKernel(k, nil, []int{64}, []int{64, 1})
	assert.ErrorIs(t, err, cl.ErrInvalidWorkDimension)
	_, err = q.EnqueueNDRangeKernel(k, nil, []int{-1}, nil)
	assert.ErrorIs(t, err, cl.ErrInvalidGlobalWorkSize)

	require.NoError(t, k.Release())
	assert.NoError(t, k.Release())
	assert.ErrorIs(t, k.SetArg(0, int32(1)), cl.ErrInvalidKernel)
	_, err = q.EnqueueNDRangeKernel(k, nil, []int{64}, nil)
	assert.ErrorIs(t, err, cl.ErrInvalidKernel)
	require.NoError(t, prog.Release())
	_, err = prog.Kernel("add")
	assert.ErrorIs(t, err, cl.ErrInvalidProgram)
}

func TestBuildLogOfAKernelThatDoesNotCompile(t *testing.T) {
	q := cltest.Queue(t)
	_, err := q.Context().BuildProgram("kernel void broken(global int *x) { x[0] = undeclared_name; }", "")
	require.ErrorIs(t, err, cl.ErrBuildProgramFailure)
	var be *cl.BuildError
	require.ErrorAs(t, err, &be)
	assert.Contains(t, be.Log, "undeclared_name")
	assert.Contains(t, err.Error(), "clBuildProgram")
	assert.Contains(t, err.Error(), "build log")
}

func TestProfilingNeedsAProfilingQueue(t *testing.T) {
	q, err := cl.DefaultQueue()
	require.NoError(t, err)
	defer q.Release()
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, 64)
	require.NoError(t, err)
	defer b.Release()
	ev, err := q.EnqueueFillBuffer(b, []byte{0}, 0, 64)
	require.NoError(t, err)
	defer ev.Release()
	require.NoError(t, ev.Wait())
	_, err = ev.Profile()
	assert.ErrorIs(t, err, cl.ErrProfilingInfoNotAvailable)
}

func TestOutOfOrderQueueWithWaitLists(t *testing.T) {
	q, err := cl.DefaultQueueWith(cl.QueueOutOfOrder)
	if err != nil {
		// Out-of-order execution is optional in OpenCL 1.2.
		require.ErrorIs(t, err, cl.ErrInvalidQueueProperties)
		t.Skipf("out-of-order queues not supported here: %v", err)
	}
	defer q.Release()
	assert.Equal(t, cl.QueueOutOfOrder, q.Properties())
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, 64)
	require.NoError(t, err)
	defer b.Release()
	fill, err := q.EnqueueFillBuffer(b, []byte{5}, 0, 64)
	require.NoError(t, err)
	got := make([]byte, 64)
	read, err := q.EnqueueReadBuffer(b, false, 0, got, fill)
	require.NoError(t, err)
	require.NoError(t, cl.WaitAll(fill, read))
	assert.Equal(t, byte(5), got[63])
	require.NoError(t, fill.Release())
	require.NoError(t, read.Release())
	_, err = q.EnqueueReadBuffer(b, false, 0, got, read)
	assert.ErrorIs(t, err, cl.ErrInvalidEventWaitList, "a released event in the wait list")
}

// Work sizes of 0 are refused with the status OpenCL 1.2 gives them, on
// every runtime (POCL and Oclgrind accept them).
func TestZeroWorkSizesAreRefused(t *testing.T) {
	q := cltest.Queue(t)
	k := cltest.SlowReadKernel(t, q)
	x := newBuffer(t, q, make([]int32, 8))
	out := newBuffer(t, q, make([]int32, 8))
	require.NoError(t, k.SetArgs(x, out, int32(1)))
	tests := []struct {
		name                  string
		offset, global, local []int
		want                  cl.Status
	}{
		{"global 0", nil, []int{0}, nil, cl.ErrInvalidGlobalWorkSize},
		{"global 0 in the second dimension", nil, []int{8, 0}, nil, cl.ErrInvalidGlobalWorkSize},
		{"local 0", nil, []int{8}, []int{0}, cl.ErrInvalidWorkGroupSize},
		{"negative local", nil, []int{8}, []int{-1}, cl.ErrInvalidWorkGroupSize},
		{"negative offset", []int{-1}, []int{8}, nil, cl.ErrInvalidGlobalOffset},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := q.EnqueueNDRangeKernel(k, tt.offset, tt.global, tt.local)
			require.ErrorIs(t, err, tt.want)
			assert.Equal(t, 1, strings.Count(err.Error(), "clEnqueueNDRangeKernel"), err.Error())
			if tt.offset == nil {
				assert.ErrorIs(t, q.EnqueueKernel(k, tt.global, tt.local), tt.want)
			}
		})
	}
	require.NoError(t, q.Finish())
}

// A kernel takes buffers of its own context only, and runs on queues of
// its own context only: Oclgrind accepts both and writes to the wrong
// memory.
func TestKernelsAndArgumentsOfAnotherContextAreRefused(t *testing.T) {
	q := cltest.Queue(t)
	other, err := cl.NewCommandQueue(mustContext(t, q.Device()), q.Device(), 0)
	require.NoError(t, err)
	defer other.Release()
	k := cltest.SlowReadKernel(t, q)
	theirs := newBuffer(t, other, make([]int32, 8))
	mine := newBuffer(t, q, make([]int32, 8))

	err = k.SetArg(1, theirs)
	require.ErrorIs(t, err, cl.ErrInvalidMemObject)
	assert.Equal(t, 1, strings.Count(err.Error(), "clSetKernelArg"), err.Error())
	require.NoError(t, k.SetArgs(mine, mine, int32(1)))
	_, err = other.EnqueueNDRangeKernel(k, nil, []int{8}, nil)
	assert.ErrorIs(t, err, cl.ErrInvalidContext)
	assert.ErrorIs(t, other.EnqueueKernel(k, []int{8}, nil), cl.ErrInvalidContext)
	require.NoError(t, other.Finish())

	got := make([]int32, 8)
	require.NoError(t, other.ReadBuffer(theirs, 0, cl.Bytes(got)))
	assert.Equal(t, make([]int32, 8), got, "nothing was written to the other context's buffer")
}

// The local-memory arguments of an enqueue add up: two that each fit the
// device's LocalMemSize but not together are refused with
// ErrOutOfResources before the runtime sees them, and setting one of them
// smaller lets the kernel run.
func TestLocalMemoryArgumentsAddUp(t *testing.T) {
	q := cltest.Queue(t)
	have := q.Device().LocalMemSize
	require.Positive(t, have)
	prog, err := q.Context().BuildProgram(`kernel void k(global int *x, local int *a, local int *b) { a[0] = 1; b[0] = 2; x[0] = a[0] + b[0]; }`, "")
	require.NoError(t, err)
	defer prog.Release()
	k, err := prog.Kernel("k")
	require.NoError(t, err)
	defer k.Release()
	buf, err := q.Context().CreateBuffer(cl.MemReadWrite, 64)
	require.NoError(t, err)
	defer buf.Release()
	half := cl.LocalMem(have/2 + 64)
	require.NoError(t, k.SetArgs(buf, half, half))
	assert.ErrorIs(t, q.EnqueueKernel(k, []int{1}, nil), cl.ErrOutOfResources)
	require.NoError(t, k.SetArg(2, cl.LocalMem(64)))
	require.NoError(t, q.EnqueueKernel(k, []int{1}, nil))
	require.NoError(t, q.Finish())
}

// Options that end with one that takes an argument are refused before the
// runtime sees them: POCL crashes on a dangling "-I", and NVIDIA's driver
// took the added -cl-kernel-arg-info for its argument, lost the argument
// qualifiers, and then crashed on a number set for a buffer.
func TestBuildProgramRefusesADanglingOption(t *testing.T) {
	q := cltest.Queue(t)
	const src = `kernel void k(global int *x) { x[0] = 1; }`
	for _, opts := range []string{"-I", "-D", "-x", "-cl-fast-relaxed-math -D", " -I\t", `'-I'`, `-w "-D"`} {
		p, err := q.Context().BuildProgram(src, opts)
		assert.Nil(t, p)
		require.ErrorIs(t, err, cl.ErrInvalidBuildOptions, "options %q", opts)
		assert.Contains(t, err.Error(), "no argument")
	}
	for _, opts := range []string{"-I .", "-D X", "-DX=1 -I.", "-cl-fast-relaxed-math"} {
		p, err := q.Context().BuildProgram(src, opts)
		require.NoError(t, err, "options %q", opts)
		k, err := p.Kernel("k")
		require.NoError(t, err)
		assert.ErrorIs(t, k.SetArg(0, int64(0x1234)), cl.ErrInvalidMemObject, "options %q: the qualifiers are known", opts)
		require.NoError(t, k.Release())
		require.NoError(t, p.Release())
	}
}
