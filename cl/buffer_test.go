package cl_test

import (
	"bytes"
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
