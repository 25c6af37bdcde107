package mempool_test

// Session s40d ports of torch's test/test_cuda.py caching-allocator tests
// and CuPy's test_memory.py / test_memory_hook.py tests that the earlier
// rounds (peers_port, peers_s38_*, peers_s39_torch) do not cover:
//
//   - torch test_max_split_expandable (without expandable segments, which
//     clpool has not): under a memory fraction of 120 units, three
//     oversize blocks of 40 fill it, a fourth fails, and once they are
//     freed one request of all 120 succeeds; and a request under the split
//     size then frees a held oversize segment rather than split it.
//   - torch test_allocator_settings' roundup_power2_divisions: clpool's
//     exact bins with WithLeadingBits(2) cut each power of two into four,
//     and every request of a division takes the division's block.
//   - torch test_memory_snapshot: a tensor that is the second block of its
//     segment, and a thousand small ones freed in random order (the
//     history merging), then the snapshot finds the tensor by its
//     requested size, at its address, with the frame that allocated it.
//   - CuPy test_memory_hook.py TestMemoryHook.test_hook: the arguments of
//     each of the six hook points, over a miss then a hit.
//   - CuPy test_memory.py test_reuse_between_thread: a block given back by
//     one goroutine serves the next request of another.

import (
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// torch test_max_split_expandable, scaled: a unit of 64 KiB for torch's
// MiB, a limit (set_per_process_memory_fraction) of 120 units and a
// maximum split size under 40 units, so that each 40-unit request is
// oversize (a segment of its own, never split).
func TestS40dPortTorchMaxSplitUnderFraction(t *testing.T) {
	const unit = 64 << 10
	p, _, count := peerPool(t, peerPolicies[1], nil,
		mempool.WithLimit(120*unit), mempool.WithMaxSplitSize(39*unit))
	a := mustAlloc(t, p, 40*unit)
	b := mustAlloc(t, p, 40*unit)
	c := mustAlloc(t, p, 40*unit)
	_, err := p.Allocate(40 * unit)
	require.ErrorIs(t, err, mempool.ErrOutOfMemory, "the fraction is full")
	assert.EqualValues(t, 3, p.MemoryStats()["oversize_segments.current"])
	mustClose(t, a, b, c)
	// release_cached_blocks with the oversize segments free.
	all := mustAlloc(t, p, 120*unit)
	s38CheckDevice(t, p, count, "all of the fraction")
	mustClose(t, all)

	// Held oversize segments fill the limit again; a request under the
	// split size may not split one, so the pool must free one for it.
	require.NoError(t, p.FreeHeld())
	bs := mustAllocN(t, p, 3, 40*unit)
	mustClose(t, bs...)
	require.EqualValues(t, 120*unit, p.ManagedBytes())
	small := mustAlloc(t, p, 20*unit)
	for _, seg := range p.Snapshot().Segments {
		if seg.Size >= 40*unit {
			assert.Len(t, seg.Blocks, 1, "an oversize segment is never split")
		}
	}
	assert.EqualValues(t, 1, p.Stats().OOMs, "only the request over the fraction failed")
	s38CheckDevice(t, p, count, "small beside the oversize segments")
	mustClose(t, small)
}

// torch test_allocator_settings (roundup_power2_divisions:4): an 84 MiB
// tensor reserves 96 MiB, the next division of its power of two. clpool's
// exact bins are PyOpenCL's: with WithLeadingBits(2) each power of two is
// cut in four, and a request takes its division's largest size (one byte
// under torch's, by design: PyOpenCL's AllocSize). Requests of one
// division share a block; the next division's miss.
func TestS40dPortTorchRoundupPower2Divisions(t *testing.T) {
	const unit = 4 << 10 // torch's MiB
	p, _, count := peerPool(t, peerPolicies[0], nil, mempool.WithLeadingBits(2))
	z := mustAlloc(t, p, 84*unit)
	s := p.Stats()
	assert.EqualValues(t, 96*unit-1, s.AllocatedBytes.All.Current, "84 rounds up to the division that ends at 96")
	assert.EqualValues(t, 96*unit-1, s.ReservedBytes.All.Current)
	assert.EqualValues(t, 84*unit, s.RequestedBytes.All.Current)
	base := z.Base()
	mustClose(t, z)
	for _, n := range []int64{81 * unit, 90 * unit, 96*unit - 1} {
		b := mustAlloc(t, p, n)
		assert.Same(t, base, b.Base(), "a request of %d units' division takes its block", n/unit)
		mustClose(t, b)
	}
	allocs := count.Stats().Allocs
	b := mustAlloc(t, p, 97*unit)
	assert.Equal(t, allocs+1, count.Stats().Allocs, "the next division misses")
	assert.EqualValues(t, 112*unit-1, p.Stats().AllocatedBytes.All.Current)
	mustClose(t, b)
}

// torch test_memory_snapshot: x is the second block of a segment; a
// thousand 512-byte tensors are freed in random order; the snapshot
// still has x's block at x's address, with its requested size and the
// frame that allocated it, and its segments' blocks tile them.
func TestS40dPortTorchMemorySnapshotFindsTheTensor(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, _, _ := peerPool(t, pp, nil)
		lp := memhooks.NewLineProfile()
		defer p.AddHook(lp)()
		first := mustAlloc(t, p, 2*311*411*4)
		unused := mustAlloc(t, p, 310*410*4)
		x, err := p.Allocate(311 * 411 * 4) // here, not in a helper: its site is this line
		require.NoError(t, err)
		n := 1000
		if testing.Short() {
			n = 200
		}
		tensors := mustAllocN(t, p, n, 128*4)
		rng := rand.New(rand.NewPCG(40, 4))
		rng.Shuffle(len(tensors), func(i, j int) { tensors[i], tensors[j] = tensors[j], tensors[i] })
		mustClose(t, tensors...)
		last := mustAlloc(t, p, 128*5*4)

		found := 0
		for _, seg := range p.Snapshot().Segments {
			for _, b := range seg.Blocks {
				if b.State == mempool.StateActive && b.Requested == 311*411*4 {
					found++
					assert.Equal(t, x.ID(), b.ID)
					if pp.arena {
						assert.Equal(t, x.Offset(), b.Offset, "the block is at x's address")
					}
					assert.True(t, strings.Contains(b.Site, "peers_s40d_torch_test.go"), "x's frame: %q", b.Site)
				}
			}
		}
		assert.Equal(t, 1, found, "the snapshot has x's block")
		peerCheckSnapshot(t, p, "after the random frees")
		mustClose(t, first, unused, x, last)
	})
}

// CuPy test_memory_hook.py test_hook: a miss tells alloc (before, after)
// of the rounded size and malloc (before, after) of the requested and
// rounded sizes; the block given back tells free (before, after) with the
// same memory and id as malloc_after; a hit of the same size tells malloc
// and free only, with the same memory.
func TestS40dPortCupyMemoryHookArguments(t *testing.T) {
	for _, v := range s34bVariants() {
		t.Run(v.name, func(t *testing.T) {
			p, q, _ := peerPool(t, v.pp, nil)
			var mu sync.Mutex
			var evs []mempool.Event
			defer p.AddHook(mempool.HookFunc(func(e mempool.Event) {
				mu.Lock()
				evs = append(evs, e)
				mu.Unlock()
			}))()
			alloc := s34bAllocFn(p, q, v.on)
			b, err := alloc(1)
			require.NoError(t, err)
			id1, base1, off1 := b.ID(), b.Base(), b.Offset()
			require.NoError(t, b.Close())
			b, err = alloc(1)
			require.NoError(t, err)
			id2, base2, off2 := b.ID(), b.Base(), b.Offset()
			require.NoError(t, b.Close())
			assert.Same(t, base1, base2, "the hit reuses the memory")
			assert.Equal(t, off1, off2)

			mu.Lock()
			defer mu.Unlock()
			var kinds []mempool.EventKind
			for _, e := range evs {
				kinds = append(kinds, e.Kind)
			}
			require.Equal(t, []mempool.EventKind{
				mempool.MallocBefore, mempool.AllocBefore, mempool.AllocAfter, mempool.MallocAfter,
				mempool.FreeBefore, mempool.FreeAfter,
				mempool.MallocBefore, mempool.MallocAfter, mempool.FreeBefore, mempool.FreeAfter,
			}, kinds)
			dev := p.Device()
			var blockSize int64
			for _, e := range evs {
				assert.Same(t, dev, e.Device, "%v: device", e.Kind)
				switch e.Kind {
				case mempool.AllocAfter:
					assert.NoError(t, e.Err)
					assert.Same(t, base1, e.Buffer, "alloc_after: the segment's memory")
				case mempool.MallocBefore:
					assert.EqualValues(t, 1, e.Size, "malloc_before: the size asked")
				case mempool.MallocAfter:
					assert.EqualValues(t, 1, e.Size)
					assert.NoError(t, e.Err)
					assert.Same(t, base1, e.Buffer)
					assert.Equal(t, off1, e.Offset)
					if blockSize == 0 {
						blockSize = e.AllocSize
					}
					assert.Equal(t, blockSize, e.AllocSize, "malloc: the rounded size, the same on the hit")
					assert.Contains(t, []uint64{id1, id2}, e.BlockID, "malloc_after: the pmem id")
				case mempool.FreeBefore, mempool.FreeAfter:
					assert.Same(t, base1, e.Buffer, "%v: the memory", e.Kind)
					assert.Equal(t, off1, e.Offset)
					assert.EqualValues(t, 1, e.Size, "%v: the size asked", e.Kind)
					assert.Equal(t, blockSize, e.AllocSize, "%v: the rounded size", e.Kind)
					assert.Contains(t, []uint64{id1, id2}, e.BlockID)
				}
			}
			assert.Positive(t, blockSize)
		})
	}
}

// CuPy test_reuse_between_thread: memory one goroutine allocated and gave
// back serves another goroutine's request of the same size: a pool is
// shared by goroutines (pool.Allocate, on the allocator's queue), as
// CuPy's is by threads.
func TestS40dPortCupyReuseBetweenGoroutines(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, _, count := peerPool(t, pp, nil)
		job := func() (base any, off int64, err error) {
			b, err := p.Allocate(16 * 8)
			if err != nil {
				return nil, 0, err
			}
			base, off = b.Base(), b.Offset()
			return base, off, b.Close()
		}
		base1, off1, err := job()
		require.NoError(t, err)
		allocs := count.Stats().Allocs
		var base2 any
		var off2 int64
		var err2 error
		var wg sync.WaitGroup
		wg.Go(func() { base2, off2, err2 = job() })
		if !within(t, "the other goroutine's job", wg.Wait) {
			return
		}
		require.NoError(t, err2)
		assert.Equal(t, base1, base2, "the other goroutine reused the block")
		assert.Equal(t, off1, off2)
		assert.Equal(t, allocs, count.Stats().Allocs, "no device allocation")
		assert.EqualValues(t, 1, p.Stats().Hits)
	})
}
