package cl_test

import (
	"os"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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
	if os.Getenv(cltest.ChildEnv) == "" {
		dev := cltest.Device(t, "pocl")
		require.Less(t, dev.LocalMemSize, int64(1572864+1<<20), "the case needs a device with less than 2.5 MiB of local memory")
	}
	s30Child(t, "pocl", "CL_OUT_OF_RESOURCES", func(t *testing.T) {
		err := s30LocalRun(t, "pocl",
			`kernel void k(global int *x, local int *l) { local char buf[1572864]; buf[x[1]] = 1; l[0] = buf[x[2]]; x[0] = l[0]; }`,
			cl.LocalMem(1<<20))
		t.Logf("1.5 MiB __local array + 1 MiB LocalMem: %v", err)
		assert.ErrorIs(t, err, cl.ErrOutOfResources)
	})
}

// enqueueNDRange's check sums the LocalMem arguments in an int64
// (localBytes, program.go) with no overflow check: two arguments of
// 1<<62 bytes each (each alone refused: "more than the device's") sum to
// 1<<63, which wraps to a negative number, so `need > have` is false and
// the enqueue goes to POCL, which aborts the process (assertion in
// setup_kernel_arg_array_with_locals). Expected: ErrOutOfResources, the
// answer for either argument alone. Observed: SIGABRT. Run in a child.
func TestHostileS30bLocalMemSumOverflowAbortsPOCL(t *testing.T) {
	s30Child(t, "pocl", "CL_OUT_OF_RESOURCES", func(t *testing.T) {
		err := s30LocalRun(t, "pocl",
			`kernel void k(global int *x, local char *l, local char *m) { l[0] = 1; m[0] = 2; x[0] = l[0] + m[0]; }`,
			cl.LocalMem(1<<62), cl.LocalMem(1<<62))
		t.Logf("2 x 1<<62 bytes of LocalMem: %v", err)
		assert.ErrorIs(t, err, cl.ErrOutOfResources)
	})
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
	s30Child(t, "oclgrind", "CL_INVALID_ARG_INDEX", func(t *testing.T) {
		_, k := s30Kernel(t, "oclgrind", `kernel void k(global int *x, float f) { x[0] = (int)f; }`)
		err := k.SetArg(1<<32+1, cl.LocalMem(4))
		t.Logf("SetArg(1<<32+1, LocalMem(4)): %v", err)
		assert.ErrorIs(t, err, cl.ErrInvalidArgIndex)
	})
}
