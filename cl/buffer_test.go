package cl_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCreateAndReleaseBuffer(t *testing.T) {
	q := cltest.Queue(t)
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, 4096)
	require.NoError(t, err)
	assert.Equal(t, int64(4096), b.Size())
	assert.Equal(t, cl.MemReadWrite, b.Flags())
	assert.Same(t, q.Context(), b.Context())

	info, err := b.Info()
	require.NoError(t, err)
	assert.Equal(t, int64(4096), info.Size)
	assert.Equal(t, cl.MemReadWrite, info.Flags)
	assert.Equal(t, 1, info.RefCount)

	require.NoError(t, b.Release())
	assert.True(t, b.Released())
	assert.NoError(t, b.Release(), "Release is idempotent")
}

func TestCreateBufferErrors(t *testing.T) {
	q := cltest.Queue(t)
	ctx := q.Context()
	tests := []struct {
		name  string
		flags cl.MemFlags
		size  int64
		want  cl.Status
	}{
		{"size 0", cl.MemReadWrite, 0, cl.ErrInvalidBufferSize},
		{"negative size", cl.MemReadWrite, -1, cl.ErrInvalidBufferSize},
		{"read-only and write-only", cl.MemReadOnly | cl.MemWriteOnly, 64, cl.ErrInvalidValue},
		{"unknown flag bit", cl.MemReadWrite | 1<<20, 64, cl.ErrInvalidValue},
		{"use-host-ptr without memory", cl.MemUseHostPtr, 64, cl.ErrInvalidHostPtr},
		{"copy-host-ptr without memory", cl.MemCopyHostPtr, 64, cl.ErrInvalidHostPtr},
		{"over the device's max allocation", cl.MemReadWrite, q.Device().MaxMemAllocSize + 1, cl.ErrInvalidBufferSize},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := ctx.CreateBuffer(tt.flags, tt.size)
			require.ErrorIs(t, err, tt.want)
			assert.Nil(t, b)
			assert.Contains(t, err.Error(), "clCreateBuffer")
		})
	}
}

func TestReleasedObjectsAreRefused(t *testing.T) {
	q := cltest.Queue(t)
	ctx := q.Context()
	b, err := ctx.CreateBuffer(cl.MemReadWrite, 64)
	require.NoError(t, err)
	require.NoError(t, b.Release())

	buf := make([]byte, 16)
	assert.ErrorIs(t, q.WriteBuffer(b, 0, buf), cl.ErrInvalidMemObject)
	assert.ErrorIs(t, q.ReadBuffer(b, 0, buf), cl.ErrInvalidMemObject)
	_, err = q.EnqueueFillBuffer(b, []byte{1}, 0, 16)
	assert.ErrorIs(t, err, cl.ErrInvalidMemObject)
	_, err = b.Info()
	assert.ErrorIs(t, err, cl.ErrInvalidMemObject)
	_, err = b.CreateSubBuffer(cl.MemReadWrite, 0, 16)
	assert.ErrorIs(t, err, cl.ErrInvalidMemObject)
	assert.ErrorIs(t, q.Touch(b), cl.ErrInvalidMemObject)

	// A released context and queue.
	ctx2, err := cl.CreateContext(q.Device())
	require.NoError(t, err)
	q2, err := cl.NewCommandQueue(ctx2, q.Device(), 0)
	require.NoError(t, err)
	require.NoError(t, q2.Release())
	assert.ErrorIs(t, q2.Finish(), cl.ErrInvalidCommandQueue)
	assert.ErrorIs(t, q2.Flush(), cl.ErrInvalidCommandQueue)
	require.NoError(t, ctx2.Release())
	_, err = ctx2.CreateBuffer(cl.MemReadWrite, 64)
	assert.ErrorIs(t, err, cl.ErrInvalidContext)
	_, err = cl.NewCommandQueue(ctx2, q.Device(), 0)
	assert.ErrorIs(t, err, cl.ErrInvalidContext)
	_, err = ctx2.BuildProgram("kernel void k() {}", "")
	assert.ErrorIs(t, err, cl.ErrInvalidContext)
}

func TestWriteReadRoundTrip(t *testing.T) {
	q := cltest.Queue(t)
	n := cltest.Size(q, 1<<10, 1<<20)
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, int64(n))
	require.NoError(t, err)
	defer b.Release()

	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	t.Run("blocking", func(t *testing.T) {
		require.NoError(t, q.WriteBuffer(b, 0, src))
		dst := make([]byte, n)
		require.NoError(t, q.ReadBuffer(b, 0, dst))
		assert.True(t, bytes.Equal(src, dst))
	})
	t.Run("non-blocking with events", func(t *testing.T) {
		src2 := bytes.Repeat([]byte{0xAB}, n)
		w, err := q.EnqueueWriteBuffer(b, false, 0, src2)
		require.NoError(t, err)
		dst := make([]byte, n)
		r, err := q.EnqueueReadBuffer(b, false, 0, dst, w)
		require.NoError(t, err)
		require.NoError(t, r.Wait())
		st, err := r.Status()
		require.NoError(t, err)
		assert.Equal(t, cl.Complete, st)
		assert.True(t, bytes.Equal(src2, dst))
		require.NoError(t, w.Release())
		require.NoError(t, r.Release())
		assert.NoError(t, r.Release(), "Release is idempotent")
		assert.ErrorIs(t, r.Wait(), cl.ErrInvalidEvent)
	})
	t.Run("release waits for a pending read", func(t *testing.T) {
		dst := make([]byte, n)
		r, err := q.EnqueueReadBuffer(b, false, 0, dst)
		require.NoError(t, err)
		require.NoError(t, r.Release())
		assert.Equal(t, byte(0xAB), dst[n-1])
	})
	t.Run("offsets", func(t *testing.T) {
		require.NoError(t, q.WriteBuffer(b, 10, []byte{1, 2, 3}))
		dst := make([]byte, 5)
		require.NoError(t, q.ReadBuffer(b, 9, dst))
		assert.Equal(t, []byte{0xAB, 1, 2, 3, 0xAB}, dst)
	})
	t.Run("out of range", func(t *testing.T) {
		assert.ErrorIs(t, q.WriteBuffer(b, int64(n-1), []byte{1, 2}), cl.ErrInvalidValue)
		assert.ErrorIs(t, q.ReadBuffer(b, -1, []byte{1}), cl.ErrInvalidValue)
		assert.ErrorIs(t, q.ReadBuffer(b, 0, nil), cl.ErrInvalidValue)
	})
}

func TestTypedBytes(t *testing.T) {
	f := []float32{1, 2}
	assert.Len(t, cl.Bytes(f), 8)
	assert.Nil(t, cl.Bytes([]int64(nil)))
	q := cltest.Queue(t)
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, 8)
	require.NoError(t, err)
	defer b.Release()
	require.NoError(t, q.WriteBuffer(b, 0, cl.Bytes(f)))
	got := make([]float32, 2)
	require.NoError(t, q.ReadBuffer(b, 0, cl.Bytes(got)))
	assert.Equal(t, f, got)
}

func TestCreateBufferFromHost(t *testing.T) {
	q := cltest.Queue(t)
	b, err := q.Context().CreateBufferFromHost(cl.MemReadOnly, []byte("hello"))
	require.NoError(t, err)
	defer b.Release()
	assert.Equal(t, cl.MemReadOnly|cl.MemCopyHostPtr, b.Flags())
	got := make([]byte, 5)
	require.NoError(t, q.ReadBuffer(b, 0, got))
	assert.Equal(t, "hello", string(got))

	_, err = q.Context().CreateBufferFromHost(cl.MemUseHostPtr, []byte("x"))
	assert.ErrorIs(t, err, cl.ErrInvalidValue)
	_, err = q.Context().CreateBufferFromHost(cl.MemReadWrite, nil)
	assert.ErrorIs(t, err, cl.ErrInvalidBufferSize)
}

func TestFillAndCopy(t *testing.T) {
	q := cltest.Queue(t)
	const n = 256
	a, err := q.Context().CreateBuffer(cl.MemReadWrite, n)
	require.NoError(t, err)
	defer a.Release()
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, n)
	require.NoError(t, err)
	defer b.Release()

	ev, err := q.EnqueueFillBuffer(a, []byte{1, 2, 3, 4}, 0, n)
	require.NoError(t, err)
	require.NoError(t, ev.Wait())
	require.NoError(t, ev.Release())
	ev, err = q.EnqueueFillBuffer(b, []byte{9}, 0, n)
	require.NoError(t, err)
	require.NoError(t, ev.Release())

	ev, err = q.EnqueueCopyBuffer(a, b, 4, 64, 8)
	require.NoError(t, err)
	require.NoError(t, ev.Wait())
	require.NoError(t, ev.Release())
	got := make([]byte, n)
	require.NoError(t, q.ReadBuffer(b, 0, got))
	assert.Equal(t, []byte{9, 1, 2, 3, 4, 1, 2, 3, 4, 9}, got[63:73])
	assert.Equal(t, byte(9), got[0])

	_, err = q.EnqueueFillBuffer(a, []byte{1, 2, 3}, 0, n)
	assert.ErrorIs(t, err, cl.ErrInvalidValue, "a 3-byte pattern")
	_, err = q.EnqueueCopyBuffer(a, b, 0, n-4, 8)
	assert.ErrorIs(t, err, cl.ErrInvalidValue, "copy past the end")
	_, err = q.EnqueueCopyBuffer(a, a, 0, 4, 8)
	assert.ErrorIs(t, err, cl.ErrMemCopyOverlap)
}

func TestSubBuffers(t *testing.T) {
	q := cltest.Queue(t)
	align := q.Device().MemBaseAddrAlign
	parent, err := q.Context().CreateBuffer(cl.MemReadWrite, 4*align)
	require.NoError(t, err)
	defer parent.Release()
	require.NoError(t, q.WriteBuffer(parent, 0, make([]byte, 4*align)))

	t.Run("aligned origin", func(t *testing.T) {
		sub, err := parent.CreateSubBuffer(cl.MemReadWrite, align, align)
		require.NoError(t, err)
		defer sub.Release()
		p, origin := sub.Parent()
		assert.Same(t, parent, p)
		assert.Equal(t, align, origin)
		info, err := sub.Info()
		require.NoError(t, err)
		assert.Equal(t, align, info.Offset)
		assert.Equal(t, align, info.Size)

		require.NoError(t, q.WriteBuffer(sub, 0, []byte{7, 8}))
		got := make([]byte, 2)
		require.NoError(t, q.ReadBuffer(parent, align, got))
		assert.Equal(t, []byte{7, 8}, got)
	})
	t.Run("misaligned origin", func(t *testing.T) {
		_, err := parent.CreateSubBuffer(cl.MemReadWrite, 1, align)
		assert.ErrorIs(t, err, cl.ErrMisalignedSubBufferOffset)
	})
	t.Run("past the end", func(t *testing.T) {
		_, err := parent.CreateSubBuffer(cl.MemReadWrite, 4*align, align)
		assert.ErrorIs(t, err, cl.ErrInvalidValue)
	})
	t.Run("negative", func(t *testing.T) {
		_, err := parent.CreateSubBuffer(cl.MemReadWrite, -align, align)
		assert.ErrorIs(t, err, cl.ErrInvalidValue)
	})
}

func TestTouchCommitsAWrite(t *testing.T) {
	q := cltest.Queue(t)
	for _, size := range []int64{1, 3, 4, 4096} {
		b, err := q.Context().CreateBuffer(cl.MemReadWrite, size)
		require.NoError(t, err)
		fill := bytes.Repeat([]byte{0xFF}, int(size))
		require.NoError(t, q.WriteBuffer(b, 0, fill))
		require.NoError(t, q.Touch(b))
		got := make([]byte, size)
		require.NoError(t, q.ReadBuffer(b, 0, got))
		touched := min(size, 4)
		assert.Equal(t, make([]byte, touched), got[:touched], "size %d: first bytes zeroed", size)
		assert.Equal(t, fill[touched:], got[touched:], "size %d: the rest untouched", size)
		require.NoError(t, b.Release())
	}
}

// CreateSubBuffer refuses, on every runtime, what clCreateSubBuffer
// forbids: Oclgrind accepts all of it, POCL some of it.
func TestSubBufferFlagsAndSize(t *testing.T) {
	q := cltest.Queue(t)
	align := q.Device().MemBaseAddrAlign
	parent := func(flags cl.MemFlags) *cl.Buffer {
		b, err := q.Context().CreateBuffer(flags, 2*align)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, b.Release()) })
		return b
	}
	rw, wo, ro, hostWO := parent(cl.MemReadWrite), parent(cl.MemWriteOnly), parent(cl.MemReadOnly), parent(cl.MemHostWriteOnly)
	sub, err := rw.CreateSubBuffer(0, 0, align)
	require.NoError(t, err)
	defer sub.Release()

	tests := []struct {
		name   string
		parent *cl.Buffer
		flags  cl.MemFlags
		size   int64
		want   cl.Status // 0: allowed
	}{
		{"READ_WRITE|READ_ONLY", rw, cl.MemReadWrite | cl.MemReadOnly, align, cl.ErrInvalidValue},
		{"unknown bit", rw, cl.MemReadWrite | 1<<20, align, cl.ErrInvalidValue},
		{"USE_HOST_PTR", rw, cl.MemUseHostPtr, align, cl.ErrInvalidValue},
		{"ALLOC_HOST_PTR", rw, cl.MemAllocHostPtr, align, cl.ErrInvalidValue},
		{"COPY_HOST_PTR", rw, cl.MemCopyHostPtr, align, cl.ErrInvalidValue},
		{"READ_WRITE of WRITE_ONLY", wo, cl.MemReadWrite, align, cl.ErrInvalidValue},
		{"READ_ONLY of WRITE_ONLY", wo, cl.MemReadOnly, align, cl.ErrInvalidValue},
		{"WRITE_ONLY of READ_ONLY", ro, cl.MemWriteOnly, align, cl.ErrInvalidValue},
		{"HOST_READ_ONLY of HOST_WRITE_ONLY", hostWO, cl.MemHostReadOnly, align, cl.ErrInvalidValue},
		{"size 0", rw, 0, 0, cl.ErrInvalidBufferSize},
		{"of a sub-buffer", sub, 0, align, cl.ErrInvalidMemObject},
		{"WRITE_ONLY of WRITE_ONLY", wo, cl.MemWriteOnly, align, 0},
		{"READ_ONLY of READ_WRITE", rw, cl.MemReadOnly, align, 0},
		{"HOST_NO_ACCESS of HOST_WRITE_ONLY", hostWO, cl.MemHostNoAccess, align, 0},
		{"inherited flags", wo, 0, align, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.parent.CreateSubBuffer(tt.flags, 0, tt.size)
			if tt.want == 0 {
				require.NoError(t, err)
				require.NoError(t, b.Release())
				return
			}
			require.ErrorIs(t, err, tt.want)
			assert.Nil(t, b)
			assert.Equal(t, 1, strings.Count(err.Error(), "clCreateSubBuffer"), err.Error())
		})
	}
}

// A buffer, event or kernel of another context is refused by every
// transfer: Oclgrind accepts them and reads or writes the wrong memory.
func TestObjectsOfAnotherContextAreRefused(t *testing.T) {
	q := cltest.Queue(t)
	other, err := cl.NewCommandQueue(mustContext(t, q.Device()), q.Device(), 0)
	require.NoError(t, err)
	defer other.Release()
	mine := newBuffer(t, q, make([]int32, 16))
	theirs := newBuffer(t, other, make([]int32, 16))
	buf := make([]byte, 16)

	assertRefused := func(err error, what string) {
		t.Helper()
		assert.ErrorIs(t, err, cl.ErrInvalidContext, what)
	}
	assertRefused(q.WriteBuffer(theirs, 0, []byte{1, 2, 3, 4}), "write")
	assertRefused(q.ReadBuffer(theirs, 0, buf), "read")
	_, err = q.EnqueueFillBuffer(theirs, []byte{1}, 0, 16)
	assertRefused(err, "fill")
	_, err = q.EnqueueCopyBuffer(mine, theirs, 0, 0, 16)
	assertRefused(err, "copy to")
	_, err = q.EnqueueCopyBuffer(theirs, mine, 0, 0, 16)
	assertRefused(err, "copy from")
	assertRefused(q.Touch(theirs), "touch")
	ev, err := other.EnqueueMarker()
	require.NoError(t, err)
	defer ev.Release()
	_, err = q.EnqueueWriteBuffer(mine, false, 0, []byte{1, 2, 3, 4}, ev)
	assertRefused(err, "an event of another context in the wait list")
	assertRefused(cl.WaitAll(ev, mustMarker(t, q)), "WaitAll across contexts")

	got := make([]int32, 16)
	require.NoError(t, other.ReadBuffer(theirs, 0, cl.Bytes(got)))
	assert.Equal(t, make([]int32, 16), got, "nothing was written to the other context's buffer")
}

// mustContext returns a new context on dev, released at the end of the test.
func mustContext(t *testing.T, dev *cl.Device) *cl.Context {
	t.Helper()
	ctx, err := cl.CreateContext(dev)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ctx.Release()) })
	return ctx
}

// mustMarker returns a marker's event on q, released at the end of the test.
func mustMarker(t *testing.T, q *cl.CommandQueue) *cl.Event {
	t.Helper()
	ev, err := q.EnqueueMarker()
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ev.Release()) })
	return ev
}

// Fill patterns of 1 to 128 bytes (powers of two) work; other lengths and
// copies of 0 bytes are refused on every runtime.
func TestFillPatternLengthsAndEmptyCopies(t *testing.T) {
	q := cltest.Queue(t)
	const n = 512
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, n)
	require.NoError(t, err)
	defer b.Release()
	for size := 1; size <= 128; size *= 2 {
		pattern := make([]byte, size)
		for i := range pattern {
			pattern[i] = byte(size + i)
		}
		ev, err := q.EnqueueFillBuffer(b, pattern, 0, n)
		require.NoError(t, err, "a pattern of %d bytes", size)
		require.NoError(t, ev.Release())
		got := make([]byte, n)
		require.NoError(t, q.ReadBuffer(b, 0, got))
		assert.Equal(t, bytes.Repeat(pattern, n/size), got, "a pattern of %d bytes", size)
	}
	for _, size := range []int{0, 3, 6, 256} {
		fill := 256 / max(size, 1) * max(size, 1) // a multiple of the pattern, inside b
		_, err := q.EnqueueFillBuffer(b, make([]byte, size), 0, int64(fill))
		assert.ErrorIs(t, err, cl.ErrInvalidValue, "a pattern of %d bytes", size)
	}
	_, err = q.EnqueueFillBuffer(b, make([]byte, 4), 2, 8)
	assert.ErrorIs(t, err, cl.ErrInvalidValue, "an offset that is not a multiple of the pattern")
	_, err = q.EnqueueFillBuffer(b, make([]byte, 4), 0, 2*n)
	assert.ErrorIs(t, err, cl.ErrInvalidValue, "past the end")

	c, err := q.Context().CreateBuffer(cl.MemReadWrite, n)
	require.NoError(t, err)
	defer c.Release()
	_, err = q.EnqueueCopyBuffer(b, c, 0, 0, 0)
	require.ErrorIs(t, err, cl.ErrInvalidValue, "a copy of 0 bytes")
	assert.Equal(t, 1, strings.Count(err.Error(), "clEnqueueCopyBuffer"), err.Error())
}
