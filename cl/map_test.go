package cl_test

import (
	"sync"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The host writes a mapped region, the device sees it after the unmap; the
// device writes, the host sees it at the next map. Those are the points of
// coherence OpenCL gives: nothing here relies on more.
func TestMapWriteUnmapThenDeviceReads(t *testing.T) {
	q := cltest.Queue(t)
	for _, flags := range []cl.MemFlags{cl.MemReadWrite, cl.MemReadWrite | cl.MemAllocHostPtr} {
		t.Run(flags.String(), func(t *testing.T) {
			buf, err := q.Context().CreateBuffer(flags, 64)
			require.NoError(t, err)
			defer buf.Release()

			host, err := q.MapBuffer(buf, cl.MapWriteInvalidateRegion, 0, 64)
			require.NoError(t, err)
			require.Len(t, host, 64)
			for i := range host {
				host[i] = byte(i)
			}
			require.NoError(t, q.UnmapBuffer(buf, host))

			got := make([]byte, 64)
			require.NoError(t, q.ReadBuffer(buf, 0, got))
			for i, b := range got {
				require.Equal(t, byte(i), b, "byte %d", i)
			}

			ev, err := q.EnqueueFillBuffer(buf, []byte{7, 7, 7, 7}, 16, 16)
			require.NoError(t, err)
			require.NoError(t, ev.Wait())
			require.NoError(t, ev.Release())
			part, err := q.MapBuffer(buf, cl.MapRead, 12, 24)
			require.NoError(t, err)
			assert.Equal(t, []byte{12, 13, 14, 15, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 32, 33, 34, 35}, part)
			require.NoError(t, q.UnmapBuffer(buf, part))
		})
	}
}

// Two regions of one buffer may be mapped at once, and are unmapped each
// with its own slice; a sub-buffer maps its own bytes.
func TestMapSeveralRegionsAndSubBuffer(t *testing.T) {
	q := cltest.Queue(t)
	data := make([]byte, 256)
	for i := range data {
		data[i] = byte(i)
	}
	buf := newBuffer(t, q, data)
	a, err := q.MapBuffer(buf, cl.MapRead, 0, 8)
	require.NoError(t, err)
	b, err := q.MapBuffer(buf, cl.MapRead, 200, 8)
	require.NoError(t, err)
	assert.Equal(t, data[:8], a)
	assert.Equal(t, data[200:208], b)
	require.NoError(t, q.UnmapBuffer(buf, b))
	require.NoError(t, q.UnmapBuffer(buf, a))

	align := q.Device().MemBaseAddrAlign
	require.Positive(t, align)
	if align > 128 {
		t.Skipf("base-address alignment %d leaves no room for a sub-buffer of 256 bytes", align)
	}
	sub, err := buf.CreateSubBuffer(0, align, 16)
	require.NoError(t, err)
	defer sub.Release()
	s, err := q.MapBuffer(sub, cl.MapRead|cl.MapWrite, 0, 16)
	require.NoError(t, err)
	assert.Equal(t, data[align:align+16], s)
	require.NoError(t, q.UnmapBuffer(sub, s))
}

// Every misuse is refused before the C call, with the Status the
// specification gives and the call's name once.
func TestMapMisuse(t *testing.T) {
	q := cltest.Queue(t)
	buf := newBuffer(t, q, make([]byte, 32))

	for _, c := range []struct {
		name         string
		flags        cl.MapFlags
		offset, size int64
		want         cl.Status
	}{
		{"size 0", cl.MapRead, 0, 0, cl.ErrInvalidValue},
		{"negative size", cl.MapRead, 0, -1, cl.ErrInvalidValue},
		{"negative offset", cl.MapRead, -1, 4, cl.ErrInvalidValue},
		{"past the end", cl.MapRead, 30, 4, cl.ErrInvalidValue},
		{"offset past the end", cl.MapRead, 33, 1, cl.ErrInvalidValue},
		{"no flags", 0, 0, 4, cl.ErrInvalidValue},
		{"unknown flag", cl.MapRead | 1<<10, 0, 4, cl.ErrInvalidValue},
		{"invalidate with read", cl.MapWriteInvalidateRegion | cl.MapRead, 0, 4, cl.ErrInvalidValue},
	} {
		_, err := q.MapBuffer(buf, c.flags, c.offset, c.size)
		require.ErrorIs(t, err, c.want, c.name)
		assert.Regexp(t, `^clEnqueueMapBuffer: CL_[A-Z_]+ \(-\d+\): `, err.Error(), c.name)
	}

	for _, c := range []struct {
		mem   cl.MemFlags
		flags cl.MapFlags
	}{
		{cl.MemHostNoAccess, cl.MapRead},
		{cl.MemHostWriteOnly, cl.MapRead},
		{cl.MemHostReadOnly, cl.MapWrite},
		{cl.MemHostReadOnly, cl.MapWriteInvalidateRegion},
	} {
		b, err := q.Context().CreateBuffer(c.mem, 16)
		require.NoError(t, err)
		_, err = q.MapBuffer(b, c.flags, 0, 16)
		assert.ErrorIs(t, err, cl.ErrInvalidOperation, "%v mapped %v", c.mem, c.flags)
		require.NoError(t, b.Release())
	}
	ro, err := q.Context().CreateBuffer(cl.MemHostReadOnly, 16)
	require.NoError(t, err)
	defer ro.Release()
	host, err := q.MapBuffer(ro, cl.MapRead, 0, 16)
	require.NoError(t, err, "HOST_READ_ONLY allows a read map")
	require.NoError(t, q.UnmapBuffer(ro, host))

	_, err = q.MapBuffer(nil, cl.MapRead, 0, 4)
	assert.ErrorIs(t, err, cl.ErrInvalidMemObject)
	var nilQueue *cl.CommandQueue
	_, err = nilQueue.MapBuffer(buf, cl.MapRead, 0, 4)
	assert.ErrorIs(t, err, cl.ErrInvalidCommandQueue)

	other, err := cl.NewCommandQueue(mustContext(t, q.Device()), q.Device(), 0)
	require.NoError(t, err)
	defer other.Release()
	_, err = other.MapBuffer(buf, cl.MapRead, 0, 4)
	assert.ErrorIs(t, err, cl.ErrInvalidContext)

	// Unmaps of what is not a mapping.
	host, err = q.MapBuffer(buf, cl.MapRead, 0, 16)
	require.NoError(t, err)
	assert.ErrorIs(t, q.UnmapBuffer(buf, nil), cl.ErrInvalidValue, "empty")
	assert.ErrorIs(t, q.UnmapBuffer(buf, host[:8]), cl.ErrInvalidValue, "a reslice")
	assert.ErrorIs(t, q.UnmapBuffer(buf, make([]byte, 16)), cl.ErrInvalidValue, "Go memory")
	assert.ErrorIs(t, q.UnmapBuffer(ro, host), cl.ErrInvalidValue, "another buffer's mapping")
	assert.ErrorIs(t, q.UnmapBuffer(nil, host), cl.ErrInvalidMemObject)
	require.NoError(t, q.UnmapBuffer(buf, host))
	err = q.UnmapBuffer(buf, host)
	assert.ErrorIs(t, err, cl.ErrInvalidValue, "a second unmap")
	assert.Regexp(t, `^clEnqueueUnmapMemObject: CL_INVALID_VALUE \(-30\): `, err.Error())

	released, err := q.Context().CreateBuffer(cl.MemReadWrite, 16)
	require.NoError(t, err)
	require.NoError(t, released.Release())
	_, err = q.MapBuffer(released, cl.MapRead, 0, 4)
	assert.ErrorIs(t, err, cl.ErrInvalidMemObject)
	assert.ErrorIs(t, q.UnmapBuffer(released, host), cl.ErrInvalidMemObject)
}

// Goroutines map and unmap regions of one buffer at once: the record of
// mappings stays consistent (run with -race).
func TestMapConcurrent(t *testing.T) {
	q := cltest.Queue(t)
	const workers, rounds = 4, 20
	data := make([]byte, workers*16)
	for i := range data {
		data[i] = byte(i)
	}
	buf := newBuffer(t, q, data)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for range rounds {
				host, err := q.MapBuffer(buf, cl.MapRead, int64(w*16), 16)
				if err != nil {
					errs <- err
					return
				}
				if host[0] != byte(w*16) {
					errs <- assert.AnError
					return
				}
				if err := q.UnmapBuffer(buf, host); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
}

func TestMapFlagsString(t *testing.T) {
	assert.Equal(t, "READ|WRITE", (cl.MapRead | cl.MapWrite).String())
	assert.Equal(t, "WRITE_INVALIDATE_REGION", cl.MapWriteInvalidateRegion.String())
	assert.Equal(t, "0", cl.MapFlags(0).String())
	assert.Equal(t, "READ|0x100", (cl.MapRead | 1<<8).String())
}
