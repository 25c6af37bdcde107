package mempool_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
)

// pinnedTransfer is a transfer from a pinned block's host bytes (all
// ones) to a device buffer, enqueued on q behind a slow kernel, so that
// it is still pending when the test goes on.
type pinnedTransfer struct {
	ev  *cl.Event
	dev *cl.Buffer
	q   *cl.CommandQueue
}

// slowDevice returns a device buffer of size bytes of ones on q's
// context, and enqueues on q a slow kernel (its event: slow), so that the
// next command enqueued there is still pending when the test goes on.
// Its buffers and event are released when the test ends.
func slowDevice(t *testing.T, q *cl.CommandQueue, size int64) (dev *cl.Buffer, slow *cl.Event) {
	t.Helper()
	n := int(size / 4)
	var bufs [3]*cl.Buffer // the kernel's input, its output, dev
	for i := range bufs {
		b, err := q.Context().CreateBuffer(cl.MemReadWrite, size)
		require.NoError(t, err)
		t.Cleanup(func() { b.Release() })
		bufs[i] = b
	}
	require.NoError(t, q.WriteBuffer(bufs[0], 0, cl.Bytes(allOnes(n))))
	require.NoError(t, q.WriteBuffer(bufs[2], 0, cl.Bytes(allOnes(n))))
	k := cltest.SlowReadKernel(t, q)
	require.NoError(t, k.SetArgs(bufs[0], bufs[1], int32(cltest.Size(q, 100, 2000000))))
	slow, err := q.EnqueueNDRangeKernel(k, nil, []int{n}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { slow.Wait(); slow.Release() })
	return bufs[2], slow
}

// pending flushes q and returns ev, waited for and released when the test
// ends.
func pending(t *testing.T, q *cl.CommandQueue, ev *cl.Event, err error) *cl.Event {
	t.Helper()
	require.NoError(t, err)
	require.NoError(t, q.Flush())
	t.Cleanup(func() { ev.Wait(); ev.Release() })
	return ev
}

// startPinnedTransfer fills b's host bytes with ones and enqueues their
// transfer on q behind a slow kernel.
func startPinnedTransfer(t *testing.T, pinned *allocator.Pinned, b *mempool.PooledBuffer, q *cl.CommandQueue) *pinnedTransfer {
	t.Helper()
	h := s38Host(pinned, b)
	for i := range h {
		h[i] = 1
	}
	dev, _ := slowDevice(t, q, b.Size())
	ev, err := q.EnqueueWriteBuffer(dev, false, 0, h)
	return &pinnedTransfer{ev: pending(t, q, ev, err), dev: dev, q: q}
}

// closeInTransfer starts a transfer from a's bytes on q
// (startPinnedTransfer), names q with RecordQueue and closes a, the
// transfer still pending.
func closeInTransfer(t *testing.T, pinned *allocator.Pinned, a *mempool.PooledBuffer, q *cl.CommandQueue) *pinnedTransfer {
	t.Helper()
	x := startPinnedTransfer(t, pinned, a, q)
	require.NoError(t, a.RecordQueue(q))
	mustClose(t, a)
	return x
}

// done reports whether the transfer has completed.
func (x *pinnedTransfer) done(t *testing.T) bool {
	st, err := x.ev.Status()
	require.NoError(t, err)
	return st == cl.Complete
}

// overwrite is the new owner of b, whose bytes the transfer read: it
// asserts (msg) that the transfer has completed, then writes 2s over
// them, which check finds if the transfer had yet to read them.
func (x *pinnedTransfer) overwrite(t *testing.T, pinned *allocator.Pinned, b *mempool.PooledBuffer, msg string) {
	t.Helper()
	assert.True(t, x.done(t), msg)
	for i, h := 0, s38Host(pinned, b); i < len(h); i++ {
		h[i] = 2
	}
}

// check waits for the transfer and asserts it delivered the ones.
func (x *pinnedTransfer) check(t *testing.T) {
	t.Helper()
	require.NoError(t, x.ev.Wait())
	got := make([]byte, x.dev.Size())
	require.NoError(t, x.q.ReadBuffer(x.dev, 0, got))
	for i, v := range got {
		if v != 1 {
			t.Fatalf("byte %d of the transfer is %d, want 1: its pinned bytes were reused or freed under it", i, v)
		}
	}
}

// A pinned block closed while a transfer RecordQueue named still reads
// its host bytes is handed to the next request (on the allocator's own
// queue) only once the transfer has completed: that request's owner
// writes the bytes from the host, where no queue orders it.
func TestPinnedPoolReuseWaitsForRecordedQueues(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, pinned, _, q := s38PinnedPool(t, pp)
		q2 := cltest.SecondQueue(t, q, 0)
		a := mustAlloc(t, p, 4096)
		base, off := a.Base(), a.Offset()
		x := closeInTransfer(t, pinned, a, q2)
		b := mustAlloc(t, p, 4096)
		if b.Base() == base && b.Offset() == off {
			x.overwrite(t, pinned, b, "the block came back before the transfer from it completed")
		}
		x.check(t)
		mustClose(t, b)
	})
}

// FreeHeld frees a pinned segment only once the transfers of the queues
// that may still use it have completed: unmapping it under a transfer of
// another queue than the allocator's would free the bytes it reads.
func TestPinnedPoolFreesAfterTransfers(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, pinned, _, q := s38PinnedPool(t, pp)
		q2 := cltest.SecondQueue(t, q, 0)
		a := mustAlloc(t, p, 4096)
		x := closeInTransfer(t, pinned, a, q2)
		require.NoError(t, p.FreeHeld())
		assert.Zero(t, pinned.Live(), "FreeHeld frees the pinned buffer")
		assert.True(t, x.done(t), "the pinned buffer was freed before the transfer from it completed")
		x.check(t)
	})
}

// The sanitizer's fills and checks are commands on the pool's buffers,
// undefined on a pinned one (it stays mapped): WithSanitizer over pinned
// memory is refused, and CLPOOL_SANITIZE leaves a pinned pool alone.
func TestPinnedPoolHasNoSanitizer(t *testing.T) {
	q := cltest.Queue(t)
	pinned, err := allocator.NewPinned(q)
	require.NoError(t, err)
	_, err = mempool.New(allocator.NewCounting(pinned), mempool.WithSanitizer())
	require.ErrorContains(t, err, "pinned")
	assert.Zero(t, pinned.Live())

	t.Setenv(mempool.SanitizeEnv, "1")
	p, err := mempool.New(pinned)
	require.NoError(t, err)
	b, err := p.Allocate(100)
	require.NoError(t, err)
	assert.Less(t, len(pinned.Host(b.Base())), 100+mempool.SanitizerGuard, "no guard bytes past the block")
	require.NoError(t, b.Close())
	require.NoError(t, p.Close())
	assert.Empty(t, p.Findings())
	assert.Zero(t, pinned.Live())
}
