package cl_test

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func s32fKernel(t *testing.T, q *cl.CommandQueue, src, name string) *cl.Kernel {
	t.Helper()
	p, err := q.Context().BuildProgram(src, "")
	require.NoError(t, err)
	t.Cleanup(func() { p.Release() })
	k, err := p.Kernel(name)
	require.NoError(t, err)
	t.Cleanup(func() { k.Release() })
	return k
}

// s32fIsStatus asserts err is a *CallError of call wrapping a Status.
func s32fIsStatus(t *testing.T, err error, call string) {
	t.Helper()
	require.Error(t, err)
	var st cl.Status
	assert.True(t, errors.As(err, &st), "error %v wraps no Status", err)
	var ce *cl.CallError
	if assert.True(t, errors.As(err, &ce), "error %v is no CallError", err) {
		assert.Equal(t, call, ce.Call)
	}
}

// FAILED on f94f95c: a buffer set as a kernel argument and then released is
// handed to the driver by the next enqueue: POCL aborts the whole process
// ("PTHREAD ERROR in can_run_command(): Invalid argument", SIGABRT). The
// package promises "Using a released object returns an error ... checked
// in Go before the driver sees a dangling handle"; the Kernel does not
// remember its buffer arguments, so the enqueue cannot check them.
func TestHostileS32fReleasedBufferArgCrashesEnqueue(t *testing.T) {
	if os.Getenv(cltest.ChildEnv) == "s32f-released-arg" {
		q := cltest.Queue(t)
		k := s32fKernel(t, q, `kernel void k(global int *x) { x[get_global_id(0)] = 7; }`, "k")
		b, err := q.Context().CreateBuffer(cl.MemReadWrite, 1<<20)
		require.NoError(t, err)
		require.NoError(t, k.SetArg(0, b))
		require.NoError(t, b.Release())
		err = q.EnqueueKernel(k, []int{1 << 18}, nil)
		if err == nil {
			err = q.Finish()
		}
		s32fIsStatus(t, err, "clEnqueueNDRangeKernel")
		assert.ErrorIs(t, err, cl.ErrInvalidMemObject)
		return
	} else if os.Getenv(cltest.ChildEnv) != "" {
		t.Skip("a child of reexec for another test")
	}
	cltest.Watchdog(t, 60*time.Second)
	out, err := cltest.Reexec(t, "^TestHostileS32fReleasedBufferArgCrashesEnqueue$", cltest.ChildEnv+"=s32f-released-arg")
	assert.NoError(t, err, "enqueueing a kernel whose buffer argument was released crashed or failed the process:\n%s", out)
}

// FAILED on f94f95c: SetArg of an 8-byte scalar (int64/uint64/float64) for a
// __global pointer argument passes the number to clSetKernelArg, which
// POCL reads as a cl_mem: SIGSEGV in clSetKernelArg, killing the process.
// The package reads the arguments' address qualifiers already
// (clGetKernelArgInfo, for LocalMem), so it can refuse a scalar for a
// __global/__constant argument; the specification's answer is
// CL_INVALID_MEM_OBJECT ("arg_value ... not a valid memory object").
func TestHostileS32fScalarForGlobalPointerSegfaults(t *testing.T) {
	if os.Getenv(cltest.ChildEnv) == "s32f-int-as-buffer" {
		q := cltest.Queue(t)
		k := s32fKernel(t, q, `kernel void k(global int *x) { x[get_global_id(0)] = 7; }`, "k")
		err := k.SetArg(0, int64(0x12345678))
		if err == nil {
			err = q.EnqueueKernel(k, []int{16}, nil)
		}
		require.Error(t, err)
		var st cl.Status
		assert.True(t, errors.As(err, &st), "%v", err)
		return
	} else if os.Getenv(cltest.ChildEnv) != "" {
		t.Skip("a child of reexec for another test")
	}
	cltest.Watchdog(t, 60*time.Second)
	out, err := cltest.Reexec(t, "^TestHostileS32fScalarForGlobalPointerSegfaults$", cltest.ChildEnv+"=s32f-int-as-buffer")
	assert.NoError(t, err, "SetArg(int64) for a global pointer crashed or failed the process:\n%s", firstLines(out, 8))
}

func firstLines(s string, n int) string {
	for i, c := 0, 0; i < len(s); i++ {
		if s[i] == '\n' {
			if c++; c == n {
				return s[:i]
			}
		}
	}
	return s
}

// PASSES: wrong argument types of another size, missing arguments,
// argument indices past the end, nil buffers, bad work sizes are all
// refused with a CallError wrapping a Status.
func TestHostileS32fKernelMisusesRefused(t *testing.T) {
	cltest.Watchdog(t, 30*time.Second)
	q := cltest.Queue(t)
	k := s32fKernel(t, q, `kernel void k(global int *x, int n) { x[0] = n; }`, "k")
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, 64)
	require.NoError(t, err)
	defer b.Release()
	s32fIsStatus(t, q.EnqueueKernel(k, []int{1}, nil), "clEnqueueNDRangeKernel") // no args set
	s32fIsStatus(t, k.SetArg(1, b), "clSetKernelArg")                            // 8-byte cl_mem for int
	s32fIsStatus(t, k.SetArg(0, float32(1)), "clSetKernelArg")
	s32fIsStatus(t, k.SetArg(2, int32(1)), "clSetKernelArg")
	var nb *cl.Buffer
	s32fIsStatus(t, k.SetArg(0, nb), "clSetKernelArg")
	s32fIsStatus(t, k.SetArg(0, nil), "clSetKernelArg")
	require.NoError(t, k.SetArgs(b, int32(3)))
	s32fIsStatus(t, q.EnqueueKernel(k, []int{1 << 40}, []int{1 << 40}), "clEnqueueNDRangeKernel")
	s32fIsStatus(t, q.EnqueueKernel(k, []int{16}, []int{3}), "clEnqueueNDRangeKernel")
	s32fIsStatus(t, q.EnqueueKernel(k, []int{0}, nil), "clEnqueueNDRangeKernel")
	s32fIsStatus(t, q.EnqueueKernel(k, []int{1, 1, 1, 1}, nil), "clEnqueueNDRangeKernel")
	_, err = q.Context().BuildProgram("kernel void k( {", "")
	assert.ErrorIs(t, err, cl.ErrBuildProgramFailure)
	p, err := q.Context().BuildProgram("kernel void k(global int *x) {}", "")
	require.NoError(t, err)
	s32fIsStatus(t, func() error { _, err := p.Kernel(""); return err }(), "clCreateKernel")
	require.NoError(t, p.Release())
	require.NoError(t, p.Release())
	s32fIsStatus(t, func() error { _, err := p.Kernel("k"); return err }(), "clCreateKernel")
	s32fIsStatus(t, func() error { _, err := q.Context().CreateBuffer(cl.MemReadWrite, 0); return err }(), "clCreateBuffer")
	s32fIsStatus(t, q.WriteBuffer(b, 0, nil), "clEnqueueWriteBuffer")
}
