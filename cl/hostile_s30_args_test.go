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

// s30Queue returns a queue, in a context of its own, on the first device
// that name matches, released at the end of the test; it skips where there
// is none.
func s30Queue(t *testing.T, name string) *cl.CommandQueue {
	t.Helper()
	dev := cltest.Device(t, name)
	ctx, err := cl.CreateContext(dev)
	require.NoError(t, err)
	q, err := cl.NewCommandQueue(ctx, dev, 0)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, q.Release())
		assert.NoError(t, ctx.Release())
	})
	return q
}

// BuildProgram and Program.Kernel hand Go strings to C with C.CString,
// which silently cuts them at the first NUL byte: a source with garbage
// after a NUL builds, build options that are refused without the NUL
// ("-bogus-option": CL_INVALID_BUILD_OPTIONS) are accepted after one, and
// Kernel("k\x00junk") makes kernel "k" while Name() reports "k\x00junk".
// Bad input is silently accepted and changes what is built; it should be
// refused (ErrInvalidValue, ErrInvalidBuildOptions, ErrInvalidKernelName).
func TestHostileS30NULInStringsSilentlyTruncated(t *testing.T) {
	cltest.Watchdog(t, 30*time.Second)
	q := cltest.Queue(t)
	const src = `kernel void k(global int *x) { x[0] = 1; }`

	prog, err := q.Context().BuildProgram(src+"\x00 this is not OpenCL C {{{", "")
	assert.Error(t, err, "a source with garbage after a NUL byte builds")
	if prog != nil {
		defer prog.Release()
	}

	_, err = q.Context().BuildProgram(src, "-bogus-option")
	require.Error(t, err, "the bogus option is refused without a NUL (ErrInvalidBuildOptions on POCL, a build failure on Oclgrind)")
	p2, err := q.Context().BuildProgram(src, "\x00-bogus-option")
	assert.Error(t, err, "the same bogus option is accepted after a NUL byte")
	if p2 != nil {
		defer p2.Release()
	}

	good, err := q.Context().BuildProgram(src, "")
	require.NoError(t, err)
	defer good.Release()
	k, err := good.Kernel("k\x00junk")
	if k != nil {
		defer k.Release()
		t.Logf("Kernel(%q) made a kernel whose Name() is %q", "k\x00junk", k.Name())
	}
	assert.ErrorIs(t, err, cl.ErrInvalidKernelName, "the program has no kernel called \"k\\x00junk\"")
}

// LocalMem passed for an argument that is not __local: SetArg hands
// clSetKernelArg a NULL arg_value, which the specification makes
// CL_INVALID_ARG_VALUE for a by-value argument (POCL answers that).
// Oclgrind does not check it and dereferences the NULL: the whole process
// dies with SIGSEGV inside SetArg. The package doc promises that it checks
// the rules runtimes leave out ("so every runtime answers the same
// Status"), and SetArg already checks LocalMem <= 0 for this reason.
// Run in a child process, since it crashes.
func TestHostileS30LocalMemForScalarArgCrashesOclgrind(t *testing.T) {
	s30Child(t, "oclgrind", "CL_INVALID_ARG_VALUE", func(t *testing.T) {
		_, k := s30Kernel(t, "oclgrind", `kernel void k(global int *x, float f) { x[0] = (int)f; }`)
		err := k.SetArg(1, cl.LocalMem(4)) // argument 1 is a float, not __local
		t.Logf("SetArg(float arg, LocalMem(4)): %v", err)
		assert.ErrorIs(t, err, cl.ErrInvalidArgValue)
	})
}

// A non-local value (a buffer, an int32) for a __local argument: the
// specification makes it CL_INVALID_ARG_VALUE (arg_value must be NULL for
// __local), POCL answers that, Oclgrind accepts it without a word and the
// kernel then runs with it. Same promise as above.
func TestHostileS30NonLocalValueForLocalArgOclgrind(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	q := s30Queue(t, "oclgrind")
	prog, err := q.Context().BuildProgram(`kernel void k(global int *x, local int *l) { l[0] = 1; x[0] = l[0]; }`, "")
	require.NoError(t, err)
	defer prog.Release()
	k, err := prog.Kernel("k")
	require.NoError(t, err)
	defer k.Release()
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, 64)
	require.NoError(t, err)
	defer b.Release()
	assert.ErrorIs(t, k.SetArg(1, b), cl.ErrInvalidArgValue, "a buffer for a __local argument")
	assert.ErrorIs(t, k.SetArg(1, int32(1)), cl.ErrInvalidArgValue, "an int32 for a __local argument")
}

// LocalMem larger than the device's local memory: SetArg only refuses
// sizes <= 0, and on POCL both SetArg and EnqueueNDRangeKernel accept
// 64 MiB of local memory; POCL then fails an assertion in its worker
// ("setup_kernel_arg_array_with_locals: Assertion ... <= local_mem_size")
// and aborts the whole process. Expected: an error (the specification's
// CL_OUT_OF_RESOURCES at the enqueue, as Oclgrind answers, or a refusal at
// SetArg against CL_DEVICE_LOCAL_MEM_SIZE), and a process that survives.
// Run in a child process, since it aborts.
func TestHostileS30LocalMemOverDeviceLimitAbortsPOCL(t *testing.T) {
	s30Child(t, "pocl", "", func(t *testing.T) {
		err := s30LocalRun(t, "pocl", `kernel void k(global int *x, local int *l) { l[0] = 1; x[0] = l[0]; }`, cl.LocalMem(64<<20))
		t.Logf("64 MiB of local memory: %v", err)
		assert.Error(t, err)
	})
}

// clEnqueueCopyBuffer between two different sub-buffers of one buffer
// whose regions overlap in the parent: the OpenCL 1.2 specification makes
// it CL_MEM_COPY_OVERLAP, POCL answers that, Oclgrind accepts it and
// copies between overlapping memory (undefined result). The package
// checks "copies of 0 bytes" and other rules Oclgrind skips so that
// "every runtime answers the same Status", but not this one; pool blocks
// are exactly such sub-buffers.
func TestHostileS30OverlappingSubBufferCopyOclgrind(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	q := s30Queue(t, "oclgrind")
	ctx := q.Context()
	al := ctx.MemBaseAddrAlign()
	require.Positive(t, al)
	parent, err := ctx.CreateBuffer(cl.MemReadWrite, 4*al)
	require.NoError(t, err)
	defer parent.Release()
	s1, err := parent.CreateSubBuffer(0, 0, 2*al) // parent [0, 2al)
	require.NoError(t, err)
	defer s1.Release()
	s2, err := parent.CreateSubBuffer(0, al, 2*al) // parent [al, 3al)
	require.NoError(t, err)
	defer s2.Release()
	// s1 [al, al+16) and s2 [0, 16) are both parent [al, al+16).
	ev, err := q.EnqueueCopyBuffer(s1, s2, al, 0, 16)
	if ev != nil {
		_ = ev.Wait()
		_ = ev.Release()
	}
	assert.ErrorIs(t, err, cl.ErrMemCopyOverlap)
}

// s30Head returns the start of a child's output: what it logged and how it
// died, without the goroutine dump.
func s30Head(out string) string {
	if i := strings.Index(out, "\ngoroutine "); i >= 0 {
		out = out[:i]
	}
	if len(out) > 1500 {
		out = out[:1500]
	}
	return out
}

// s30Child runs body in a child process of the test binary, on the device
// named dev: body may crash the process (POCL aborts, Oclgrind segfaults
// on some misuse). The test requires the child to pass, and its output to
// name want (a Status; "" for none). In the child, s30Child runs body and
// nothing else.
func s30Child(t *testing.T, dev, want string, body func(t *testing.T)) {
	role := "s30-" + t.Name()
	switch os.Getenv(cltest.ChildEnv) {
	case role:
		body(t)
		return
	case "":
	default:
		t.Skip("a child of Reexec for another test")
	}
	cltest.Device(t, dev)
	cltest.Watchdog(t, 60*time.Second)
	out, err := cltest.Reexec(t, "^"+t.Name()+"$", cltest.ChildEnv+"="+role)
	require.NoError(t, err, "the child crashed or failed:\n%s", s30Head(out))
	if want != "" {
		assert.Contains(t, out, want, "the child saw no %s", want)
	}
}

// s30Kernel builds src on the device named dev and returns its queue and
// kernel k, released at the end of the test.
func s30Kernel(t *testing.T, dev, src string) (*cl.CommandQueue, *cl.Kernel) {
	q := s30Queue(t, dev)
	prog, err := q.Context().BuildProgram(src, "")
	require.NoError(t, err)
	t.Cleanup(func() { prog.Release() })
	k, err := prog.Kernel("k")
	require.NoError(t, err)
	t.Cleanup(func() { k.Release() })
	return q, k
}

// s30LocalRun builds src on the named device, sets argument 0 to a
// 64-byte buffer and arguments 1.. to locals, enqueues one work-item and
// finishes; it returns the first error.
func s30LocalRun(t *testing.T, dev, src string, locals ...cl.LocalMem) error {
	q, k := s30Kernel(t, dev, src)
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
