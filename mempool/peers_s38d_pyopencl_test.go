package mempool_test

// Session s38d ports of PyOpenCL's own memory-pool tests (test/test_wrapper.py:
// test_mempool, test_mempool_2, test_mempool_32bit_issues) and of PyOpenCL
// issues about its pool (#171: held_blocks after the out-of-memory path
// freed held blocks; freeing after the context is gone), against clpool's
// Pool of either policy. PyOpenCL's names map to clpool's: bin_number ~
// BinNumber, alloc_size ~ AllocSize, held_blocks ~ HeldBlocks, active_blocks
// ~ ActiveBlocks, managed_bytes ~ ManagedBytes, active_bytes ~ ActiveBytes,
// free_held ~ FreeHeld, stop_holding ~ StopHolding, allocate/__call__ ~
// Allocate.

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s38dBlocks indexes a snapshot's blocks by PooledBuffer ID, with the size
// of their segment.
func s38dBlocks(s mempool.Snapshot) (blocks map[uint64]mempool.BlockSnapshot, segOf map[uint64]int64, heldBlocks int, heldBytes, segBytes int64) {
	blocks = map[uint64]mempool.BlockSnapshot{}
	segOf = map[uint64]int64{}
	for _, seg := range s.Segments {
		segBytes += seg.Size
		for _, b := range seg.Blocks {
			if b.State == mempool.StateActive {
				blocks[b.ID] = b
				segOf[b.ID] = seg.Size
			} else {
				heldBlocks++
				heldBytes += b.Size
			}
		}
	}
	return
}

// PyOpenCL test_mempool: 100 allocations each of 2^6 and 2^7 bytes through
// a sliding window of 10 live blocks, then stop_holding. The port checks
// what the Python test only exercises: active_blocks follows the window,
// the pool reuses (exact bins: one device buffer per block ever live at
// once, per bin; the arena: one segment), managed = active blocks' sizes +
// held, and stop_holding frees everything, held and then each block closed
// after it.
func TestPeersS38dPyOpenCLMempoolWindow(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, _, count := peerPool(t, pp, nil)
		var window []*mempool.PooledBuffer
		var live int64
		for e := 6; e < 8; e++ {
			for i := range 100 {
				b := mustAlloc(t, p, 1<<e)
				window = append(window, b)
				live += 1 << e
				if len(window) > 10 {
					live -= window[0].Size()
					require.NoError(t, window[0].Close())
					window = window[1:]
				}
				s := p.Stats()
				require.Equal(t, len(window), s.ActiveBlocks, "e %d step %d: active_blocks", e, i)
				require.Equal(t, live, s.ActiveBytes, "e %d step %d: active_bytes", e, i)
				require.Equal(t, s.ManagedBytes, s.AllocatedBytes.All.Current+s.HeldBytes, "e %d step %d: managed = active blocks + held", e, i)
			}
		}
		allocs := count.Stats().Allocs
		if pp.arena {
			assert.LessOrEqual(t, allocs, int64(2), "an arena serves 22 small live blocks from a segment or two")
		} else {
			assert.Equal(t, int64(22), allocs, "exact bins: 11 blocks live at most, for each of two bins")
		}
		// stop_holding with the window still live (the Python test deletes
		// the window first; PyOpenCL's doc says later frees are immediate).
		require.NoError(t, p.StopHolding())
		assert.False(t, p.Stats().Holding)
		// Exact bins hold nothing after it; an arena keeps only the free
		// parts of segments still in use (FreeHeld's doc): no segment is
		// wholly free.
		noneHeld := func(when string) {
			if !pp.arena {
				assert.Zero(t, p.HeldBlocks(), "%s: exact bins hold nothing", when)
				return
			}
			for _, seg := range p.Snapshot().Segments {
				inUse := false
				for _, b := range seg.Blocks {
					inUse = inUse || b.State == mempool.StateActive
				}
				assert.True(t, inUse, "%s: segment %d is wholly free but kept", when, seg.ID)
			}
		}
		noneHeld("stop_holding")
		for i, b := range window {
			require.NoError(t, b.Close())
			noneHeld("close " + itoa(int64(i)) + " after stop_holding")
		}
		assert.Zero(t, p.HeldBlocks())
		assert.Zero(t, p.ManagedBytes(), "every block was freed at its close")
		assert.Zero(t, count.Stats().Live, "on the device too")
		// Allocate still works after stop_holding (documented), and frees at Close.
		b := mustAlloc(t, p, 1<<6)
		require.NoError(t, b.Close())
		assert.Zero(t, p.ManagedBytes())
		assert.Zero(t, count.Stats().Live)
	})
}

// PyOpenCL test_mempool_2, on a real pool rather than on the two static
// functions (bins_test.go covers those): for random sizes and several
// leading_bits_in_bin_id, each request's block is a device buffer of
// exactly alloc_size(bin_number(size)) bytes, and a later request for
// alloc_size(bin) itself (bin_number(asize) == bin_nr) is served by those
// blocks without a new device allocation.
func TestPeersS38dPyOpenCLBinBlocksOnDevice(t *testing.T) {
	for _, lb := range []int{0, 2, 4, 7} {
		t.Run(itoa(int64(lb)), func(t *testing.T) {
			t.Setenv(mempool.LimitEnv, "")
			q := cltest.Queue(t)
			p, count := pooltest.NewOver(t, q, nil, mempool.WithLeadingBits(lb))
			quiet(t, p) // no queue cache: every block given back is the bin's
			rng := rand.New(rand.NewPCG(uint64(lb), 38))
			sizes := []int64{1, 2, 3, 1 << 20}
			for range 30 {
				sizes = append(sizes, 1+rng.Int64N(1<<21)>>rng.IntN(22))
			}
			bs := make([]*mempool.PooledBuffer, len(sizes))
			for i, s := range sizes {
				bs[i] = mustAlloc(t, p, s)
				assert.Equal(t, s, bs[i].Size())
			}
			blocks, segOf, _, _, _ := s38dBlocks(p.Snapshot())
			for i, s := range sizes {
				want := mempool.AllocSize(mempool.BinNumber(s, lb), lb)
				blk, ok := blocks[bs[i].ID()]
				require.True(t, ok, "size %d: its block is in the snapshot", s)
				assert.Equal(t, want, segOf[bs[i].ID()], "size %d lb %d: the device buffer is alloc_size(bin_number(size))", s, lb)
				assert.Equal(t, want, blk.Size, "size %d lb %d: block size", s, lb)
				assert.Equal(t, s, blk.Requested, "size %d: requested", s)
			}
			mustClose(t, bs...)
			before := count.Stats().Allocs
			for i, s := range sizes {
				asize := mempool.AllocSize(mempool.BinNumber(s, lb), lb)
				bs[i] = mustAlloc(t, p, asize)
			}
			assert.Equal(t, before, count.Stats().Allocs, "alloc_size(bin) is served by the bin's held blocks")
			assert.Zero(t, p.HeldBlocks(), "every held block was taken again")
			mustClose(t, bs...)
			require.NoError(t, p.FreeHeld())
			assert.Zero(t, count.Stats().Live)
		})
	}
}

// PyOpenCL test_mempool_32bit_issues (pycuda#282: bin arithmetic wrapped
// for sizes near 2^31 and 2^32): requests of 2^i+offs for i in 30..34,
// offs in -5..4, on a pool limited to 16 MiB. None may reach the device
// or wrap to a small block: each fails with an out-of-memory error that
// names the request and a block size at least as large; the pool stays
// empty and serves small requests afterwards.
func TestPeersS38dPyOpenCL32BitSizes(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, count := peerPool(t, pp, nil, mempool.WithLimit(16<<20))
		maxAlloc := q.Device().MaxMemAllocSize
		n := int64(0)
		for i := 30; i <= 34; i++ {
			for offs := int64(-5); offs < 5; offs++ {
				size := int64(1)<<i + offs
				b, err := p.Allocate(size)
				n++
				require.Error(t, err, "Allocate(%d) under a 16 MiB limit", size)
				assert.Nil(t, b)
				require.ErrorIs(t, err, mempool.ErrOutOfMemory, "size %d", size)
				var oom *mempool.OutOfMemoryError
				require.True(t, errors.As(err, &oom), "size %d: %v", size, err)
				assert.Equal(t, size, oom.Requested, "size %d", size)
				if oom.AllocSize != 0 {
					assert.GreaterOrEqual(t, oom.AllocSize, size, "size %d: the block it tried is not wrapped small", size)
				}
				if size > maxAlloc {
					assert.ErrorIs(t, err, cl.ErrInvalidBufferSize, "size %d past MaxMemAllocSize %d", size, maxAlloc)
					assert.Equal(t, maxAlloc, oom.DeviceMaxAlloc)
				}
			}
		}
		s := p.Stats()
		assert.Equal(t, n, s.OOMs, "each refused request counts")
		assert.Zero(t, s.ActiveBlocks)
		assert.Zero(t, s.ManagedBytes)
		assert.Zero(t, count.Stats().Allocs, "nothing reached the device")
		b := mustAlloc(t, p, 1000)
		mustClose(t, b)
	})
}

// PyOpenCL issue #171: the out-of-memory path freed held blocks and
// miscounted held_blocks. Exact bins over a 4 MiB budget hold blocks of
// four bins; a 2.5 MiB request needs the largest freed (the ladder frees
// held blocks largest first, retrying after each). Afterwards held_blocks
// and held bytes are those the snapshot shows, the largest block is gone
// and the three smaller ones stay.
func TestPeersS38dPyOpenCLHeldBlocksAfterLadder(t *testing.T) {
	pp := peerPolicies[0]
	const budget = 4 << 20
	p, _, count := peerPool(t, pp, func(a allocator.Allocator) allocator.Allocator { return allocator.NewBudget(a, budget) })
	held := []int64{1 << 20, 512 << 10, 256 << 10, 128 << 10}
	bs := make([]*mempool.PooledBuffer, len(held))
	for i, s := range held {
		bs[i] = mustAlloc(t, p, s)
	}
	mustClose(t, bs...)
	require.Equal(t, len(held), p.HeldBlocks())
	big := int64(5 << 19) // 2.5 MiB
	need := mempool.AllocSize(mempool.BinNumber(big, 4), 4)
	var heldBytes int64
	for _, s := range held {
		heldBytes += mempool.AllocSize(mempool.BinNumber(s, 4), 4)
	}
	require.Greater(t, need+heldBytes, int64(budget), "the request needs held memory freed")
	first := mempool.AllocSize(mempool.BinNumber(held[0], 4), 4)
	require.LessOrEqual(t, need+heldBytes-first, int64(budget), "freeing the largest is enough")

	b := mustAlloc(t, p, big)
	s := p.Stats()
	_, _, snapHeld, snapHeldBytes, segBytes := s38dBlocks(p.Snapshot())
	assert.Equal(t, snapHeld, s.HeldBlocks, "held_blocks is what the snapshot holds")
	assert.Equal(t, snapHeldBytes, s.HeldBytes)
	assert.Equal(t, segBytes, s.ManagedBytes)
	assert.Equal(t, 3, s.HeldBlocks, "only the largest held block was freed")
	assert.Equal(t, heldBytes-first, s.HeldBytes, "the three smaller ones stay")
	assert.Equal(t, int64(1), s.DeviceFrees)
	assert.Positive(t, s.OOMRetries)
	assert.Equal(t, count.Stats().Live, s.ActiveBlocks+s.HeldBlocks)
	pooltest.CheckStats(t, s)
	mustClose(t, b)
}

// Freeing after the context is gone (PyOpenCL's pools outlive contexts
// that Python collects first): a pool over an Immediate allocator of a
// context and queue the program releases while blocks are held and
// active. cl's Context.Release says objects made in it keep their own
// references; so the block closed afterwards, FreeHeld and Close still
// free every buffer exactly once.
func TestPeersS38dPyOpenCLFreeAfterContextRelease(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		t.Setenv(mempool.LimitEnv, "")
		q0 := cltest.Queue(t)
		ctx, err := cl.CreateContext(q0.Device())
		require.NoError(t, err)
		q, err := cl.NewCommandQueue(ctx, q0.Device(), 0)
		require.NoError(t, err)
		imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
		require.NoError(t, err)
		count := allocator.NewCounting(imm)
		p, err := mempool.New(count, pp.opts...)
		require.NoError(t, err)
		held := mustAllocN(t, p, 3, 64<<10)
		active := mustAllocN(t, p, 2, 200<<10)
		mustClose(t, held...)
		require.NoError(t, q.Finish())
		require.NoError(t, q.Release())
		require.NoError(t, ctx.Release())
		mustClose(t, active[0])
		require.NoError(t, p.FreeHeld())
		mustClose(t, active[1])
		require.NoError(t, p.Close())
		cs := count.Stats()
		assert.Zero(t, cs.Live, "every buffer freed")
		assert.Equal(t, cs.Allocs, cs.Frees)
	})
}

// PyOpenCL's older test_mempool ran the same window over CLAllocator, the
// plain allocator now called DeferredAllocator: a pool over
// allocator.Deferred (no queue; its requests have a cache of their own)
// reuses the same way, counts the same, and stop_holding plus Close free
// every buffer exactly once.
func TestPeersS38dPyOpenCLMempoolDeferred(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		t.Setenv(mempool.LimitEnv, "")
		q := cltest.Queue(t)
		d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
		require.NoError(t, err)
		count := pooltest.Counting(t, d)
		p, err := mempool.New(count, pp.opts...)
		require.NoError(t, err)
		var window []*mempool.PooledBuffer
		for e := 6; e < 8; e++ {
			for range 100 {
				window = append(window, mustAlloc(t, p, 1<<e))
				if len(window) > 10 {
					require.NoError(t, window[0].Close())
					window = window[1:]
				}
				require.Equal(t, len(window), p.ActiveBlocks())
			}
		}
		if pp.arena {
			assert.LessOrEqual(t, count.Stats().Allocs, int64(2))
		} else {
			assert.Equal(t, int64(22), count.Stats().Allocs)
		}
		mustClose(t, window...)
		s := p.Stats()
		assert.Equal(t, s.ManagedBytes, s.HeldBytes, "all held once the window is closed")
		require.NoError(t, p.StopHolding())
		assert.Zero(t, p.ManagedBytes())
		assert.Zero(t, count.Stats().Live)
		require.NoError(t, p.Close())
	})
}
