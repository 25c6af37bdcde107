package mempool_test

// Session s38 ports of CuPy's tests/cupy_tests/cuda_tests/test_pinned_memory.py
// (PinnedMemoryPool: alloc, free and reuse, used/free bytes,
// free_all_blocks) and torch's test_caching_pinned_memory, against a pool
// over allocator.Pinned, which the README calls CuPy's PinnedMemoryPool.
// A block's host bytes are pinned.Host(pb.Base())[pb.Offset():][:pb.Size()].

import (
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s38PinnedPool is a pool of pp's policy over a Pinned of q's context,
// counting its buffers; the pool is closed, and every buffer checked
// freed once, when the test ends.
func s38PinnedPool(t *testing.T, pp peerPolicy) (*mempool.Pool, *allocator.Pinned, *allocator.Counting, *cl.CommandQueue) {
	t.Helper()
	t.Setenv(mempool.LimitEnv, "")
	q := cltest.Queue(t)
	pinned, err := allocator.NewPinned(q)
	require.NoError(t, err)
	count := pooltest.Counting(t, pinned)
	p, err := mempool.New(count, pp.opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, p.Close())
		assert.Zero(t, pinned.Live(), "every pinned buffer unmapped and freed")
	})
	return p, pinned, count, q
}

func s38Host(pinned *allocator.Pinned, b *mempool.PooledBuffer) []byte {
	h := pinned.Host(b.Base())
	if h == nil {
		return nil
	}
	return h[b.Offset() : b.Offset()+b.Size()]
}

// CuPy TestPinnedMemoryPool (alloc, free, used_bytes, free_bytes,
// n_free_blocks, free_all_blocks): live blocks' host bytes are their own
// (writing one leaves the others alone), a block given back serves the
// next request of its size, and free_all_blocks frees the pinned buffers.
func TestPeersS38CupyPinnedMemoryPool(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, pinned, count, _ := s38PinnedPool(t, pp)
		sizes := []int64{1, 100, 4096, 5000, 1 << 20}
		var bs []*mempool.PooledBuffer
		for i, s := range sizes {
			b := mustAlloc(t, p, s)
			h := s38Host(pinned, b)
			require.Len(t, h, int(s), "block %d: host bytes of its size", i)
			for j := range h {
				h[j] = byte(i + 1)
			}
			bs = append(bs, b)
		}
		for i, b := range bs {
			for j, v := range s38Host(pinned, b) {
				if v != byte(i+1) {
					t.Fatalf("block %d byte %d is %d: another block's host bytes overlap it", i, j, v)
				}
			}
		}
		var want int64
		for _, s := range sizes {
			want += s
		}
		assert.Equal(t, want, p.ActiveBytes(), "used_bytes")
		base, off := bs[2].Base(), bs[2].Offset()
		mustClose(t, bs[2])
		allocs := count.Stats().Allocs
		again := mustAlloc(t, p, 4096)
		assert.True(t, again.Base() == base && again.Offset() == off, "the block given back serves the request")
		assert.Equal(t, allocs, count.Stats().Allocs)
		bs[2] = again
		mustClose(t, bs...)
		assert.Zero(t, p.ActiveBytes())
		assert.NotZero(t, p.HeldBlocks(), "n_free_blocks")
		require.NoError(t, p.FreeHeld())
		assert.Zero(t, p.HeldBlocks())
		assert.Zero(t, pinned.Live(), "free_all_blocks unmaps and frees the pinned buffers")
	})
}

// torch test_caching_pinned_memory: a pinned block given back right after
// a non-blocking copy from it is enqueued (behind a slow kernel) is not
// handed to a new request whose owner then writes its host bytes before
// the copy has read them: the copy must deliver the old bytes.
//
// mempool's package doc: "Close a PooledBuffer ... right after enqueueing
// the last command that uses it; the pool never hands its memory to any
// queue before the commands enqueued before Close may have finished with
// it." A pinned block's new owner touches it from the host, not a queue.
func TestPeersS38TorchCachingPinnedMemory(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, pinned, _, q := s38PinnedPool(t, pp)
		const n = 256
		k := cltest.SlowReadKernel(t, q)
		iters := cltest.Size(q, 100, 2000000)
		in, err := q.Context().CreateBuffer(cl.MemReadWrite, 4*n)
		require.NoError(t, err)
		defer in.Release()
		scratch, err := q.Context().CreateBuffer(cl.MemReadWrite, 4*n)
		require.NoError(t, err)
		defer scratch.Release()
		dev, err := q.Context().CreateBuffer(cl.MemReadWrite, 4*n)
		require.NoError(t, err)
		defer dev.Release()
		require.NoError(t, q.WriteBuffer(in, 0, cl.Bytes(allOnes(n))))

		a := mustAlloc(t, p, 4*n)
		h := s38Host(pinned, a)
		for i := range h {
			h[i] = 1
		}
		// Delay the queue, then the non-blocking copy from the pinned bytes.
		require.NoError(t, k.SetArgs(in, scratch, int32(iters)))
		require.NoError(t, q.EnqueueKernel(k, []int{n}, nil))
		ev, err := q.EnqueueWriteBuffer(dev, false, 0, h)
		require.NoError(t, err)
		require.NoError(t, q.Flush())
		aBase, aOff := a.Base(), a.Offset()
		require.NoError(t, a.Close())

		b := mustAlloc(t, p, 4*n)
		defer func() {
			if !b.Closed() {
				b.Close()
			}
		}()
		reused := b.Base() == aBase && b.Offset() == aOff
		if reused {
			copyDone := false
			if st, err := ev.Status(); err == nil && st == cl.Complete {
				copyDone = true
			}
			if !copyDone {
				// The new owner writes its host bytes now.
				hb := s38Host(pinned, b)
				for i := range hb {
					hb[i] = 2
				}
			}
		}
		require.NoError(t, ev.Wait())
		require.NoError(t, ev.Release())
		got := make([]byte, 4*n)
		require.NoError(t, q.ReadBuffer(dev, 0, got))
		require.NoError(t, b.Close())
		for i, v := range got {
			if v != 1 {
				t.Errorf("byte %d of the copy is %d, want 1: the pinned block was handed out (reused=%v) while the copy from it was pending", i, v, reused)
				break
			}
		}
	})
}
