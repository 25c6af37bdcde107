package allocator_test

import (
	"sync"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newPinned(t *testing.T, q *cl.CommandQueue) *allocator.Pinned {
	t.Helper()
	p, err := allocator.NewPinned(q)
	require.NoError(t, err)
	t.Cleanup(func() { assert.Zero(t, p.Live(), "pinned buffers left") })
	return p
}

// deviceBuffer returns a plain read-write buffer of size bytes, released at
// the end of the test.
func deviceBuffer(t *testing.T, q *cl.CommandQueue, size int64) *cl.Buffer {
	t.Helper()
	buf, err := q.Context().CreateBuffer(cl.MemReadWrite, size)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, buf.Release()) })
	return buf
}

// Pinned memory stages transfers both ways: bytes written through Host go
// to a device buffer with WriteBuffer, and a device buffer's bytes come
// back into Host with ReadBuffer.
func TestPinnedStagesTransfers(t *testing.T) {
	q := cltest.Queue(t)
	p := newPinned(t, q)
	assert.Same(t, q, p.Queue())
	assert.Same(t, q.Context(), p.Context())
	assert.Equal(t, cl.MemAllocHostPtr|cl.MemReadWrite, p.Flags())
	assert.Same(t, q.Device(), allocator.DeviceOf(p))

	const n = 4096
	buf, err := p.Allocate(n)
	require.NoError(t, err)
	require.NotNil(t, buf)
	assert.Equal(t, cl.MemAllocHostPtr|cl.MemReadWrite, buf.Flags())
	host := p.Host(buf)
	require.Len(t, host, n)
	for i := range host {
		host[i] = byte(i * 7)
	}

	dev := deviceBuffer(t, q, n)
	require.NoError(t, q.WriteBuffer(dev, 0, host))
	got := make([]byte, n)
	require.NoError(t, q.ReadBuffer(dev, 0, got))
	assert.Equal(t, host, got, "the device has what the host wrote into pinned memory")

	ev, err := q.EnqueueFillBuffer(dev, []byte{0xAB}, 0, n)
	require.NoError(t, err)
	require.NoError(t, ev.Release())
	// A non-blocking read into pinned memory: the bytes are the host's
	// again once its event has completed.
	rev, err := q.EnqueueReadBuffer(dev, false, 0, host)
	require.NoError(t, err)
	require.NoError(t, rev.Wait())
	require.NoError(t, rev.Release())
	for i, b := range host {
		require.Equal(t, byte(0xAB), b, "byte %d", i)
	}

	require.NoError(t, p.Free(buf))
	assert.True(t, buf.Released())
	assert.Nil(t, p.Host(buf), "no host bytes after Free")
}

// The rule the specification gives for the pinned buffer itself: device
// and host views agree at map and unmap, so a command may use it only
// unmapped. Unmapping what Allocate mapped (here by hand, through cl)
// shows what the host wrote to a ReadBuffer of the buffer itself.
func TestPinnedBufferItselfAfterUnmap(t *testing.T) {
	q := cltest.Queue(t)
	p := newPinned(t, q)
	buf, err := p.Allocate(64)
	require.NoError(t, err)
	host := p.Host(buf)
	copy(host, "written through the mapped host bytes of a pinned buf")
	want := string(host)
	require.NoError(t, q.UnmapBuffer(buf, host))
	got := make([]byte, 64)
	require.NoError(t, q.ReadBuffer(buf, 0, got))
	assert.Equal(t, want, string(got))
	// Free's own unmap now fails (nothing is mapped), and it still
	// releases the buffer.
	err = p.Free(buf)
	assert.ErrorIs(t, err, cl.ErrInvalidValue)
	assert.True(t, buf.Released())
}

func TestPinnedMisuse(t *testing.T) {
	q := cltest.Queue(t)
	p := newPinned(t, q)

	_, err := allocator.NewPinned(nil)
	assert.ErrorIs(t, err, cl.ErrInvalidCommandQueue)

	buf, err := p.Allocate(0)
	assert.NoError(t, err)
	assert.Nil(t, buf)
	assert.NoError(t, p.Free(nil))
	_, err = p.Allocate(-1)
	assert.ErrorIs(t, err, cl.ErrInvalidBufferSize)
	_, err = p.Allocate(q.Device().MaxMemAllocSize + 1)
	assert.ErrorIs(t, err, cl.ErrInvalidBufferSize)

	buf, err = p.Allocate(16)
	require.NoError(t, err)
	require.NoError(t, p.Free(buf))
	assert.ErrorIs(t, p.Free(buf), allocator.ErrFreed, "double free")

	foreign := deviceBuffer(t, q, 16)
	assert.Nil(t, p.Host(foreign))
	assert.ErrorIs(t, p.Free(foreign), allocator.ErrFreed, "a buffer of another allocator")
	assert.False(t, foreign.Released(), "left alone")
}

// The package's Free finds the Pinned that allocated a buffer, so that an
// array's Close unmaps it too.
func TestPinnedPackageFree(t *testing.T) {
	q := cltest.Queue(t)
	p := newPinned(t, q)
	buf, err := p.Allocate(32)
	require.NoError(t, err)
	require.NoError(t, allocator.Free(buf))
	assert.Nil(t, p.Host(buf))
	assert.ErrorIs(t, allocator.Free(buf), allocator.ErrFreed)
}

// A pool over a Counting over a Pinned is a pinned memory pool: blocks have
// disjoint host bytes at Offset in Base, they stage transfers, and Close
// frees every buffer it allocated, once.
func TestPinnedPool(t *testing.T) {
	q := cltest.Queue(t)
	p := newPinned(t, q)
	counting := allocator.NewCounting(p)
	for _, arena := range []bool{false, true} {
		name := "bins"
		var opts []mempool.Option
		if arena {
			name, opts = "arena", []mempool.Option{mempool.WithArena()}
		}
		t.Run(name, func(t *testing.T) {
			pool, err := mempool.New(counting, opts...)
			require.NoError(t, err)
			sizes := []int64{100, 4096, 1000, 1 << 16, 100}
			var blocks []*mempool.PooledBuffer
			for i, size := range sizes {
				pb, err := pool.Allocate(size)
				require.NoError(t, err)
				host := p.Host(pb.Base())[pb.Offset() : pb.Offset()+pb.Size()]
				require.Len(t, host, int(size))
				for j := range host {
					host[j] = byte(i + 1)
				}
				blocks = append(blocks, pb)
			}
			dev := deviceBuffer(t, q, 1<<16)
			for i, pb := range blocks {
				host := p.Host(pb.Base())[pb.Offset() : pb.Offset()+pb.Size()]
				for j, b := range host {
					require.Equal(t, byte(i+1), b, "block %d byte %d: blocks overlap", i, j)
				}
				require.NoError(t, q.WriteBuffer(dev, 0, host))
				got := make([]byte, len(host))
				require.NoError(t, q.ReadBuffer(dev, 0, got))
				require.Equal(t, host, got)
			}
			for _, pb := range blocks {
				require.NoError(t, pb.Close())
			}
			require.NoError(t, pool.Close())
			st := counting.Stats()
			assert.Zero(t, st.Live)
			assert.Zero(t, st.BadFrees)
			assert.Positive(t, st.Allocs)
			assert.Equal(t, st.Allocs, st.Frees)
			assert.Zero(t, p.Live())
		})
	}
}

// Goroutines allocate, write, stage and free at once (run with -race).
func TestPinnedConcurrent(t *testing.T) {
	q := cltest.Queue(t)
	p := newPinned(t, q)
	const workers, rounds = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds)
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				buf, err := p.Allocate(int64(256 * (w + 1)))
				if err != nil {
					errs <- err
					return
				}
				host := p.Host(buf)
				for i := range host {
					host[i] = byte(w + r)
				}
				if err := p.Free(buf); err != nil {
					errs <- err
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

// HostOf finds a Pinned's Host through the wrappers and in an allocator
// that embeds a Pinned, and nothing in other allocators.
func TestHostOf(t *testing.T) {
	q := cltest.Queue(t)
	pinned, err := allocator.NewPinned(q)
	require.NoError(t, err)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	buf, err := pinned.Allocate(64)
	require.NoError(t, err)
	defer pinned.Free(buf)
	for _, a := range []allocator.Allocator{pinned, allocator.NewBudget(allocator.NewCounting(pinned), 1<<20), struct{ *allocator.Pinned }{pinned}} {
		host := allocator.HostOf(a)
		require.NotNil(t, host, "%T", a)
		assert.Len(t, host(buf), 64, "%T: the Pinned's own Host", a)
	}
	assert.Nil(t, allocator.HostOf(imm))
	assert.Nil(t, allocator.HostOf(allocator.NewCounting(imm)))
	assert.Nil(t, allocator.HostOf(nil))
	assert.Nil(t, allocator.HostOf((*allocator.Pinned)(nil)))
}
