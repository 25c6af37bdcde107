package mempool_test

// Session s38b: data attacks on a pool over pinned host memory. Each
// test enqueues a non-blocking transfer from or to a pinned block's host
// bytes behind a slow kernel, closes the block at once (legal, says the
// package doc's "Pinned host memory"), and checks that the block's next
// owner, who touches the bytes from the host, does not race the transfer.

import (
	"fmt"
	"sync"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s38bPendingRead enqueues on q, behind a slow kernel, a non-blocking
// read of a device buffer of 1s into b's host bytes, and returns its
// event (waited for and released when the test ends).
func s38bPendingRead(t *testing.T, pinned *allocator.Pinned, b *mempool.PooledBuffer, q *cl.CommandQueue) *cl.Event {
	t.Helper()
	dev, _ := slowDevice(t, q, b.Size())
	ev, err := q.EnqueueReadBuffer(dev, false, 0, s38Host(pinned, b))
	return pending(t, q, ev, err)
}

// s38bOwnerWrites is the new owner of b: it writes v to b's host bytes,
// waits for ev (the old owner's transfer), and checks that its bytes are
// still its own.
func s38bOwnerWrites(t *testing.T, pinned *allocator.Pinned, b *mempool.PooledBuffer, v byte, ev *cl.Event) {
	t.Helper()
	h := s38Host(pinned, b)
	for i := range h {
		h[i] = v
	}
	require.NoError(t, ev.Wait())
	for i, got := range h {
		if got != v {
			t.Fatalf("byte %d of the new owner's block is %d, want %d: the old owner's read into the pinned bytes landed after the pool handed the block out", i, got, v)
		}
	}
}

// A device-to-host read (non-blocking, into the pinned bytes) on a queue
// RecordQueue named, then Close: the next owner (pool.Allocate, the
// allocator's queue) gets the block only once the read has landed.
func TestHostileS38bPinnedReadIntoBytesThenReuse(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, pinned, _, q := s38PinnedPool(t, pp)
		q2 := cltest.SecondQueue(t, q, 0)
		a := mustAlloc(t, p, 4096)
		ev := s38bPendingRead(t, pinned, a, q2)
		require.NoError(t, a.RecordQueue(q2))
		base, off := a.Base(), a.Offset()
		mustClose(t, a)
		b := mustAlloc(t, p, 4096)
		defer b.Close()
		require.True(t, b.Base() == base && b.Offset() == off, "the block given back serves the request")
		s38bOwnerWrites(t, pinned, b, 2, ev)
	})
}

// The block's own queue (On(q1)): a read into its bytes enqueued on q1,
// Close, and a request on another queue q2 takes it. No RecordQueue is
// needed: q1 is the block's queue.
func TestHostileS38bPinnedOnQueueReadThenOtherQueue(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, pinned, _, q := s38PinnedPool(t, pp)
		q1 := cltest.SecondQueue(t, q, 0)
		q2 := cltest.SecondQueue(t, q, 0)
		a, err := p.On(q1).Allocate(4096)
		require.NoError(t, err)
		ev := s38bPendingRead(t, pinned, a, q1)
		base, off := a.Base(), a.Offset()
		mustClose(t, a)
		b, err := p.On(q2).Allocate(4096)
		require.NoError(t, err)
		defer b.Close()
		require.True(t, b.Base() == base && b.Offset() == off, "the block given back serves the request")
		s38bOwnerWrites(t, pinned, b, 3, ev)
	})
}

// An out-of-order queue: the block's own queue, reused on it.
func TestHostileS38bPinnedOutOfOrderQueueReuse(t *testing.T) {
	p, pinned, _, q := s38PinnedPool(t, peerPolicies[0])
	qo := cltest.SecondQueue(t, q, cl.QueueOutOfOrder)
	on := p.On(qo)
	a, err := on.Allocate(4096)
	require.NoError(t, err)
	x := startPinnedTransfer(t, pinned, a, qo)
	base, off := a.Base(), a.Offset()
	mustClose(t, a)
	b, err := on.Allocate(4096)
	require.NoError(t, err)
	defer b.Close()
	require.True(t, b.Base() == base && b.Offset() == off, "the block given back serves the request")
	x.overwrite(t, pinned, b, "the block came back on its out-of-order queue before the transfer from it completed")
	x.check(t)
}

// The arena merges two blocks given back, one still read by a transfer
// of a third queue (RecordQueue), and serves a request of both: the
// merged block waits for that queue too.
func TestHostileS38bPinnedArenaMergedBlockWaits(t *testing.T) {
	p, pinned, _, q := s38PinnedPool(t, peerPolicies[1])
	q2 := cltest.SecondQueue(t, q, 0)
	q3 := cltest.SecondQueue(t, q, 0)
	on2 := p.On(q2)
	big, err := on2.Allocate(16 << 10)
	require.NoError(t, err)
	base := big.Base()
	mustClose(t, big)
	a, err := on2.Allocate(8 << 10)
	require.NoError(t, err)
	c, err := on2.Allocate(8 << 10)
	require.NoError(t, err)
	require.Same(t, base, a.Base())
	require.Same(t, base, c.Base())
	x := startPinnedTransfer(t, pinned, c, q3)
	require.NoError(t, c.RecordQueue(q3))
	mustClose(t, a, c)
	b, err := p.Allocate(16 << 10) // the allocator's queue: a third one
	require.NoError(t, err)
	defer b.Close()
	require.Same(t, base, b.Base(), "the merged block serves the request")
	x.overwrite(t, pinned, b, "the merged block came back before the transfer from its second half completed")
	x.check(t)
}

// Many goroutines, each on a queue of its own made and released per
// round (every other one out of order), half of them taking blocks
// through pool.Allocate and naming their queue with RecordQueue: each
// fills a pinned block with a value of its own, enqueues its
// non-blocking transfer to a device buffer behind a slow kernel, and
// closes the block at once; once the transfer is done, the device
// buffer holds that value.
func TestHostileS38bPinnedManyQueuesTransfers(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, pinned, _, q := s38PinnedPool(t, pp)
		const workers, rounds, size = 4, 8, 16 << 10
		iters := int32(cltest.Size(q, 10, 20000))
		kernels := make([]*cl.Kernel, workers)
		for w := range kernels {
			kernels[w] = cltest.SlowReadKernel(t, q)
		}
		in, err := q.Context().CreateBuffer(cl.MemReadWrite, size)
		require.NoError(t, err)
		defer in.Release()
		require.NoError(t, q.WriteBuffer(in, 0, cl.Bytes(allOnes(size/4))))
		var wg sync.WaitGroup
		errs := make(chan error, 4*workers*rounds)
		for w := range workers {
			wg.Go(func() {
				scratch, err := q.Context().CreateBuffer(cl.MemReadWrite, size)
				if err != nil {
					errs <- err
					return
				}
				defer scratch.Release()
				if err := kernels[w].SetArgs(in, scratch, iters); err != nil {
					errs <- err
					return
				}
				for r := range rounds {
					v := byte(1 + (w*rounds+r)%250)
					props := cl.QueueProperties(0)
					if w%2 == 1 {
						props = cl.QueueOutOfOrder
					}
					qq, err := cl.NewCommandQueue(q.Context(), q.Device(), props)
					if err != nil {
						errs <- err
						return
					}
					var b *mempool.PooledBuffer
					if w < workers/2 {
						b, err = p.On(qq).Allocate(size)
					} else if b, err = p.Allocate(size); err == nil {
						err = b.RecordQueue(qq)
					}
					if err != nil {
						errs <- err
						qq.Release()
						return
					}
					h := s38Host(pinned, b)
					for i := range h {
						h[i] = v
					}
					dev, err := q.Context().CreateBuffer(cl.MemReadWrite, size)
					if err != nil {
						errs <- err
						return
					}
					k, err := qq.EnqueueNDRangeKernel(kernels[w], nil, []int{size / 4}, nil)
					if err != nil {
						errs <- err
						return
					}
					ev, err := qq.EnqueueWriteBuffer(dev, false, 0, h, k)
					if err != nil {
						errs <- err
						return
					}
					_ = qq.Flush()
					if err := b.Close(); err != nil {
						errs <- err
					}
					if err := ev.Wait(); err != nil {
						errs <- err
					}
					got := make([]byte, size)
					if err := qq.ReadBuffer(dev, 0, got); err != nil {
						errs <- err
					}
					for i, g := range got {
						if g != v {
							errs <- fmt.Errorf("worker %d round %d: byte %d is %d, want %d: another owner wrote the pinned bytes under the transfer", w, r, i, g, v)
							break
						}
					}
					_ = k.Release()
					_ = ev.Release()
					_ = dev.Release()
					if err := qq.Release(); err != nil {
						errs <- err
					}
				}
			})
		}
		require.True(t, withinWork(t, "the workers", wg.Wait))
		close(errs)
		for err := range errs {
			assert.NoError(t, err)
		}
	})
}
