package cl_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s30bLocalChild builds src on the named device, sets argument 0 to a
// 64-byte buffer and arguments 1.. to locals, enqueues one work-item and
// finishes; it returns the first error.
func s30bLocalChild(t *testing.T, dev, src string, locals ...cl.LocalMem) error {
	q := s30Queue(t, dev)
	prog, err := q.Context().BuildProgram(src, "")
	require.NoError(t, err)
	defer prog.Release()
	k, err := prog.Kernel("k")
	require.NoError(t, err)
	defer k.Release()
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, 64)
	require.NoError(t, err)
	defer b.Release()
	require.NoError(t, k.SetArg(0, b))
	for i, l := range locals {
		if err := k.SetArg(i+1, l); err != nil {
			return err
		}
	}
	if err := q.EnqueueKernel(k, []int{1}, nil); err != nil {
		return err
	}
	return q.Finish()
}

// The fix of TestHostileS30LocalMemOverDeviceLimitAbortsPOCL compares
// only the sum of the LocalMem *arguments* with Device.LocalMemSize
// (program.go, enqueueNDRange: k.localBytes()). A kernel's own __local
// arrays take the same local memory. POCL's LocalMemSize is 2 MiB; a
// kernel with a 1.5 MiB __local array and a LocalMem argument of 1 MiB
// (2.5 MiB in all; each alone fits) passes the check, and POCL then fails
// its assertion "setup_kernel_arg_array_with_locals: ... <= local_mem_size"
// and aborts the whole process, exactly the crash the fix meant to stop.
// Expected: ErrOutOfResources at the enqueue (the specification's answer;
// CL_KERNEL_LOCAL_MEM_SIZE from clGetKernelWorkGroupInfo counts both), and
// a process that lives. Observed: SIGABRT. Run in a child.
func TestHostileS30bStaticLocalPlusArgAbortsPOCL(t *testing.T) {
	const role = "s30b-static-local"
	switch os.Getenv(cltest.ChildEnv) {
	case role:
		err := s30bLocalChild(t, "pocl",
			`kernel void k(global int *x, local int *l) { local char buf[1572864]; buf[x[1]] = 1; l[0] = buf[x[2]]; x[0] = l[0]; }`,
			cl.LocalMem(1<<20))
		t.Logf("1.5 MiB __local array + 1 MiB LocalMem: %v", err)
		assert.ErrorIs(t, err, cl.ErrOutOfResources)
		return
	case "":
	default:
		t.Skip("a child of Reexec for another test")
	}
	dev := cltest.Device(t, "pocl")
	require.Less(t, dev.LocalMemSize, int64(1572864+1<<20), "the case needs a device with less than 2.5 MiB of local memory")
	cltest.Watchdog(t, 60*time.Second)
	out, err := cltest.Reexec(t, "^TestHostileS30bStaticLocalPlusArgAbortsPOCL$", cltest.ChildEnv+"="+role)
	assert.NoError(t, err, "a kernel whose __local array and LocalMem argument exceed LocalMemSize crashed the process:\n%s", s30Head(out))
	assert.True(t, strings.Contains(out, "CL_OUT_OF_RESOURCES"), "the child saw no CL_OUT_OF_RESOURCES")
}

// enqueueNDRange's check sums the LocalMem arguments in an int64
// (localBytes, program.go) with no overflow check: two arguments of
// 1<<62 bytes each (each alone refused: "more than the device's") sum to
// 1<<63, which wraps to a negative number, so `need > have` is false and
// the enqueue goes to POCL, which aborts the process (assertion in
// setup_kernel_arg_array_with_locals). Expected: ErrOutOfResources, the
// answer for either argument alone. Observed: SIGABRT. Run in a child.
func TestHostileS30bLocalMemSumOverflowAbortsPOCL(t *testing.T) {
	const role = "s30b-local-overflow"
	switch os.Getenv(cltest.ChildEnv) {
	case role:
		err := s30bLocalChild(t, "pocl",
			`kernel void k(global int *x, local char *l, local char *m) { l[0] = 1; m[0] = 2; x[0] = l[0] + m[0]; }`,
			cl.LocalMem(1<<62), cl.LocalMem(1<<62))
		t.Logf("2 x 1<<62 bytes of LocalMem: %v", err)
		assert.ErrorIs(t, err, cl.ErrOutOfResources)
		return
	case "":
	default:
		t.Skip("a child of Reexec for another test")
	}
	cltest.Device(t, "pocl")
	cltest.Watchdog(t, 60*time.Second)
	out, err := cltest.Reexec(t, "^TestHostileS30bLocalMemSumOverflowAbortsPOCL$", cltest.ChildEnv+"="+role)
	assert.NoError(t, err, "local-memory arguments whose sum wraps int64 crashed the process:\n%s", s30Head(out))
	assert.True(t, strings.Contains(out, "CL_OUT_OF_RESOURCES"), "the child saw no CL_OUT_OF_RESOURCES")
}

// Kernel.qualifier (program.go) asks clGetKernelArgInfo only for
// 0 <= i <= MaxUint32 and otherwise answers qualUnknown, "clSetKernelArg
// answers". It does not: SetArg passes C.cl_uint(i), which truncates
// 1<<32+1 to 1, so SetArg(1<<32+1, LocalMem(4)) skips the new qualifier
// check and sets argument 1, a float, to local memory: on Oclgrind the
// same SIGSEGV inside clSetKernelArg that
// TestHostileS30LocalMemForScalarArgCrashesOclgrind was fixed for (on
// POCL it silently sets argument 1 instead of refusing index 1<<32+1).
// Expected: ErrInvalidArgIndex (there is no argument 1<<32+1), the
// process alive. Observed: SIGSEGV in clSetKernelArg(k, 0x1, 0x4, 0x0).
// Run in a child.
func TestHostileS30bArgIndexTruncatedBypassesQualifierCheck(t *testing.T) {
	const role = "s30b-index-truncated"
	switch os.Getenv(cltest.ChildEnv) {
	case role:
		q := s30Queue(t, "oclgrind")
		prog, err := q.Context().BuildProgram(`kernel void k(global int *x, float f) { x[0] = (int)f; }`, "")
		require.NoError(t, err)
		defer prog.Release()
		k, err := prog.Kernel("k")
		require.NoError(t, err)
		defer k.Release()
		err = k.SetArg(1<<32+1, cl.LocalMem(4))
		t.Logf("SetArg(1<<32+1, LocalMem(4)): %v", err)
		assert.ErrorIs(t, err, cl.ErrInvalidArgIndex)
		return
	case "":
	default:
		t.Skip("a child of Reexec for another test")
	}
	cltest.Device(t, "oclgrind")
	cltest.Watchdog(t, 60*time.Second)
	out, err := cltest.Reexec(t, "^TestHostileS30bArgIndexTruncatedBypassesQualifierCheck$", cltest.ChildEnv+"="+role)
	assert.NoError(t, err, "SetArg(1<<32+1, LocalMem) crashed the process:\n%s", s30Head(out))
	assert.True(t, strings.Contains(out, "CL_INVALID_ARG_INDEX"), "the child saw no CL_INVALID_ARG_INDEX")
}
