package cl_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s32gChild runs body in a child process of this test binary (a crash of
// the runtime kills the child only) and fails if the child fails.
func s32gChild(t *testing.T, test, role string, body func(t *testing.T)) {
	t.Helper()
	if os.Getenv(cltest.ChildEnv) == role {
		body(t)
		return
	} else if os.Getenv(cltest.ChildEnv) != "" {
		t.Skip("a child of reexec for another test")
	}
	cltest.Watchdog(t, 120*time.Second)
	out, err := cltest.Reexec(t, "^"+test+"$", cltest.ChildEnv+"="+role)
	assert.NoError(t, err, "the child crashed or failed:\n%s", firstLines(out, 40))
	if err == nil {
		t.Logf("child:\n%s", firstLines(out, 40))
	}
}

func s32gKernel(t *testing.T, q *cl.CommandQueue, src, opts, name string) *cl.Kernel {
	t.Helper()
	p, err := q.Context().BuildProgram(src, opts)
	require.NoError(t, err)
	t.Cleanup(func() { p.Release() })
	k, err := p.Kernel(name)
	require.NoError(t, err)
	t.Cleanup(func() { k.Release() })
	return k
}

func s32gBuf(t *testing.T, q *cl.CommandQueue, n int64) *cl.Buffer {
	t.Helper()
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, n)
	require.NoError(t, err)
	t.Cleanup(func() { b.Release() })
	return b
}

func s32gCallOf(err error) string {
	var ce *cl.CallError
	if errors.As(err, &ce) {
		return ce.Call
	}
	return ""
}

var s32gNumbers = []any{int8(1), uint8(1), int16(1), uint16(1), int32(1), uint32(1),
	int64(0x12345678), uint64(0x12345678), float32(1), float64(1)}

// PASSES (exploration): BuildProgram with the user's options invalid, with
// the flag given already, empty, and a build error keeps its log.
func TestHostileS32gBuildOptions(t *testing.T) {
	cltest.Watchdog(t, 120*time.Second)
	q := cltest.Queue(t)
	ctx := q.Context()
	const src = `kernel void k(global int *x) { x[0] = 1; }`
	for _, opts := range []string{"-cl-no-such-option", "--garbage", "-cl-std=CL9.9"} {
		_, err := ctx.BuildProgram(src, opts)
		require.Error(t, err, "options %q", opts)
		assert.Equal(t, "clBuildProgram", s32gCallOf(err), "options %q: %v", opts, err)
		assert.True(t, errors.Is(err, cl.ErrInvalidBuildOptions) || errors.Is(err, cl.ErrBuildProgramFailure), "options %q: %v", opts, err)
		t.Logf("options %q: %v", opts, err)
	}
	for _, opts := range []string{"", "-cl-kernel-arg-info", "-cl-kernel-arg-info -cl-kernel-arg-info", "  -cl-fast-relaxed-math  ", "-DX=1 -cl-kernel-arg-info"} {
		k := s32gKernel(t, q, src, opts, "k")
		err := k.SetArg(0, int64(0x1234))
		assert.ErrorIs(t, err, cl.ErrInvalidMemObject, "options %q: the qualifier check is off", opts)
	}
	_, err := ctx.BuildProgram("kernel void k(global int *x) { x[0] = undefined_thing; }", "")
	var be *cl.BuildError
	require.True(t, errors.As(err, &be), "%v", err)
	assert.Contains(t, be.Log, "undefined_thing")
	assert.ErrorIs(t, err, cl.ErrBuildProgramFailure)
	// A build error with invalid options too.
	_, err = ctx.BuildProgram("kernel void k( {", "-cl-no-such-option")
	require.Error(t, err)
	assert.Equal(t, "clBuildProgram", s32gCallOf(err))
	t.Logf("bad source, bad options: %v", err)
}

// Options whose last token takes an argument: the added flag became that
// argument, and NVIDIA's driver then crashed on the number SetArg could no
// longer refuse. BuildProgram refuses such options now.
func TestHostileS32gDanglingOption(t *testing.T) {
	s32gChild(t, "TestHostileS32gDanglingOption", "s32g-dangling", func(t *testing.T) {
		q := cltest.Queue(t)
		for _, opts := range []string{"-I", "-D", "-x"} {
			p, err := q.Context().BuildProgram(`kernel void k(global int *x) { x[0] = 1; }`, opts)
			t.Logf("options %q: err %v", opts, err)
			if err != nil {
				assert.ErrorIs(t, err, cl.ErrInvalidBuildOptions)
				continue
			}
			k, err := p.Kernel("k")
			require.NoError(t, err)
			err = k.SetArg(0, int64(0x1234))
			assert.Error(t, err, "options %q: build succeeded and a number for a global pointer was taken", opts)
			k.Release()
			p.Release()
		}
	})
}

// Every number type for every __global / __constant pointer argument is
// refused (in a child: a number taken crashes POCL).
func TestHostileS32gNumbersForPointersRefused(t *testing.T) {
	s32gChild(t, "TestHostileS32gNumbersForPointersRefused", "s32g-numbers", func(t *testing.T) {
		q := cltest.Queue(t)
		k := s32gKernel(t, q, `kernel void k(global int *g, constant int *c, global const float * restrict r, volatile global int *v, __global uchar *u) {
			g[get_global_id(0)] = c[0] + (int)r[0] + v[0] + u[0]; }`, "", "k")
		for i := 0; i < 5; i++ {
			for _, n := range s32gNumbers {
				err := k.SetArg(i, n)
				assert.ErrorIs(t, err, cl.ErrInvalidMemObject, "argument %d, %T", i, n)
				assert.Equal(t, "clSetKernelArg", s32gCallOf(err))
			}
		}
		bs := make([]any, 5)
		for i := range bs {
			b := s32gBuf(t, q, 64)
			require.NoError(t, q.WriteBuffer(b, 0, make([]byte, 64)))
			bs[i] = b
		}
		require.NoError(t, k.SetArgs(bs...))
		require.NoError(t, q.EnqueueKernel(k, []int{4}, nil))
		require.NoError(t, q.Finish())
	})
}

// Every legal argument is taken: __private scalars of every size, __local
// with LocalMem, buffers for pointers; the values reach the kernel.
func TestHostileS32gLegalArgsTaken(t *testing.T) {
	s32gChild(t, "TestHostileS32gLegalArgsTaken", "s32g-legal", func(t *testing.T) {
		q := cltest.Queue(t)
		fp64 := true
		dbl, dval := "float", any(float32(2.5))
		pragma := ""
		if fp64 {
			dbl, dval, pragma = "double", float64(2.5), "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"
		}
		src := pragma + `kernel void k(global long *o, char a, uchar b, short c, ushort d, int e, uint f, long g, ulong h, float fl, ` + dbl + ` db, local int *l, constant int *cst) {
			l[0] = cst[0]; barrier(CLK_LOCAL_MEM_FENCE);
			o[0] = a; o[1] = b; o[2] = c; o[3] = d; o[4] = e; o[5] = f; o[6] = g; o[7] = (long)h;
			o[8] = (long)(fl * 2); o[9] = (long)(db * 2); o[10] = l[0]; }`
		k := s32gKernel(t, q, src, "", "k")
		out := s32gBuf(t, q, 11*8)
		cst := s32gBuf(t, q, 4)
		require.NoError(t, q.WriteBuffer(cst, 0, []byte{42, 0, 0, 0}))
		require.NoError(t, k.SetArgs(out, int8(-3), uint8(250), int16(-30000), uint16(60000), int32(-2000000000), uint32(4000000000),
			int64(-1<<40), uint64(1<<62), float32(1.5), dval, cl.LocalMem(64), cst))
		require.NoError(t, q.EnqueueKernel(k, []int{1}, []int{1}))
		got := make([]byte, 11*8)
		require.NoError(t, q.ReadBuffer(out, 0, got))
		want := []int64{-3, 250, -30000, 60000, -2000000000, 4000000000, -1 << 40, 1 << 62, 3, 5, 42}
		for i, w := range want {
			assert.Equal(t, w, int64(binary.LittleEndian.Uint64(got[8*i:])), "o[%d]", i)
		}
		// Wrong but same-size: a buffer for a __private long; LocalMem for
		// a __private; a number for __local.
		assert.Error(t, k.SetArg(1, cl.LocalMem(1)))
		assert.Error(t, k.SetArg(11, int32(4)))
		t.Logf("a *Buffer for a __private long: %v", k.SetArg(7, out))
	})
}

// A buffer argument overwritten by a number, by another buffer, by an SVM,
// is forgotten: releasing it afterwards must not refuse the enqueue.
func TestHostileS32gOverwrittenArgForgotten(t *testing.T) {
	s32gChild(t, "TestHostileS32gOverwrittenArgForgotten", "s32g-overwrite", func(t *testing.T) {
		q := cltest.Queue(t)
		k := s32gKernel(t, q, `kernel void k(global long *o, long n) { o[0] = n; }`, "", "k")
		out := s32gBuf(t, q, 8)
		x, err := q.Context().CreateBuffer(cl.MemReadWrite, 8)
		require.NoError(t, err)
		err = k.SetArg(1, x) // same size as a long: the runtime may take it
		t.Logf("a buffer for a __private long: %v", err)
		require.NoError(t, k.SetArg(1, int64(5)))
		require.NoError(t, k.SetArg(0, x))
		require.NoError(t, k.SetArg(0, out))
		require.NoError(t, x.Release())
		require.NoError(t, q.EnqueueKernel(k, []int{1}, nil), "a released buffer overwritten by another still refuses")
		got := make([]byte, 8)
		require.NoError(t, q.ReadBuffer(out, 0, got))
		assert.Equal(t, int64(5), int64(binary.LittleEndian.Uint64(got)))

		// A failed SetArg keeps the old argument, and its tracking.
		y, err := q.Context().CreateBuffer(cl.MemReadWrite, 8)
		require.NoError(t, err)
		require.NoError(t, k.SetArg(0, y))
		require.Error(t, k.SetArg(0, int32(1)))
		require.Error(t, k.SetArg(0, cl.LocalMem(8)))
		require.NoError(t, y.Release())
		err = q.EnqueueKernel(k, []int{1}, nil)
		assert.ErrorIs(t, err, cl.ErrInvalidMemObject)
		// A refused enqueue changes nothing: a new buffer runs.
		require.NoError(t, k.SetArg(0, out))
		require.NoError(t, q.EnqueueKernel(k, []int{1}, nil))
		require.NoError(t, q.Finish())

		if q.Context().SVMCapabilities()&cl.SVMCoarseGrainBuffer == 0 {
			t.Log("no SVM")
			return
		}
		s, err := q.Context().SVMAlloc(cl.SVMReadWrite, 256, 0)
		require.NoError(t, err)
		z, err := q.Context().CreateBuffer(cl.MemReadWrite, 8)
		require.NoError(t, err)
		require.NoError(t, k.SetArg(0, z))
		require.NoError(t, k.SetArgSVMPointer(0, s, 64))
		require.NoError(t, z.Release())
		require.NoError(t, q.EnqueueKernel(k, []int{1}, nil), "buffer overwritten by an SVM")
		require.NoError(t, q.Finish())
		require.NoError(t, k.SetArg(0, out))
		require.NoError(t, s.Free())
		require.NoError(t, q.EnqueueKernel(k, []int{1}, nil), "SVM overwritten by a buffer")
		require.NoError(t, q.Finish())
	})
}

// An SVM set with an offset and freed, a buffer released between two
// enqueues: both enqueue calls refuse, and the process lives.
func TestHostileS32gFreedAndReleasedArgsRefused(t *testing.T) {
	s32gChild(t, "TestHostileS32gFreedAndReleasedArgsRefused", "s32g-freed", func(t *testing.T) {
		q := cltest.Queue(t)
		k := s32gKernel(t, q, `kernel void k(global int *o, global int *p) { o[get_global_id(0)] = p[get_global_id(0)] + 1; }`, "", "k")
		out := s32gBuf(t, q, 1<<20)
		b, err := q.Context().CreateBuffer(cl.MemReadWrite, 1<<20)
		require.NoError(t, err)
		require.NoError(t, k.SetArgs(out, b))
		require.NoError(t, q.EnqueueKernel(k, []int{1 << 18}, nil))
		require.NoError(t, q.Finish())
		require.NoError(t, b.Release())
		err = q.EnqueueKernel(k, []int{1 << 18}, nil)
		assert.ErrorIs(t, err, cl.ErrInvalidMemObject)
		_, err = q.EnqueueNDRangeKernel(k, nil, []int{1 << 18}, nil)
		assert.ErrorIs(t, err, cl.ErrInvalidMemObject)
		assert.Equal(t, "clEnqueueNDRangeKernel", s32gCallOf(err))

		if q.Context().SVMCapabilities()&cl.SVMCoarseGrainBuffer == 0 {
			t.Log("no SVM")
			return
		}
		s, err := q.Context().SVMAlloc(cl.SVMReadWrite, 1<<20+4096, 0)
		require.NoError(t, err)
		require.NoError(t, k.SetArgSVMPointer(1, s, 4096))
		require.NoError(t, q.EnqueueKernel(k, []int{1 << 18}, nil))
		require.NoError(t, q.Finish())
		require.NoError(t, s.Free())
		err = q.EnqueueKernel(k, []int{1 << 18}, nil)
		assert.ErrorIs(t, err, cl.ErrInvalidValue)
		_, err = q.EnqueueNDRangeKernel(k, []int{0}, []int{1 << 18}, nil)
		assert.ErrorIs(t, err, cl.ErrInvalidValue)
		s2, err := q.Context().SVMAlloc(cl.SVMReadWrite, 1<<20, 0)
		require.NoError(t, err)
		defer s2.Free()
		require.NoError(t, k.SetArg(1, s2))
		require.NoError(t, q.EnqueueKernel(k, []int{1 << 18}, nil))
		require.NoError(t, q.Finish())
	})
}

// A kernel of many arguments: the last one released is seen.
func TestHostileS32gManyArgs(t *testing.T) {
	s32gChild(t, "TestHostileS32gManyArgs", "s32g-many", func(t *testing.T) {
		q := cltest.Queue(t)
		const n = 60
		var params, body []string
		for i := 0; i < n; i++ {
			params = append(params, fmt.Sprintf("global int *p%d", i))
			body = append(body, fmt.Sprintf("p%d[0] = %d;", i, i))
		}
		k := s32gKernel(t, q, "kernel void k("+strings.Join(params, ", ")+") {"+strings.Join(body, " ")+"}", "", "k")
		bufs := make([]*cl.Buffer, n)
		for i := range bufs {
			b, err := q.Context().CreateBuffer(cl.MemReadWrite, 64)
			require.NoError(t, err)
			bufs[i] = b
			require.NoError(t, k.SetArg(n-1-i, b)) // highest index first
		}
		require.NoError(t, q.EnqueueKernel(k, []int{1}, nil))
		require.NoError(t, q.Finish())
		require.NoError(t, bufs[0].Release()) // argument n-1
		err := q.EnqueueKernel(k, []int{1}, nil)
		assert.ErrorIs(t, err, cl.ErrInvalidMemObject)
		assert.Contains(t, fmt.Sprint(err), fmt.Sprintf("argument %d", n-1))
		assert.ErrorIs(t, k.SetArg(n, bufs[1]), cl.ErrInvalidArgIndex)
		assert.Error(t, k.SetArg(math.MaxUint32, bufs[1]))
		assert.Error(t, k.SetArg(math.MaxUint32+1, bufs[1]))
		assert.Error(t, k.SetArg(5000, bufs[1]))
		for _, b := range bufs[1:] {
			b.Release()
		}
	})
}

// FAILED on 3201ce0: a number for a sampler_t argument (its address qualifier is
// __private, so the new check lets it through) is taken by SetArg and the
// enqueue hands it to POCL as a cl_sampler: SIGSEGV in
// clEnqueueNDRangeKernel, the process dies. Same with a *Buffer for an
// image2d_t (qualifier __global, so a *Buffer passes). SetArg has no Go
// type for samplers or images, so nothing legal is lost by refusing them.
func TestHostileS32gNumberForSamplerCrashes(t *testing.T) {
	s32gChild(t, "TestHostileS32gNumberForSamplerCrashes", "s32g-sampler", func(t *testing.T) {
		q := cltest.Queue(t)
		k := s32gKernel(t, q, `kernel void k(global int *o, sampler_t s) { o[0] = 1; }`, "", "k")
		out := s32gBuf(t, q, 64)
		require.NoError(t, k.SetArg(0, out))
		err := k.SetArg(1, uint64(0xdead0000))
		if err == nil {
			err = q.EnqueueKernel(k, []int{1}, nil)
			if err == nil {
				err = q.Finish()
			}
		}
		assert.Error(t, err, "a uint64 for a sampler_t was taken")
	})
}

// FAILED on 3201ce0: see TestHostileS32gNumberForSamplerCrashes: a *Buffer for an
// image2d_t argument.
func TestHostileS32gBufferForImageCrashes(t *testing.T) {
	s32gChild(t, "TestHostileS32gBufferForImageCrashes", "s32g-image", func(t *testing.T) {
		q := cltest.Queue(t)
		k := s32gKernel(t, q, `kernel void k(global int *o, read_only image2d_t img) { o[0] = get_image_width(img); }`, "", "k")
		out := s32gBuf(t, q, 64)
		require.NoError(t, k.SetArg(0, out))
		err := k.SetArg(1, out)
		if err == nil {
			err = q.EnqueueKernel(k, []int{1}, nil)
			if err == nil {
				err = q.Finish()
			}
		}
		assert.Error(t, err, "a buffer for an image2d_t was taken")
	})
}

// Two goroutines, two kernels, shared buffers: SetArg and enqueue with
// -race, and a buffer released by one while the other is between calls.
func TestHostileS32gConcurrentKernels(t *testing.T) {
	cltest.Watchdog(t, 120*time.Second)
	q := cltest.Queue(t)
	src := `kernel void k(global int *o, global const int *p, int n) { o[get_global_id(0)] = p[get_global_id(0)] + n; }`
	shared := s32gBuf(t, q, 4096)
	require.NoError(t, q.WriteBuffer(shared, 0, make([]byte, 4096)))
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for g := 0; g < 2; g++ {
		k := s32gKernel(t, q, src, "", "k")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				o, err := q.Context().CreateBuffer(cl.MemReadWrite, 4096)
				if err != nil {
					errs <- err
					return
				}
				if err := k.SetArgs(o, shared, int32(i)); err != nil {
					errs <- err
					return
				}
				if err := q.EnqueueKernel(k, []int{1024}, nil); err != nil {
					errs <- err
					return
				}
				got := make([]byte, 4)
				if err := q.ReadBuffer(o, 0, got); err != nil {
					errs <- err
					return
				}
				if v := int32(binary.LittleEndian.Uint32(got)); v != int32(i) {
					errs <- fmt.Errorf("goroutine %d: got %d want %d", g, v, i)
					return
				}
				o.Release()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
}

// FAILED on 3201ce0 (reported as minor by the s32g review): a *Buffer for a
// __private long or ulong argument was taken, its handle becoming the
// value. Now refused with ErrInvalidArgValue, as a number for a pointer is.
func TestHostileS32gBufferForValueRefused(t *testing.T) {
	q := cltest.Queue(t)
	k := s32gKernel(t, q, `kernel void k(global long *o, long n, ulong m) { o[0] = n + (long)m; }`, "", "k")
	buf := s32gBuf(t, q, 64)
	require.NoError(t, k.SetArg(0, buf))
	for i := 1; i <= 2; i++ {
		err := k.SetArg(i, buf)
		require.ErrorIs(t, err, cl.ErrInvalidArgValue, "argument %d", i)
		assert.Equal(t, "clSetKernelArg", s32gCallOf(err))
	}
	require.NoError(t, k.SetArg(1, int64(5)))
	require.NoError(t, k.SetArg(2, uint64(2)))
	require.NoError(t, q.EnqueueKernel(k, []int{1}, nil))
	require.NoError(t, q.Finish())
}
