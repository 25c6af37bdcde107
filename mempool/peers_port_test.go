package mempool_test

// Ports of the intent of two peers' test suites, run against both of
// clpool's policies (exact bins, and WithArena):
//
//   - CuPy's tests/cupy_tests/cuda_tests/test_memory.py (TestSingleDeviceMemoryPool,
//     TestMemoryPool): used_bytes, free_bytes, total_bytes, n_free_blocks,
//     free_all_blocks, set_limit/get_limit, malloc(0), rounding, split and
//     merge of chunks, out of memory under a limit.
//   - torch's test/test_cuda.py caching-allocator tests: memory_stats keys
//     and values, reset_peak_memory_stats, empty_cache, max_split_size_mb
//     (oversize), num_alloc_retries, memory_snapshot consistency,
//     out-of-memory retry, set_per_process_memory_fraction.
//
// The mapping: used_bytes ~ ActiveBytes (requested) or AllocatedBytes
// (block sizes), free_bytes ~ HeldBytes, total_bytes ~ ManagedBytes,
// n_free_blocks ~ HeldBlocks, free_all_blocks / empty_cache ~ FreeHeld,
// memory_snapshot ~ Snapshot, max_split_size_mb ~ WithMaxSplitSize.
// Where clpool documents a deliberate difference (Allocate(0) is a real
// block, exact bins never split, arena segments are sized to the pool
// rather than to the request, queue caches keep small blocks unmerged),
// the port checks clpool's documented behaviour instead.

import (
	"fmt"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// peerPolicy is one of clpool's two policies.
type peerPolicy struct {
	name  string
	arena bool
	opts  []mempool.Option
}

var peerPolicies = []peerPolicy{
	{name: "bins"},
	{name: "arena", arena: true, opts: []mempool.Option{mempool.WithArena()}},
}

// forPeerPolicies runs fn as a subtest for each policy.
func forPeerPolicies(t *testing.T, fn func(t *testing.T, pp peerPolicy)) {
	for _, pp := range peerPolicies {
		t.Run(pp.name, func(t *testing.T) { fn(t, pp) })
	}
}

// peerPool makes a pool of pp's policy (plus extra options) over a counting
// Immediate allocator, optionally wrapped (a Budget, say).
func peerPool(t *testing.T, pp peerPolicy, wrap func(allocator.Allocator) allocator.Allocator, extra ...mempool.Option) (*mempool.Pool, *cl.CommandQueue, *allocator.Counting) {
	t.Helper()
	t.Setenv(mempool.LimitEnv, "") // a limit from the environment would change every figure
	q := cltest.Queue(t)
	opts := append(append([]mempool.Option(nil), pp.opts...), extra...)
	p, count := pooltest.NewOver(t, q, wrap, opts...)
	return p, q, count
}

// peerPlainPool is peerPool without pooltest's check that the pool's
// device counts equal the allocator's: for tests that reset the pool's
// totals (ResetAccumulated), or that take device memory past the pool
// (from a shared Budget). It still checks, at the end, that every buffer
// was freed exactly once.
func peerPlainPool(t *testing.T, pp peerPolicy, wrap func(allocator.Allocator) allocator.Allocator, extra ...mempool.Option) (*mempool.Pool, *cl.CommandQueue, *allocator.Counting) {
	t.Helper()
	t.Setenv(mempool.LimitEnv, "")
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	count := pooltest.Counting(t, imm) // checks every buffer freed once, after the pool's Close below
	var a allocator.Allocator = count
	if wrap != nil {
		a = wrap(count)
	}
	p, err := mempool.New(a, append(append([]mempool.Option(nil), pp.opts...), extra...)...)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.Zero(t, p.ActiveBlocks(), "a test left blocks open")
		assert.NoError(t, p.Close())
	})
	return p, q, count
}

// peerUnit is CuPy's allocation unit for the pool: 512 bytes, or the
// arena's alignment where the device needs more, so that multiples of it
// are blocks of exactly that size in either policy.
func peerUnit(q *cl.CommandQueue) int64 {
	u := int64(512)
	for u < q.Context().MemBaseAddrAlign() {
		u *= 2
	}
	return u
}

// quiet turns the queue caches off (a registered hook does, by the
// package doc), so that a block given back reaches the arena at once, as
// CuPy's chunk does.
func quiet(t *testing.T, p *mempool.Pool) {
	remove := p.AddHook(mempool.HookFunc(func(mempool.Event) {}))
	t.Cleanup(remove)
}

// allocatorOf is what serves requests: a Pool, or one of its queues' (On).
type allocatorOf interface {
	Allocate(size int64) (*mempool.PooledBuffer, error)
}

func mustAlloc(t *testing.T, a allocatorOf, size int64) *mempool.PooledBuffer {
	t.Helper()
	b, err := a.Allocate(size)
	require.NoError(t, err, "Allocate(%d)", size)
	return b
}

// mustAllocN allocates n blocks of size from a, all live.
func mustAllocN(t *testing.T, a allocatorOf, n int, size int64) []*mempool.PooledBuffer {
	t.Helper()
	bs := make([]*mempool.PooledBuffer, n)
	for i := range bs {
		bs[i] = mustAlloc(t, a, size)
	}
	return bs
}

func mustClose(t *testing.T, bs ...*mempool.PooledBuffer) {
	t.Helper()
	for _, b := range bs {
		require.NoError(t, b.Close())
	}
}

// sameBlock reports whether a and b are the same device memory.
func sameBlock(a, b *mempool.PooledBuffer) bool {
	return a.Base() == b.Base() && a.Offset() == b.Offset()
}

// ---------------------------------------------------------------------------
// CuPy: TestMemoryPool (a fresh pool)

// CuPy test_n_free_blocks_without_malloc, test_used_bytes, test_free_bytes,
// test_total_bytes, test_free_all_blocks_without_malloc, test_get_limit:
// a new pool is empty, unlimited, and free_all_blocks on it does nothing.
func TestPeersCupyFreshPoolIsEmpty(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, _, count := peerPool(t, pp, nil)
		s := p.Stats()
		assert.Zero(t, s.HeldBlocks, "n_free_blocks")
		assert.Zero(t, s.ActiveBytes, "used_bytes")
		assert.Zero(t, s.HeldBytes, "free_bytes")
		assert.Zero(t, s.ManagedBytes, "total_bytes")
		assert.Zero(t, p.Limit(), "get_limit: no limit by default")
		require.NoError(t, p.FreeHeld())
		assert.Zero(t, p.HeldBlocks())
		assert.Zero(t, count.Stats().Allocs, "nothing reached the device")
	})
}

// CuPy TestMemoryPool.test_free_all_blocks: a block given back is a free
// block; free_all_blocks frees it.
func TestPeersCupyFreeAllBlocksCountsFreeBlocks(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, _, count := peerPool(t, pp, nil)
		b := mustAlloc(t, p, 1)
		if !pp.arena {
			// CuPy's chunk is exactly the request's; an arena's segment is
			// sized to the pool and its rest is a free block (documented).
			assert.Zero(t, p.HeldBlocks())
		}
		mustClose(t, b)
		if pp.arena {
			// The block and the rest of its segment: at least one free block.
			assert.GreaterOrEqual(t, p.HeldBlocks(), 1)
		} else {
			assert.Equal(t, 1, p.HeldBlocks())
		}
		require.NoError(t, p.FreeHeld())
		assert.Zero(t, p.HeldBlocks())
		assert.Zero(t, p.ManagedBytes())
		assert.Zero(t, count.Stats().Live, "every segment went back to the device")
	})
}

// CuPy TestMemoryPool.test_zero_size_alloc: CuPy returns an unpooled empty
// Memory; clpool documents that Allocate(0) returns a real block instead.
// The port checks that it is one, usable and given back like any other.
func TestPeersCupyZeroSizeAlloc(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, _, _ := peerPool(t, pp, nil)
		b := mustAlloc(t, p, 0)
		assert.Equal(t, int64(0), b.Size())
		assert.NotNil(t, b.Buffer(), "a real block")
		assert.Equal(t, 1, p.ActiveBlocks())
		assert.Zero(t, p.ActiveBytes(), "0 bytes requested")
		mustClose(t, b)
		assert.Zero(t, p.ActiveBlocks())
	})
}

// CuPy TestMemoryPool.test_double_free: freeing twice is harmless. clpool
// documents ErrClosed for the second Close, which changes nothing.
func TestPeersCupyDoubleFree(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, _, _ := peerPool(t, pp, nil)
		b := mustAlloc(t, p, 1)
		mustClose(t, b)
		before := p.Stats()
		assert.ErrorIs(t, b.Close(), mempool.ErrClosed)
		after := p.Stats()
		assert.Equal(t, before.HeldBlocks, after.HeldBlocks)
		assert.Equal(t, before.HeldBytes, after.HeldBytes)
		assert.Equal(t, before.ActiveBlocks, after.ActiveBlocks)
	})
}

// ---------------------------------------------------------------------------
// CuPy: TestSingleDeviceMemoryPool

// CuPy test_alloc: live blocks never overlap.
func TestPeersCupyAllocDistinct(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, _ := peerPool(t, pp, nil)
		u := peerUnit(q)
		bs := []*mempool.PooledBuffer{mustAlloc(t, p, 4*u), mustAlloc(t, p, 4*u), mustAlloc(t, p, 8*u)}
		defer mustClose(t, bs...)
		for i := range bs {
			for j := range i {
				a, b := bs[i], bs[j]
				if a.Base() != b.Base() {
					continue
				}
				overlap := a.Offset() < b.Offset()+b.Size() && b.Offset() < a.Offset()+a.Size()
				assert.False(t, overlap, "blocks %d and %d overlap", i, j)
			}
		}
	})
}

// CuPy test_round_size: a request is rounded up to the allocation unit.
// In the arena the unit is its alignment; exact bins round to the bin's
// AllocSize (PyOpenCL's rule, pinned elsewhere).
func TestPeersCupyRoundSize(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, _ := peerPool(t, pp, nil)
		u := peerUnit(q)
		for _, tc := range []struct{ req, arena int64 }{{u - 1, u}, {u, u}, {u + 1, 2 * u}} {
			b := mustAlloc(t, p, tc.req)
			want := tc.arena
			if !pp.arena {
				want = mempool.AllocSize(mempool.BinNumber(tc.req, 4), 4)
			}
			assert.Equal(t, want, p.Stats().AllocatedBytes.All.Current, "block of a %d-byte request", tc.req)
			mustClose(t, b)
		}
	})
}

// CuPy test_free: a block given back serves the next request of its size.
func TestPeersCupyFreeReuses(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, count := peerPool(t, pp, nil)
		u := peerUnit(q)
		p1 := mustAlloc(t, p, 4*u)
		base, off := p1.Base(), p1.Offset()
		mustClose(t, p1)
		allocs := count.Stats().Allocs
		p2 := mustAlloc(t, p, 4*u)
		defer mustClose(t, p2)
		assert.Same(t, base, p2.Base())
		assert.Equal(t, off, p2.Offset())
		assert.Equal(t, allocs, count.Stats().Allocs, "no new device allocation")
	})
}

// CuPy test_free_different_size: a block given back does not serve a
// request of a larger size. With exact bins a different bin is a new
// block. (In the arena, CuPy's premise, a chunk of exactly the request's
// size, does not hold: segments are sized to the pool, by design.)
func TestPeersCupyFreeDifferentSizeBins(t *testing.T) {
	p, q, count := peerPool(t, peerPolicies[0], nil)
	u := peerUnit(q)
	mustClose(t, mustAlloc(t, p, 4*u))
	allocs := count.Stats().Allocs
	p2 := mustAlloc(t, p, 8*u)
	defer mustClose(t, p2)
	assert.Equal(t, allocs+1, count.Stats().Allocs, "a new block for the larger bin")
	assert.Equal(t, 1, p.HeldBlocks(), "the smaller block is still held")
}

// CuPy test_alloc_split: a freed chunk is split for smaller requests, head
// first, tail right after.
func TestPeersCupyAllocSplitArena(t *testing.T) {
	p, q, _ := peerPool(t, peerPolicies[1], nil)
	quiet(t, p)
	u := peerUnit(q)
	b := mustAlloc(t, p, 4*u)
	base, off := b.Base(), b.Offset()
	mustClose(t, b)
	head := mustAlloc(t, p, 2*u)
	tail := mustAlloc(t, p, 2*u)
	defer mustClose(t, head, tail)
	assert.Same(t, base, head.Base())
	assert.Equal(t, off, head.Offset(), "the head starts where the chunk did")
	assert.Same(t, base, tail.Base())
	assert.Equal(t, off+2*u, tail.Offset(), "the tail follows the head")
	assert.Equal(t, int64(1), p.Stats().Segment.All.Current, "one segment, split")
}

// CuPy test_free_merge: head and tail given back merge, in either order,
// so the whole chunk serves a request again.
func TestPeersCupyFreeMergeArena(t *testing.T) {
	p, q, count := peerPool(t, peerPolicies[1], nil)
	quiet(t, p)
	u := peerUnit(q)
	b := mustAlloc(t, p, 4*u)
	base, off := b.Base(), b.Offset()
	mustClose(t, b)
	allocs := count.Stats().Allocs
	for _, headFirst := range []bool{false, true} {
		head := mustAlloc(t, p, 2*u)
		tail := mustAlloc(t, p, 2*u)
		require.Equal(t, off, head.Offset())
		if headFirst {
			mustClose(t, head, tail)
		} else {
			mustClose(t, tail, head)
		}
		whole := mustAlloc(t, p, 4*u)
		assert.Same(t, base, whole.Base(), "headFirst=%v", headFirst)
		assert.Equal(t, off, whole.Offset(), "merged back: headFirst=%v", headFirst)
		mustClose(t, whole)
	}
	assert.Equal(t, allocs, count.Stats().Allocs, "no new segment")
	assert.Equal(t, int64(1), p.Stats().Segment.All.Current)
}

// CuPy test_free_all_blocks: after free_all_blocks the next request gets
// new memory.
func TestPeersCupyFreeAllBlocksThenNew(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, count := peerPool(t, pp, nil)
		u := peerUnit(q)
		mustClose(t, mustAlloc(t, p, 4*u))
		require.NoError(t, p.FreeHeld())
		assert.Zero(t, p.ManagedBytes())
		allocs := count.Stats().Allocs
		misses := p.Stats().Misses
		p2 := mustAlloc(t, p, 4*u)
		defer mustClose(t, p2)
		assert.Equal(t, allocs+1, count.Stats().Allocs, "new device memory")
		assert.Equal(t, misses+1, p.Stats().Misses)
	})
}

// CuPy test_free_all_blocks_split: free_all_blocks keeps the free blocks
// of a segment still in use, and they serve the next request.
func TestPeersCupyFreeAllBlocksSplitArena(t *testing.T) {
	p, q, count := peerPool(t, peerPolicies[1], nil)
	quiet(t, p)
	u := peerUnit(q)
	mustClose(t, mustAlloc(t, p, 4*u))
	head := mustAlloc(t, p, 2*u)
	tail := mustAlloc(t, p, 2*u)
	base, off := tail.Base(), tail.Offset()
	mustClose(t, tail)
	require.NoError(t, p.FreeHeld())
	assert.NotZero(t, p.ManagedBytes(), "the segment in use stays")
	allocs := count.Stats().Allocs
	again := mustAlloc(t, p, 2*u)
	assert.Same(t, base, again.Base())
	assert.Equal(t, off, again.Offset(), "the tail's block serves again")
	assert.Equal(t, allocs, count.Stats().Allocs)
	mustClose(t, again, head)
}

// CuPy test_free_all_blocks_stream: free_all_blocks(stream) frees only
// what that stream may still use; the other stream's blocks stay and
// serve it. (Blocks of one arena segment share it across queues, so the
// port uses exact bins, where a block is a segment.)
func TestPeersCupyFreeAllBlocksStreamBins(t *testing.T) {
	p, q, count := peerPool(t, peerPolicies[0], nil)
	q2 := cltest.SecondQueue(t, q, 0)
	u := peerUnit(q)
	on1, on2 := p.On(q), p.On(q2)
	b1, err := on1.Allocate(4 * u)
	require.NoError(t, err)
	b2, err := on2.Allocate(4 * u)
	require.NoError(t, err)
	base2 := b2.Base()
	mustClose(t, b1, b2)
	require.Equal(t, 2, p.HeldBlocks())
	require.NoError(t, on1.FreeHeld())
	assert.Equal(t, 1, p.HeldBlocks(), "only the first queue's block is freed")
	allocs := count.Stats().Allocs
	b4, err := on2.Allocate(4 * u)
	require.NoError(t, err)
	assert.Same(t, base2, b4.Base(), "the second queue's block serves it")
	assert.Equal(t, allocs, count.Stats().Allocs)
	mustClose(t, b4)
	// free_all_blocks() with no stream frees every queue's.
	require.NoError(t, p.FreeHeld())
	assert.Zero(t, p.HeldBlocks())
	assert.Zero(t, p.ManagedBytes())
}

// CuPy test_used_bytes, test_free_bytes, test_total_bytes: the three
// counters through a sequence of mallocs and frees, and
// used + free == total throughout.
func TestPeersCupyUsedFreeTotalBytes(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, _ := peerPool(t, pp, nil)
		u := peerUnit(q)
		var seg int64                // the arena's segment, once allocated
		blk := func(n int64) int64 { // the block of a request of n units
			if pp.arena {
				return n * u
			}
			return mempool.AllocSize(mempool.BinNumber(n*u, 4), 4)
		}
		check := func(step string, used, binsHeld, binsTotal int64) {
			t.Helper()
			s := p.Stats()
			assert.Equal(t, used, s.ActiveBytes, "%s: used_bytes", step)
			if pp.arena {
				if seg == 0 {
					seg = s.ManagedBytes
				}
				assert.Equal(t, seg, s.ManagedBytes, "%s: total_bytes: one segment", step)
			} else {
				assert.Equal(t, binsHeld, s.HeldBytes, "%s: free_bytes", step)
				assert.Equal(t, binsTotal, s.ManagedBytes, "%s: total_bytes", step)
			}
			if pp.arena {
				// Blocks are exact multiples of the alignment here, so the
				// block sizes handed out are the bytes requested.
				assert.Equal(t, s.ActiveBytes, s.AllocatedBytes.All.Current, "%s", step)
			}
			assert.Equal(t, s.ManagedBytes, s.AllocatedBytes.All.Current+s.HeldBytes, "%s: used + free == total", step)
		}
		p1 := mustAlloc(t, p, 2*u)
		check("malloc 2u", 2*u, 0, blk(2))
		p2 := mustAlloc(t, p, 4*u)
		check("malloc 4u", 6*u, 0, blk(2)+blk(4))
		mustClose(t, p2)
		check("free 4u", 2*u, blk(4), blk(2)+blk(4))
		mustClose(t, p1)
		check("free 2u", 0, blk(2)+blk(4), blk(2)+blk(4))
		p3 := mustAlloc(t, p, u)
		// Exact bins do not split: 1u is a bin of its own (documented),
		// and each bin's block is its AllocSize, PyOpenCL's rounding.
		check("malloc 1u", u, blk(2)+blk(4), blk(1)+blk(2)+blk(4))
		mustClose(t, p3)
		require.NoError(t, p.FreeHeld())
		assert.Zero(t, p.ManagedBytes(), "total_bytes after free_all_blocks")
		assert.Zero(t, p.HeldBytes())
	})
}

// CuPy test_set_limit_size and test_get_limit.
func TestPeersCupySetLimitSize(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, _, _ := peerPool(t, pp, nil)
		assert.Zero(t, p.Limit())
		require.NoError(t, p.SetLimit(1024))
		assert.Equal(t, int64(1024), p.Limit())
		require.NoError(t, p.SetLimit(1<<33))
		assert.Equal(t, int64(1<<33), p.Limit())
		assert.Equal(t, int64(1<<33), p.Stats().Limit)
		require.NoError(t, p.SetLimit(0))
		assert.Zero(t, p.Limit())
		require.NoError(t, p.SetLimit(1024))
		assert.Error(t, p.SetLimit(-1), "a negative limit is refused")
		assert.Equal(t, int64(1024), p.Limit(), "and changes nothing")
	})
}

// CuPy test_set_limit_fraction, torch test_set_per_process_memory_fraction
// (the argument checks): the limit is the fraction of the device's memory;
// a fraction out of (0, 1] is refused.
func TestPeersCupySetLimitFraction(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		q := cltest.Queue(t)
		total := q.Device().GlobalMemSize
		for _, tc := range []struct {
			f    float64
			want int64
		}{{0.5, total / 2}, {1.0, total}} {
			p, _ := pooltest.NewOver(t, q, nil, append(append([]mempool.Option(nil), pp.opts...), mempool.WithLimitFraction(tc.f))...)
			assert.Equal(t, tc.want, p.Limit(), "fraction %v", tc.f)
		}
		imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
		require.NoError(t, err)
		for _, bad := range []float64{-1, 1.1} {
			_, err := mempool.New(imm, append(append([]mempool.Option(nil), pp.opts...), mempool.WithLimitFraction(bad))...)
			assert.Error(t, err, "fraction %v", bad)
		}
	})
}

// CuPy test_alloc_limit: under a limit of 6 units, 5 + 1 units fit and a
// third request fails with an out-of-memory error; raising the limit to 7
// units lets it through.
func TestPeersCupyAllocLimit(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, _ := peerPool(t, pp, nil)
		u := peerUnit(q)
		blk := func(n int64) int64 { // the block of a request of n units
			if pp.arena {
				return n * u
			}
			return mempool.AllocSize(mempool.BinNumber(n*u, 4), 4)
		}
		limit := blk(5) + blk(1) // CuPy's 6 units
		require.NoError(t, p.SetLimit(limit))
		p1 := mustAlloc(t, p, 5*u)
		p2 := mustAlloc(t, p, u)
		_, err := p.Allocate(u)
		require.Error(t, err)
		assert.ErrorIs(t, err, mempool.ErrOutOfMemory)
		var oom *mempool.OutOfMemoryError
		if assert.ErrorAs(t, err, &oom) {
			assert.Equal(t, u, oom.Requested)
			assert.Equal(t, limit, oom.Limit)
			assert.Nil(t, oom.Err, "the limit refused, not the device")
		}
		assert.LessOrEqual(t, p.ManagedBytes(), limit)
		require.NoError(t, p.SetLimit(limit+blk(1))) // CuPy's 7 units
		p3 := mustAlloc(t, p, u)
		assert.LessOrEqual(t, p.ManagedBytes(), limit+blk(1))
		assert.Equal(t, int64(1), p.Stats().OOMs, "num_ooms")
		mustClose(t, p1, p2, p3)
	})
}

// CuPy: blocks outlive their pool ("free after pool destroyed"): a block
// still active when the pool is closed stays valid, and its Close frees
// its memory.
func TestPeersCupyFreeAfterPoolClosed(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, count := peerPool(t, pp, nil)
		u := peerUnit(q)
		held := mustAlloc(t, p, 4*u)
		mustClose(t, held)
		b := mustAlloc(t, p, 2*u)
		require.NoError(t, p.Close())
		assert.NotNil(t, b.Buffer(), "still valid after the pool's Close")
		_, err := p.Allocate(u)
		assert.ErrorIs(t, err, mempool.ErrPoolClosed)
		assert.Equal(t, 1, count.Stats().Live, "only the active block's memory is left")
		mustClose(t, b)
		assert.Zero(t, count.Stats().Live, "freed at its Close")
		assert.Zero(t, p.ManagedBytes())
	})
}

// ---------------------------------------------------------------------------
// torch: test_cuda.py

// torchKeys lists the keys of torch.cuda.memory_stats that clpool says it
// names as torch does.
func torchKeys() []string {
	var keys []string
	for _, g := range []string{"allocation", "allocated_bytes", "requested_bytes", "active", "active_bytes",
		"inactive_split", "inactive_split_bytes", "segment", "reserved_bytes"} {
		for _, pool := range []string{"all", "small_pool", "large_pool"} {
			for _, m := range []string{"current", "peak", "allocated", "freed"} {
				keys = append(keys, g+"."+pool+"."+m)
			}
		}
	}
	for _, g := range []string{"oversize_allocations", "oversize_segments"} {
		for _, m := range []string{"current", "peak", "allocated", "freed"} {
			keys = append(keys, g+"."+m)
		}
	}
	return append(keys, "num_alloc_retries", "num_ooms", "max_split_size", "num_device_alloc", "num_device_free", "num_sync_all_streams")
}

// torch test_memory_stats (keys): every key is there, and a fresh pool's
// values are zero but max_split_size's -1 (no limit).
func TestPeersTorchMemoryStatsKeys(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, _, _ := peerPool(t, pp, nil)
		m := p.MemoryStats()
		for _, k := range torchKeys() {
			v, ok := m[k]
			if !assert.True(t, ok, "missing key %s", k) {
				continue
			}
			if k == "max_split_size" {
				assert.Equal(t, int64(-1), v, k)
			} else {
				assert.Zero(t, v, k)
			}
		}
	})
}

// peerCheckSnapshot ports torch's _check_memory_stat_consistency: the
// statistics' current values are what memory_snapshot shows, segment by
// segment, for all blocks and for each pool; and, as torch's snapshot
// promises, a segment's blocks cover it exactly.
func peerCheckSnapshot(t *testing.T, p *mempool.Pool, when string) {
	t.Helper()
	snap := p.Snapshot()
	m := p.MemoryStats()
	want := map[string]int64{}
	add := func(k, pool string, v int64) {
		want[k+".all.current"] += v
		want[k+"."+pool+".current"] += v
	}
	var managed, requested int64
	for _, seg := range snap.Segments {
		pool := "large_pool"
		if seg.Small {
			pool = "small_pool"
		}
		managed += seg.Size
		add("segment", pool, 1)
		add("reserved_bytes", pool, seg.Size)
		// Make sure every pool's keys are expected, zero if need be.
		add("allocation", pool, 0)
		add("inactive_split", pool, 0)
		add("inactive_split_bytes", pool, 0)
		var at int64
		for _, b := range seg.Blocks {
			assert.Equal(t, at, b.Offset, "%s: segment %d: blocks are contiguous", when, seg.ID)
			at = b.Offset + b.Size
			switch b.State {
			case mempool.StateActive:
				add("allocation", pool, 1)
				add("active", pool, 1)
				add("allocated_bytes", pool, b.Size)
				add("active_bytes", pool, b.Size)
				requested += b.Requested
			case mempool.StateInactiveSplit:
				add("inactive_split", pool, 1)
				add("inactive_split_bytes", pool, b.Size)
			case mempool.StateHeld:
			default:
				t.Errorf("%s: unknown state %q", when, b.State)
			}
		}
		assert.Equal(t, seg.Size, at, "%s: segment %d: blocks cover it", when, seg.ID)
	}
	for k, v := range want {
		assert.Equal(t, v, m[k], "%s: %s", when, k)
	}
	for _, k := range []string{"segment", "reserved_bytes", "allocation", "allocated_bytes", "active", "active_bytes", "inactive_split", "inactive_split_bytes"} {
		for _, pool := range []string{"all", "small_pool", "large_pool"} {
			if _, ok := want[k+"."+pool+".current"]; !ok {
				assert.Zero(t, m[k+"."+pool+".current"], "%s: %s.%s.current: no such segment", when, k, pool)
			}
		}
	}
	assert.Equal(t, managed, snap.ManagedBytes, "%s: snapshot managed bytes", when)
	assert.Equal(t, managed, p.ManagedBytes(), "%s", when)
	assert.Equal(t, requested, snap.ActiveBytes, "%s: snapshot active bytes", when)
	assert.Equal(t, requested, m["requested_bytes.all.current"], "%s", when)
}

// peerTracker ports torch's assert_change of _test_memory_stats_generator:
// memory_allocated moves the way the test expects, peaks never fall and
// stay at least the current values, empty_cache never raises reserved
// memory nor changes its peak, and reset_peak_memory_stats brings every
// peak down to the current value.
type peerTracker struct {
	t               *testing.T
	p               *mempool.Pool
	lastM, maxM     int64
	lastR, maxR     int64
	lastReq, maxReq int64
	lastAlc, maxAlc int64
}

func newPeerTracker(t *testing.T, p *mempool.Pool) *peerTracker {
	tr := &peerTracker{t: t, p: p}
	m := p.MemoryStats()
	tr.lastM, tr.maxM = m["allocated_bytes.all.current"], m["allocated_bytes.all.peak"]
	tr.lastR, tr.maxR = m["reserved_bytes.all.current"], m["reserved_bytes.all.peak"]
	return tr
}

func (tr *peerTracker) change(when string, comp int, emptyCache, resetPeak bool) {
	t, p := tr.t, tr.p
	t.Helper()
	m := p.MemoryStats()
	newM, newMaxM := m["allocated_bytes.all.current"], m["allocated_bytes.all.peak"]
	switch {
	case comp > 0:
		assert.Greater(t, newM, tr.lastM, "%s: memory_allocated grew", when)
	case comp < 0:
		assert.Less(t, newM, tr.lastM, "%s: memory_allocated fell", when)
	default:
		assert.Equal(t, tr.lastM, newM, "%s: memory_allocated unchanged", when)
	}
	assert.LessOrEqual(t, newM, newMaxM, "%s", when)
	assert.GreaterOrEqual(t, newMaxM, tr.maxM, "%s: max_memory_allocated never falls", when)
	tr.lastM, tr.maxM = newM, newMaxM

	newR, newMaxR := m["reserved_bytes.all.current"], m["reserved_bytes.all.peak"]
	assert.LessOrEqual(t, newR, newMaxR, "%s", when)
	assert.GreaterOrEqual(t, newMaxR, tr.maxR, "%s: max_memory_reserved never falls", when)
	tr.lastR, tr.maxR = newR, newMaxR
	// The pool's own peaks agree with torch's.
	s := p.Stats()
	assert.Equal(t, newR, s.ManagedBytes, "%s", when)
	assert.Equal(t, newMaxR, s.PeakManagedBytes, "%s: reserved peak is the managed peak", when)
	assert.LessOrEqual(t, s.ActiveBytes, s.PeakActiveBytes, "%s", when)
	assert.Equal(t, m["requested_bytes.all.peak"], s.PeakActiveBytes, "%s: the requested peak is the active peak", when)

	if emptyCache {
		require.NoError(t, p.FreeHeld())
		m := p.MemoryStats()
		assert.LessOrEqual(t, m["reserved_bytes.all.current"], tr.lastR, "%s: empty_cache", when)
		assert.LessOrEqual(t, m["reserved_bytes.all.current"], m["reserved_bytes.all.peak"], "%s: empty_cache", when)
		assert.Equal(t, tr.maxR, m["reserved_bytes.all.peak"], "%s: empty_cache keeps the peak", when)
		tr.lastR = m["reserved_bytes.all.current"]
	}
	if resetPeak {
		p.ResetPeak()
		m := p.MemoryStats()
		assert.Equal(t, tr.lastM, m["allocated_bytes.all.current"], "%s: reset_peak", when)
		assert.Equal(t, tr.lastM, m["allocated_bytes.all.peak"], "%s: reset_peak: max_memory_allocated", when)
		assert.Equal(t, tr.lastR, m["reserved_bytes.all.current"], "%s: reset_peak", when)
		assert.Equal(t, tr.lastR, m["reserved_bytes.all.peak"], "%s: reset_peak: max_memory_reserved", when)
		// Every peak is its current value.
		for k, v := range m {
			if len(k) > 5 && k[len(k)-5:] == ".peak" {
				cur := k[:len(k)-5] + ".current"
				assert.Equal(t, m[cur], v, "%s: reset_peak: %s", when, k)
			}
		}
		s := p.Stats()
		assert.Equal(t, s.ActiveBytes, s.PeakActiveBytes, "%s: reset_peak", when)
		assert.Equal(t, s.ManagedBytes, s.PeakManagedBytes, "%s: reset_peak", when)
		tr.maxM, tr.maxR = tr.lastM, tr.lastR
	}
	peerCheckSnapshot(t, p, when)
}

// torch test_memory_stats: _test_memory_stats_generator, with
// _check_memory_stat_consistency after every step. Sizes are torch's
// float tensors' (4 bytes an element), the large ones scaled down for a
// CPU device.
func TestPeersTorchMemoryStatsGenerator(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, _, _ := peerPool(t, pp, nil)
		const N = 35
		tr := newPeerTracker(t, p)
		alloc := func(elems int64) *mempool.PooledBuffer { return mustAlloc(t, p, 4*elems) }

		tr.change("start", 0, false, false)
		tr.change("start", 0, false, true)
		tr.change("start", 0, true, false)
		tr.change("start", 0, false, true)
		tr.change("start", 0, false, false)

		tensors1 := []*mempool.PooledBuffer{alloc(1), alloc(10 * 20), alloc(200 * 300 * 20)}
		m1 := p.MemoryStats()["allocated_bytes.all.current"]
		tr.change("tensors1", 1, false, false)

		var tensors2 []*mempool.PooledBuffer
		for i := int64(1); i <= N/2; i++ { // small ones
			tensors2 = append(tensors2, alloc(i*i*4))
			tr.change(fmt.Sprintf("small %d", i), 1, false, false)
		}
		for i := int64(5); i < N/2+5; i++ { // large ones
			tensors2 = append(tensors2, alloc(i*i*7*9*11))
			tr.change(fmt.Sprintf("large %d", i), 1, false, i%2 == 0)
		}
		// An empty tensor holds no memory in torch; in clpool Allocate(0)
		// is a real block (documented), so it stays out of this port.

		// Permute: nothing changes.
		perm := make([]*mempool.PooledBuffer, 0, len(tensors2))
		for i := range tensors2 {
			perm = append(perm, tensors2[(i*7)%len(tensors2)])
			tr.change("permute", 0, false, false)
		}
		tensors2 = perm
		tr.change("permuted", 0, false, true)

		for range N / 2 {
			b := tensors2[0]
			tensors2 = tensors2[1:]
			mustClose(t, b)
			tr.change("del", -1, false, false)
		}
		for i := int64(2); i < 2*N/3+2; i++ {
			tensors2 = append(tensors2, alloc(i*i*3*8))
			tr.change(fmt.Sprintf("again %d", i), 1, false, false)
		}
		mustClose(t, tensors2...)
		tr.change("del tensors2", -1, false, true)
		tr.change("after", 0, false, false)
		assert.Equal(t, m1, p.MemoryStats()["allocated_bytes.all.current"])

		mustClose(t, tensors1...)
		tr.change("del tensors1", -1, false, true)
		assert.Zero(t, p.MemoryStats()["allocated_bytes.all.current"])
		tr.change("end", 0, true, false)
		tr.change("end", 0, false, true)
		assert.Zero(t, p.MemoryStats()["reserved_bytes.all.current"], "empty_cache with nothing in use frees everything")
	})
}

// torch test_memory_allocation (caching_allocator_alloc / delete): one
// byte raises memory_allocated, its delete brings it back.
func TestPeersTorchMemoryAllocation(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, _, _ := peerPool(t, pp, nil)
		prev := p.MemoryStats()["allocated_bytes.all.current"]
		b := mustAlloc(t, p, 1)
		assert.Greater(t, p.MemoryStats()["allocated_bytes.all.current"], prev)
		assert.Equal(t, int64(1), p.MemoryStats()["requested_bytes.all.current"])
		mustClose(t, b)
		assert.Equal(t, prev, p.MemoryStats()["allocated_bytes.all.current"])
	})
}

// torch reset_accumulated_memory_stats: allocated and freed totals, and the
// event counts, go to zero; current values and peaks stay.
func TestPeersTorchResetAccumulated(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, _ := peerPlainPool(t, pp, nil)
		u := peerUnit(q)
		keep := mustAlloc(t, p, 4*u)
		mustClose(t, mustAlloc(t, p, 2*SmallBlockBytes))
		before := p.MemoryStats()
		require.NotZero(t, before["allocation.all.allocated"])
		require.NotZero(t, before["num_device_alloc"])
		p.ResetAccumulated()
		after := p.MemoryStats()
		for k, v := range after {
			switch {
			case len(k) > 10 && (k[len(k)-10:] == ".allocated"):
				assert.Zero(t, v, k)
			case len(k) > 6 && k[len(k)-6:] == ".freed":
				assert.Zero(t, v, k)
			case k == "num_alloc_retries" || k == "num_ooms" || k == "num_device_alloc" || k == "num_device_free":
				assert.Zero(t, v, k)
			default:
				assert.Equal(t, before[k], v, "%s: not a total, kept", k)
			}
		}
		s := p.Stats()
		assert.Zero(t, s.Hits)
		assert.Zero(t, s.Misses)
		mustClose(t, keep)
		after = p.MemoryStats()
		assert.Equal(t, int64(1), after["allocation.all.freed"], "counted again from zero")
		assert.Zero(t, after["allocation.all.allocated"])
	})
}

// SmallBlockBytes is torch's small-pool bound, as clpool exports it.
const SmallBlockBytes = int64(mempool.SmallBlock)

// torch test_caching_allocator / empty_cache: memory given back stays
// reserved until empty_cache, which returns it to the device;
// allocated bytes count in the small or large pool by the 1 MiB bound.
func TestPeersTorchEmptyCacheAndPools(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, _, count := peerPool(t, pp, nil)
		small := mustAlloc(t, p, 4096)
		large := mustAlloc(t, p, 2*SmallBlockBytes)
		m := p.MemoryStats()
		assert.Equal(t, int64(1), m["allocation.small_pool.current"])
		assert.Equal(t, int64(1), m["allocation.large_pool.current"])
		assert.GreaterOrEqual(t, m["allocated_bytes.large_pool.current"], 2*SmallBlockBytes)
		assert.Less(t, m["allocated_bytes.small_pool.current"], SmallBlockBytes)
		assert.Equal(t, 4096+2*SmallBlockBytes, m["requested_bytes.all.current"])
		peerCheckSnapshot(t, p, "both live")
		mustClose(t, small, large)
		m = p.MemoryStats()
		reserved := m["reserved_bytes.all.current"]
		assert.NotZero(t, reserved, "cached, not released")
		assert.Zero(t, m["allocated_bytes.all.current"])
		peerCheckSnapshot(t, p, "both closed")
		require.NoError(t, p.FreeHeld())
		m = p.MemoryStats()
		assert.Zero(t, m["reserved_bytes.all.current"], "empty_cache releases it")
		assert.Equal(t, reserved, m["reserved_bytes.all.peak"], "the peak stays")
		assert.Equal(t, m["segment.all.allocated"], m["segment.all.freed"])
		assert.Equal(t, m["num_device_alloc"], m["num_device_free"])
		assert.Zero(t, count.Stats().Live)
	})
}

// torch test_out_of_memory: a request far larger than the device fails
// with an out-of-memory error that names its size, and the pool works on.
func TestPeersTorchOutOfMemoryHuge(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, _, _ := peerPool(t, pp, nil)
		keep := mustAlloc(t, p, 4096)
		huge := int64(1) << 60
		_, err := p.Allocate(huge)
		require.Error(t, err)
		assert.ErrorIs(t, err, mempool.ErrOutOfMemory)
		assert.ErrorIs(t, err, cl.ErrInvalidBufferSize)
		var oom *mempool.OutOfMemoryError
		require.ErrorAs(t, err, &oom)
		assert.Equal(t, huge, oom.Requested)
		assert.NotZero(t, oom.DeviceMaxAlloc)
		assert.Equal(t, int64(1), p.MemoryStats()["num_ooms"])
		assert.NotNil(t, keep.Buffer(), "the live block is untouched")
		b := mustAlloc(t, p, 4096)
		mustClose(t, b, keep)
	})
}

// torch test_out_of_memory_retry: with half the device taken, another half
// fails; once the first is freed, it succeeds. Here the device is an
// allocator.Budget.
func TestPeersTorchOutOfMemoryRetry(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		const budget = 16 << 20
		p, _, _ := peerPool(t, pp, func(a allocator.Allocator) allocator.Allocator { return allocator.NewBudget(a, budget) })
		size := int64(budget / 2)
		a := mustAlloc(t, p, size+4096)
		_, err := p.Allocate(size)
		require.Error(t, err)
		assert.ErrorIs(t, err, mempool.ErrOutOfMemory)
		assert.ErrorIs(t, err, cl.ErrMemObjectAllocationFailure, "the device's error, wrapped")
		assert.Equal(t, int64(1), p.MemoryStats()["num_ooms"])
		mustClose(t, a)
		b := mustAlloc(t, p, size)
		mustClose(t, b)
		require.NoError(t, p.FreeHeld())
		p.ResetPeak()
		assert.Zero(t, p.MemoryStats()["reserved_bytes.all.peak"])
	})
}

// torch num_alloc_retries: a device allocation refused while the cache
// holds memory frees the cache and retries; the retry is counted, and the
// request succeeds without an OOM. The device is a Budget shared with
// another user (the "other process" that takes memory meanwhile). The pool
// first reaches a peak of 2 + 5 + 6 MiB, then gives the 6 MiB back to the
// device, so that the later 6 MiB request is within its past peak, and
// keeps 2 MiB in use: an arena then keeps its wholly free segment until the
// device refuses (its documented rules free such segments up front when the
// pool grows past its peak, or is idle).
func TestPeersTorchNumAllocRetries(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		const budget = 14 << 20
		var dev *allocator.Budget
		p, _, _ := peerPlainPool(t, pp, func(a allocator.Allocator) allocator.Allocator {
			dev = allocator.NewBudget(a, budget)
			return dev
		})
		keep := mustAlloc(t, p, 2<<20)
		a := mustAlloc(t, p, 5<<20)
		b := mustAlloc(t, p, 6<<20)
		mustClose(t, b)
		require.NoError(t, p.FreeHeld()) // b's memory goes back; a's stays
		mustClose(t, a)                  // cached
		defer mustClose(t, keep)
		other, err := dev.Allocate(4 << 20)
		require.NoError(t, err)
		defer func() { require.NoError(t, dev.Free(other)) }()
		p.ResetAccumulated()
		require.Zero(t, p.MemoryStats()["num_alloc_retries"])
		c := mustAlloc(t, p, 6<<20) // does not fit in a's block, nor beside it
		m := p.MemoryStats()
		assert.GreaterOrEqual(t, m["num_alloc_retries"], int64(1), "num_alloc_retries")
		assert.Zero(t, m["num_ooms"])
		assert.GreaterOrEqual(t, m["segment.all.freed"], int64(1), "the cached segment was released")
		mustClose(t, c)
		p.ResetAccumulated()
		assert.Zero(t, p.MemoryStats()["num_alloc_retries"], "a total: reset_accumulated_memory_stats")
	})
}

// torch test_set_per_process_memory_fraction: under a fraction of the
// device, an allocation just under it works and one of the whole fraction,
// with a tensor already live, fails. The fraction is chosen to make a limit
// of 16 MiB, a CPU device's memory being the host's.
func TestPeersTorchPerProcessMemoryFraction(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		q := cltest.Queue(t)
		f := float64(16<<20) / float64(q.Device().GlobalMemSize)
		t.Setenv(mempool.LimitEnv, "")
		p, _ := pooltest.NewOver(t, q, nil, append(append([]mempool.Option(nil), pp.opts...), mempool.WithLimitFraction(f))...)
		limit := p.Limit()
		require.InDelta(t, float64(16<<20), float64(limit), 2)
		tensor := mustAlloc(t, p, 4096)
		require.NoError(t, p.FreeHeld())
		application := int64(float64(limit)*0.499) - p.MemoryStats()["reserved_bytes.all.peak"]
		tmp := mustAlloc(t, p, application)
		mustClose(t, tmp)
		require.NoError(t, p.FreeHeld())
		_, err := p.Allocate(limit)
		require.Error(t, err)
		assert.ErrorIs(t, err, mempool.ErrOutOfMemory)
		assert.NotNil(t, tensor.Buffer(), "the live tensor is untouched")
		assert.LessOrEqual(t, p.Stats().PeakManagedBytes, limit)
		mustClose(t, tensor)
	})
}

// torch max_split_size_mb (test_allocator_settings, oversize stats):
// requests over the maximum split size get segments of their own, never
// split, counted as oversize, reused only by oversize requests; memory_stats
// reports max_split_size.
func TestPeersTorchMaxSplitSize(t *testing.T) {
	const maxSplit = 4 << 20
	p, _, count := peerPool(t, peerPolicies[1], nil, mempool.WithMaxSplitSize(maxSplit))
	quiet(t, p)
	m := p.MemoryStats()
	assert.Equal(t, int64(maxSplit), m["max_split_size"])
	assert.Equal(t, int64(maxSplit), p.Stats().MaxSplitSize)

	big := mustAlloc(t, p, 6<<20)
	bigBase := big.Base()
	m = p.MemoryStats()
	assert.Equal(t, int64(1), m["oversize_allocations.current"])
	assert.Equal(t, int64(1), m["oversize_segments.current"])
	// A request under the split size gets memory of its own.
	small := mustAlloc(t, p, 1<<20)
	assert.NotSame(t, bigBase, small.Base())
	peerCheckSnapshot(t, p, "oversize live")
	mustClose(t, big)
	m = p.MemoryStats()
	assert.Zero(t, m["oversize_allocations.current"])
	assert.Equal(t, int64(1), m["oversize_allocations.peak"])
	assert.Equal(t, int64(1), m["oversize_segments.current"], "kept for reuse")

	// A smaller oversize request reuses it (within torch's kLargeBuffer
	// slack), whole: an oversize segment is never split.
	allocs := count.Stats().Allocs
	big2 := mustAlloc(t, p, 5<<20)
	assert.Equal(t, allocs, count.Stats().Allocs, "the oversize segment serves the oversize request")
	assert.Same(t, bigBase, big2.Base())
	m = p.MemoryStats()
	assert.Equal(t, int64(1), m["oversize_allocations.current"])
	assert.Equal(t, int64(2), m["oversize_allocations.allocated"])
	assert.Equal(t, int64(1), m["oversize_segments.current"])
	peerCheckSnapshot(t, p, "oversize reused")
	mustClose(t, big2)

	// A small request never takes the free oversize segment.
	small2 := mustAlloc(t, p, 512<<10)
	assert.NotSame(t, bigBase, small2.Base())
	for _, seg := range p.Snapshot().Segments {
		if seg.Size >= 6<<20 {
			assert.Len(t, seg.Blocks, 1, "an oversize segment is never split")
		}
	}
	mustClose(t, small, small2)
	require.NoError(t, p.FreeHeld())
	m = p.MemoryStats()
	assert.Zero(t, m["oversize_segments.current"])
	assert.Equal(t, int64(1), m["oversize_segments.freed"])
}

// torch: max_split_size_mb applies to the splitting allocator only; clpool
// documents that WithMaxSplitSize needs WithArena.
func TestPeersTorchMaxSplitSizeNeedsArena(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	_, err = mempool.New(imm, mempool.WithMaxSplitSize(4<<20))
	assert.Error(t, err)
}

// torch memory_snapshot: after a mix of allocations and frees, the
// snapshot agrees with the statistics, and with the pool's peaks.
func TestPeersTorchSnapshotConsistency(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, _ := peerPool(t, pp, nil)
		u := peerUnit(q)
		var live []*mempool.PooledBuffer
		for i, size := range []int64{1, u, 3 * u, 100 * 1000, 3 << 20, 7 * u, 2 << 20, 5} {
			live = append(live, mustAlloc(t, p, size))
			if i%3 == 2 {
				mustClose(t, live[len(live)-2])
				live = append(live[:len(live)-2], live[len(live)-1])
			}
			peerCheckSnapshot(t, p, fmt.Sprintf("step %d", i))
		}
		snap := p.Snapshot()
		s := p.Stats()
		assert.Equal(t, pp.name, snap.Policy)
		assert.Equal(t, s.PeakManagedBytes, snap.PeakManagedBytes)
		assert.Equal(t, s.PeakActiveBytes, snap.PeakActiveBytes)
		var active int
		for _, seg := range snap.Segments {
			for _, b := range seg.Blocks {
				if b.State == mempool.StateActive {
					active++
					assert.NotZero(t, b.ID)
				}
			}
		}
		assert.Equal(t, len(live), active)
		mustClose(t, live...)
		peerCheckSnapshot(t, p, "all closed")
		for _, seg := range p.Snapshot().Segments {
			for _, b := range seg.Blocks {
				assert.Equal(t, mempool.StateHeld, b.State, "nothing in use: held, not inactive_split")
			}
		}
		require.NoError(t, p.FreeHeld())
		assert.Empty(t, p.Snapshot().Segments)
	})
}
