package mempool_test

// Session s39 ports of Vulkan Memory Allocator's tests (src/Tests.cpp of
// GPUOpen-LibrariesAndSDKs/VulkanMemoryAllocator): TestPool_SameSize,
// TestHeapSizeLimit, TestBudget, the statistics of vmaCalculateStatistics /
// vmaGetPoolStatistics, TestLinearAllocator's one-time-free, stack and ring
// patterns, TestPool_MinBlockCount's kept blocks, and MainTest's threads
// that free each other's allocations.
//
// The mapping: a VmaPool with a block size and a maxBlockCount is a pool
// whose limit (WithLimit) is what its blocks may take; a heap size limit
// (pHeapSizeLimit) is an allocator.Budget of the device, shared by the
// pool and "dedicated" allocations made beside it; VmaBudget's
// allocationBytes is Stats.AllocatedBytes (block sizes; RequestedBytes the
// bytes asked), blockBytes is ReservedBytes (ManagedBytes);
// VmaStatistics' blockCount is Segment.All.Current, allocationCount
// ActiveBlocks, unusedRangeCount and unusedRangeSizeMax are the held runs
// of a Snapshot; VK_ERROR_OUT_OF_DEVICE_MEMORY is ErrOutOfMemory.

import (
	"math/rand"
	"sync"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s39BlockBytes is what one request of n takes of a pool's memory when n
// is a multiple of 64 KiB: its bin's block with exact bins, n itself in an
// arena (its segments are in 64 KiB units, its blocks aligned).
func s39BlockBytes(pp peerPolicy, n int64) int64 {
	if pp.arena {
		return n
	}
	return mempool.AllocSize(mempool.BinNumber(n, 4), 4)
}

// s39HeldRuns walks a snapshot as vmaCalculateStatistics walks a VMA
// block's suballocations: the runs of contiguous blocks not in use
// (VMA merges free neighbours, so each run is one unused range), their
// count, bytes and the largest; and the active blocks' count and bytes.
type s39Runs struct {
	segments, active, runs  int
	activeBytes, heldBytes  int64
	largestRun, smallestRun int64
	minActive, maxActive    int64
	segBytes                int64
}

func s39HeldRuns(s mempool.Snapshot) s39Runs {
	var r s39Runs
	for _, seg := range s.Segments {
		r.segments++
		r.segBytes += seg.Size
		var run int64
		flush := func() {
			if run > 0 {
				r.runs++
				r.largestRun = max(r.largestRun, run)
				if r.smallestRun == 0 || run < r.smallestRun {
					r.smallestRun = run
				}
			}
			run = 0
		}
		for _, b := range seg.Blocks {
			if b.State == mempool.StateActive {
				flush()
				r.active++
				r.activeBytes += b.Size
				if r.minActive == 0 || b.Size < r.minActive {
					r.minActive = b.Size
				}
				r.maxActive = max(r.maxActive, b.Size)
				continue
			}
			run += b.Size
			r.heldBytes += b.Size
		}
		flush()
	}
	return r
}

// VMA Tests.cpp TestPool_SameSize: a pool of at most BUF_COUNT blocks of
// BUF_SIZE serves exactly BUF_COUNT buffers of BUF_SIZE and refuses one
// more (VK_ERROR_OUT_OF_DEVICE_MEMORY); after random frees and
// allocations it still serves up to BUF_COUNT (same-size blocks never
// fragment); with one buffer freed its statistics show one unused range of
// BUF_SIZE and the pool's whole size; every other buffer freed and the
// pool compacted (VMA's vmaDefragment; clpool's FreeHeld), it serves
// BUF_COUNT again; and a request larger than the whole pool fails at once.
// The pool's blocks are capped by its limit (VMA's maxBlockCount), or by a
// device budget under it (a heap of that size).
func TestPeersS39VmaPoolSameSize(t *testing.T) {
	for _, by := range []string{"limit", "budget"} {
		t.Run(by, func(t *testing.T) {
			forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
				const size = 64 << 10
				const count = 32
				block := s39BlockBytes(pp, size)
				total := int64(count) * block
				var wrap func(allocator.Allocator) allocator.Allocator
				var extra []mempool.Option
				if by == "budget" {
					wrap = func(a allocator.Allocator) allocator.Allocator { return allocator.NewBudget(a, total) }
				} else {
					extra = append(extra, mempool.WithLimit(total))
				}
				p, _, _ := peerPool(t, pp, wrap, extra...)
				rng := rand.New(rand.NewSource(123))
				var items []*mempool.PooledBuffer
				defer func() {
					for _, b := range items {
						b.Close()
					}
				}()
				alloc := func(what string) {
					t.Helper()
					b, err := p.Allocate(size)
					require.NoError(t, err, "%s: %d live of %d", what, len(items), count)
					items = append(items, b)
				}
				free := func(i int) {
					t.Helper()
					require.NoError(t, items[i].Close())
					items = append(items[:i], items[i+1:]...)
				}
				// Fill the entire pool.
				for range count {
					alloc("fill")
				}
				// Another allocation fails.
				_, err := p.Allocate(size)
				require.Error(t, err, "one buffer past the pool's blocks")
				assert.ErrorIs(t, err, mempool.ErrOutOfMemory)
				assert.Equal(t, count, p.ActiveBlocks())
				for _, b := range items {
					assert.NotNil(t, b.Base(), "no buffer lost")
				}
				// Free 10% at random, then random allocations and frees.
				for range count / 10 {
					free(rng.Intn(len(items)))
				}
				for range count {
					if rng.Intn(2) == 1 {
						if len(items) < count {
							alloc("random")
						}
					} else if len(items) > 0 {
						free(rng.Intn(len(items)))
					}
				}
				// Up to the maximum again.
				for len(items) < count {
					alloc("refill")
				}
				// Free one: one unused range of one block; the pool's size is
				// all its blocks.
				free(len(items) - 1)
				s := p.Stats()
				assert.Equal(t, count-1, s.ActiveBlocks, "allocationCount")
				assert.Equal(t, total, s.ManagedBytes, "size == BUF_COUNT * BUF_SIZE")
				assert.Equal(t, 1, s.HeldBlocks, "unusedRangeCount")
				assert.Equal(t, block, s.HeldBytes, "unusedSize")
				assert.Zero(t, s.Fragmentation, "unusedRangeSizeMax == unusedSize")
				r := s39HeldRuns(p.Snapshot())
				assert.Equal(t, 1, r.runs, "unusedRangeCount (snapshot)")
				assert.Equal(t, block, r.largestRun, "unusedRangeSizeMax (snapshot)")
				// Free all, allocate the maximum again.
				for len(items) > 0 {
					free(len(items) - 1)
				}
				for range count {
					alloc("maximum again")
				}
				// Delete every other item, then compact.
				for i := 0; i < len(items); i++ {
					free(i)
				}
				require.Len(t, items, count/2)
				require.NoError(t, p.FreeHeld())
				s = p.Stats()
				assert.Equal(t, count/2, s.ActiveBlocks)
				assert.LessOrEqual(t, s.ManagedBytes, total)
				if !pp.arena {
					assert.Equal(t, int64(count/2)*block, s.ManagedBytes, "bins: every free block went back")
				}
				for len(items) < count {
					alloc("after compaction")
				}
				for len(items) > 0 {
					free(len(items) - 1)
				}
				// An allocation too large for the pool fails at once.
				held := p.Stats().HeldBytes
				_, err = p.Allocate(total + 4)
				require.Error(t, err, "larger than the whole pool")
				assert.ErrorIs(t, err, mempool.ErrOutOfMemory)
				if by == "limit" {
					assert.Equal(t, held, p.Stats().HeldBytes, "the limit refuses it at once, keeping what is held")
				}
			})
		})
	}
}

// VMA Tests.cpp TestHeapSizeLimit: under a heap size limit of HEAP, two
// dedicated allocations of half a block are made beside the pool, then the
// pool serves ((HEAP / BLOCK) - 1) * 2 buffers of half a block, all the
// memory left, and one more buffer, even of 128 bytes, fails with
// VK_ERROR_OUT_OF_DEVICE_MEMORY. The heap is an allocator.Budget shared by
// the "dedicated" buffers and the pool.
func TestPeersS39VmaHeapSizeLimit(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		const blockSize = 256 << 10
		half := s39BlockBytes(pp, blockSize/2)
		heap := 2 * half * 8 // HEAP / BLOCK = 8
		var heapAlloc *allocator.Budget
		p, _, _ := peerPlainPool(t, pp, func(a allocator.Allocator) allocator.Allocator {
			heapAlloc = allocator.NewBudget(a, heap)
			return heapAlloc
		})
		// 1. Two dedicated allocations beside the pool.
		var dedicated []*cl.Buffer
		for range 2 {
			buf, err := heapAlloc.Allocate(half)
			require.NoError(t, err)
			dedicated = append(dedicated, buf)
		}
		defer func() {
			for _, buf := range dedicated {
				assert.NoError(t, heapAlloc.Free(buf))
			}
		}()
		// 2. The pool serves all the remaining memory.
		var items []*mempool.PooledBuffer
		defer func() { mustClose(t, items...) }()
		n := (heap/(2*half) - 1) * 2
		for i := range n {
			b, err := p.Allocate(half)
			require.NoError(t, err, "buffer %d of %d: the heap has room for it", i+1, n)
			items = append(items, b)
		}
		assert.Equal(t, heap, heapAlloc.Live(), "the heap is full")
		// 3. One more, even small, fails.
		before := p.Stats()
		_, err := p.Allocate(128)
		require.Error(t, err, "the heap is full")
		assert.ErrorIs(t, err, mempool.ErrOutOfMemory)
		assert.ErrorIs(t, err, cl.ErrMemObjectAllocationFailure, "the heap's refusal")
		after := p.Stats()
		assert.Equal(t, before.ActiveBlocks, after.ActiveBlocks)
		assert.Equal(t, before.OOMs+1, after.OOMs)
		assert.LessOrEqual(t, heapAlloc.Live(), heap)
	})
}

// VMA Tests.cpp TestBudget: with BUF_COUNT buffers of BUF_SIZE made,
// allocationBytes has grown by exactly BUF_COUNT * BUF_SIZE, and never
// passes blockBytes (nor blockBytes the budget); with them destroyed,
// allocationBytes is back where it began and blockBytes is no more than it
// was with them. Twice, the second round over what the first left.
func TestPeersS39VmaBudget(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		const bufSize = 1 << 20
		const bufCount = 4
		const budget = 64 << 20
		var dev *allocator.Budget
		p, _, _ := peerPool(t, pp, func(a allocator.Allocator) allocator.Allocator {
			dev = allocator.NewBudget(a, budget)
			return dev
		})
		keep := mustAlloc(t, p, 3000) // something live across the rounds
		defer mustClose(t, keep)
		for round := range 2 {
			beg := p.Stats()
			assert.LessOrEqual(t, beg.AllocatedBytes.All.Current, beg.ReservedBytes.All.Current)
			assert.LessOrEqual(t, beg.ReservedBytes.All.Current, int64(budget))
			assert.Equal(t, dev.Live(), beg.ReservedBytes.All.Current, "usage == blockBytes")
			bufs := mustAllocN(t, p, bufCount, bufSize)
			with := p.Stats()
			assert.Equal(t, beg.RequestedBytes.All.Current+bufCount*bufSize, with.RequestedBytes.All.Current, "round %d: requested bytes", round)
			assert.Equal(t, beg.AllocatedBytes.All.Current+bufCount*s39BlockBytes(pp, bufSize), with.AllocatedBytes.All.Current, "round %d: allocationBytes grew by the buffers' blocks", round)
			assert.LessOrEqual(t, with.AllocatedBytes.All.Current, with.ReservedBytes.All.Current, "allocationBytes <= blockBytes")
			assert.Equal(t, dev.Live(), with.ReservedBytes.All.Current, "usage == blockBytes")
			mustClose(t, bufs...)
			end := p.Stats()
			assert.Equal(t, beg.AllocatedBytes.All.Current, end.AllocatedBytes.All.Current, "round %d: allocationBytes back", round)
			assert.Equal(t, beg.RequestedBytes.All.Current, end.RequestedBytes.All.Current)
			assert.LessOrEqual(t, end.ReservedBytes.All.Current, with.ReservedBytes.All.Current, "blockBytes no more than with the buffers")
			assert.Equal(t, dev.Live(), end.ReservedBytes.All.Current)
		}
	})
}

// VMA Tests.cpp statistics (vmaCalculateStatistics, vmaGetPoolStatistics,
// VmaDetailedStatistics): blockCount, allocationCount, allocationBytes,
// unusedRangeCount, blockBytes == allocationBytes + unused bytes,
// allocationSizeMin/Max and unusedRangeSizeMax, after a mix of sizes
// allocated and freed. Stats and Snapshot must say the same: the segments,
// the active blocks and their bytes, the held bytes, and the largest
// unused range (Fragmentation = 1 - largest held / held bytes;
// LargestHeldBin its class).
func TestPeersS39VmaCalculateStatistics(t *testing.T) {
	for _, v := range s34bVariants() {
		t.Run(v.name, func(t *testing.T) {
			p, q, _ := peerPool(t, v.pp, nil)
			alloc := s34bAllocFn(p, q, v.on)
			u := peerUnit(q)
			rng := rand.New(rand.NewSource(7))
			var live []*mempool.PooledBuffer
			defer func() { mustClose(t, live...) }()
			check := func(when string) {
				t.Helper()
				s := p.Stats()
				r := s39HeldRuns(p.Snapshot())
				assert.Equal(t, s.Segment.All.Current, int64(r.segments), "%s: blockCount", when)
				assert.Equal(t, s.ManagedBytes, r.segBytes, "%s: blockBytes", when)
				assert.Equal(t, s.ActiveBlocks, r.active, "%s: allocationCount", when)
				assert.Equal(t, s.AllocatedBytes.All.Current, r.activeBytes, "%s: allocationBytes", when)
				assert.Equal(t, s.HeldBytes, r.heldBytes, "%s: unused bytes", when)
				assert.Equal(t, s.ManagedBytes, r.activeBytes+r.heldBytes, "%s: blockBytes == allocationBytes + unused", when)
				if r.heldBytes > 0 {
					// The largest unused range, as VMA counts it (free
					// neighbours merged), is what Fragmentation says.
					want := 1 - float64(r.largestRun)/float64(r.heldBytes)
					assert.InDelta(t, want, s.Fragmentation, 1e-9, "%s: Fragmentation vs the largest unused range %d of %d held", when, r.largestRun, r.heldBytes)
				} else {
					assert.Zero(t, s.Fragmentation, when)
				}
			}
			for step := range 60 {
				if len(live) > 0 && rng.Intn(3) == 0 {
					i := rng.Intn(len(live))
					require.NoError(t, live[i].Close())
					live = append(live[:i], live[i+1:]...)
				} else {
					size := int64(rng.Intn(40)+1) * u
					if rng.Intn(5) == 0 {
						size = int64(rng.Intn(3)+1) << 20
					}
					b, err := alloc(size)
					require.NoError(t, err, "Allocate(%d)", size)
					live = append(live, b)
				}
				if step%5 == 4 {
					check("step " + itoa(int64(step)))
				}
			}
			check("end")
			mustClose(t, live...)
			live = nil
			check("all freed")
		})
	}
}

// VMA Tests.cpp TestLinearAllocator (one-time free, stack, ring buffer),
// for a pool of one block: 100 buffers of 16 B to 1 KiB (multiples of 16)
// fit the block; freed in random order and allocated again they still
// fit, with no new block; freeing the top of the stack and allocating
// more reuses it; a ring buffer of 1 KiB buffers, freed at the front and
// allocated at the back, wraps around within the block. An arena under a
// limit of the block's size (its segments shrink to the room) must serve
// every one, and never hold more than the block.
func TestPeersS39VmaLinearPatterns(t *testing.T) {
	const blockSize = 300 << 10
	p, q, count := peerPool(t, peerPolicies[1], nil, mempool.WithLimit(blockSize))
	_ = q
	rng := rand.New(rand.NewSource(645332))
	randSize := func() int64 { return (16 + rng.Int63n(1024-16) + 15) &^ 15 }
	var bufs []*mempool.PooledBuffer
	defer func() { mustClose(t, bufs...) }()
	allocN := func(n int, size func() int64, what string) {
		t.Helper()
		for i := range n {
			b, err := p.Allocate(size())
			require.NoError(t, err, "%s: buffer %d (%d live)", what, i, len(bufs))
			bufs = append(bufs, b)
		}
	}
	// One-time free, twice.
	var allocsAfterFirst int64
	for round := range 2 {
		allocN(100, randSize, "one-time free round "+itoa(int64(round)))
		s := p.Stats()
		assert.Equal(t, 100, s.ActiveBlocks)
		assert.LessOrEqual(t, s.ManagedBytes, int64(blockSize))
		for len(bufs) > 0 {
			i := rng.Intn(len(bufs))
			require.NoError(t, bufs[i].Close())
			bufs = append(bufs[:i], bufs[i+1:]...)
		}
		if round == 0 {
			allocsAfterFirst = count.Stats().Allocs
		}
	}
	assert.Equal(t, allocsAfterFirst, count.Stats().Allocs, "the second round fits what the first took")
	// Stack.
	allocN(100, randSize, "stack")
	for range 20 {
		require.NoError(t, bufs[len(bufs)-1].Close())
		bufs = bufs[:len(bufs)-1]
	}
	allocN(20, randSize, "stack top again")
	for len(bufs) > 0 {
		require.NoError(t, bufs[len(bufs)-1].Close())
		bufs = bufs[:len(bufs)-1]
	}
	// Ring buffer of 1 KiB buffers: 100 live, 9 freed at the front and 9
	// allocated at the back, until it wrapped around twice.
	one := func() int64 { return 1024 }
	allocN(100, one, "ring")
	iters := blockSize / 1024 / 9 * 2
	for range iters {
		for range 9 {
			require.NoError(t, bufs[0].Close())
			bufs = bufs[1:]
		}
		allocN(9, one, "ring wrap")
	}
	assert.LessOrEqual(t, p.Stats().PeakManagedBytes, int64(blockSize))
}

// VMA Tests.cpp TestPool_MinBlockCount (its kept blocks): blocks that
// become empty are not given back at once (VMA keeps minBlockCount, and
// one empty block by hysteresis); clpool's arena keeps wholly free
// segments for reuse (package doc, Arena), so a second pass of the same
// buffers makes no device allocation, and FreeHeld gives them all back.
func TestPeersS39VmaKeptBlocks(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, _, count := peerPool(t, pp, nil)
		const size = 256 << 10
		bufs := mustAllocN(t, p, 5, size)
		managed := p.ManagedBytes()
		mustClose(t, bufs[0], bufs[1])
		assert.Equal(t, managed, p.ManagedBytes(), "emptied blocks are kept")
		mustClose(t, bufs[4])
		assert.Equal(t, managed, p.ManagedBytes(), "still kept")
		allocs := count.Stats().Allocs
		again := mustAllocN(t, p, 3, size)
		assert.Equal(t, allocs, count.Stats().Allocs, "the kept blocks serve the same buffers again")
		mustClose(t, again...)
		mustClose(t, bufs[2], bufs[3])
		require.NoError(t, p.FreeHeld())
		assert.Zero(t, p.ManagedBytes())
	})
}

// VMA Tests.cpp MainTest (ThreadCount > 1, with
// ThreadsUsingCommonAllocationsProbabilityPercent): threads allocate
// buffers of many sizes, each on its own queue; some go to a common list
// and are freed by whichever thread takes them, the rest by their own
// thread, in the config's free order. Every allocation succeeds, no two
// live buffers overlap, and at the end the statistics account for every
// allocation and free.
func TestPeersS39VmaMainTestThreads(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, _ := peerPlainPool(t, pp, nil)
		const threads = 4
		perThread := cltest.Size(q, 40, 150)
		u := peerUnit(q)
		var (
			mu     sync.Mutex
			common []s38Live
		)
		var total, totalBytes int64
		var countMu sync.Mutex
		var sink errSink
		var wg sync.WaitGroup
		for th := range threads {
			qq := cltest.SecondQueue(t, q, 0)
			on := p.On(qq)
			wg.Go(func() {
				rng := rand.New(rand.NewSource(int64(th) + 1))
				var own []s38Live
				var n, nb int64
				for range perThread {
					size := int64(rng.Intn(64)+1) * u / 4
					if rng.Intn(10) == 0 {
						size = int64(rng.Intn(4)+1) << 20
					}
					b, err := on.Allocate(size)
					if err != nil {
						sink.add(err)
						return
					}
					n++
					nb += size
					if rng.Intn(100) < 30 {
						mu.Lock()
						common = append(common, s38Live{b, size})
						mu.Unlock()
					} else {
						own = append(own, s38Live{b, size})
					}
					// Free one of the common list now and then, whoever made it.
					if rng.Intn(3) == 0 {
						mu.Lock()
						var c *s38Live
						if len(common) > 0 {
							i := rng.Intn(len(common))
							c = &s38Live{common[i].b, common[i].size}
							common = append(common[:i], common[i+1:]...)
						}
						mu.Unlock()
						if c != nil {
							sink.add(c.b.Close())
						}
					}
				}
				// Free the rest: forward, backward or at random.
				switch th % 3 {
				case 0:
					for _, l := range own {
						sink.add(l.b.Close())
					}
				case 1:
					for i := len(own) - 1; i >= 0; i-- {
						sink.add(own[i].b.Close())
					}
				default:
					rng.Shuffle(len(own), func(i, j int) { own[i], own[j] = own[j], own[i] })
					for _, l := range own {
						sink.add(l.b.Close())
					}
				}
				countMu.Lock()
				total += n
				totalBytes += nb
				countMu.Unlock()
			})
		}
		wg.Wait()
		require.NoError(t, sink.err())
		s38CheckDisjoint(t, q, common, "common list")
		for _, c := range common {
			require.NoError(t, c.b.Close())
		}
		s := p.Stats()
		assert.Zero(t, s.ActiveBlocks)
		assert.Equal(t, mempool.Stat{Current: 0, Peak: s.Allocation.All.Peak, Allocated: total, Freed: total}, s.Allocation.All)
		assert.Equal(t, totalBytes, s.RequestedBytes.All.Allocated)
		assert.Equal(t, totalBytes, s.RequestedBytes.All.Freed)
		assert.Equal(t, s.Hits+s.Misses, total, "every request a hit or a miss")
		assert.Equal(t, s.ManagedBytes, s.HeldBytes, "nothing in use: all held")
	})
}

// VMA Tests.cpp TestHeapSizeLimit and TestPool_SameSize's "another
// allocation would fail", with sizes of every kind: VMA refuses a request
// (VK_ERROR_OUT_OF_DEVICE_MEMORY) only when no free range of a block fits
// it and no new block fits under the limit. clpool's package doc: a
// request that would pass the limit goes down the ladder (held memory
// freed, then a segment of the request's own size, "rounded to 4 KiB" in
// an arena, its bin's block with exact bins) and fails only if nothing
// serves it. So at every refusal, the room the limit leaves is less than
// the request's own block, and no held block fits it. Random sizes, most
// kept live, some freed, under a limit that is no multiple of anything.
func TestPeersS39VmaRefusesOnlyWhenFull(t *testing.T) {
	for _, by := range []string{"limit", "budget"} {
		t.Run(by, func(t *testing.T) { s39RefusesOnlyWhenFull(t, by) })
	}
}

func s39RefusesOnlyWhenFull(t *testing.T, by string) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		const limit = 6<<20 + 12345
		var dev *allocator.Budget
		var wrap func(allocator.Allocator) allocator.Allocator
		var extra []mempool.Option
		if by == "budget" {
			wrap = func(a allocator.Allocator) allocator.Allocator {
				dev = allocator.NewBudget(a, limit)
				return dev
			}
		} else {
			extra = append(extra, mempool.WithLimit(limit))
		}
		p, q, _ := peerPool(t, pp, wrap, extra...)
		align := max(q.Context().MemBaseAddrAlign(), 512)
		own := func(n int64) int64 {
			if pp.arena {
				return (max(n, 1) + 4095) &^ 4095
			}
			return mempool.AllocSize(mempool.BinNumber(n, 4), 4)
		}
		fits := func(n int64) int64 { // the least free block that serves n
			if pp.arena {
				return (max(n, 1) + align - 1) / align * align
			}
			return mempool.AllocSize(mempool.BinNumber(n, 4), 4)
		}
		rng := rand.New(rand.NewSource(99))
		var live []*mempool.PooledBuffer
		defer func() { mustClose(t, live...) }()
		refusals := 0
		for step := range 400 {
			if len(live) > 0 && rng.Intn(4) == 0 {
				i := rng.Intn(len(live))
				require.NoError(t, live[i].Close())
				live = append(live[:i], live[i+1:]...)
				continue
			}
			n := 1 + rng.Int63n(400<<10)
			if rng.Intn(8) == 0 {
				n = 1 + rng.Int63n(2<<20)
			}
			b, err := p.Allocate(n)
			if err == nil {
				live = append(live, b)
				continue
			}
			refusals++
			var oom *mempool.OutOfMemoryError
			require.ErrorAs(t, err, &oom, "step %d", step)
			s := p.Stats()
			room := int64(limit) - s.ManagedBytes
			if dev != nil {
				assert.Equal(t, dev.Live(), s.ManagedBytes, "step %d", step)
			}
			assert.Less(t, room, own(n), "step %d: %d bytes refused with %d bytes of room under the limit (own block %d); managed %d, held %d",
				step, n, room, own(n), s.ManagedBytes, s.HeldBytes)
			assert.Less(t, oom.LargestHeldSize, fits(n), "step %d: %d bytes refused while a held block of %d fits them", step, n, oom.LargestHeldSize)
			assert.LessOrEqual(t, s.ManagedBytes, int64(limit))
			if refusals > 20 {
				break
			}
		}
		assert.Positive(t, refusals, "the pool filled")
	})
}

// VMA Tests.cpp statistics (vmaCalculateStatistics' unusedRangeCount and
// unusedRangeSizeMax) after everything is freed on a queue: a VMA block
// with no allocation is one unused range of its whole size. clpool's
// Stats.Fragmentation is documented as "0 when the held memory is one
// block": with nothing in use in one segment, the held memory is one
// range, whether a block of it waits in the queue's cache or not; the
// snapshot and Fragmentation must agree on its largest range.
func TestPeersS39VmaEmptyPoolOneUnusedRange(t *testing.T) {
	p, q, _ := peerPool(t, peerPolicies[1], nil)
	on := p.On(q)
	bs := mustAllocN(t, on, 6, 4096)
	mustClose(t, bs...)
	s := p.Stats()
	r := s39HeldRuns(p.Snapshot())
	assert.Equal(t, 1, r.segments)
	assert.Equal(t, 1, r.runs, "one unused range")
	assert.Equal(t, s.ManagedBytes, r.largestRun)
	assert.Zero(t, s.Fragmentation, "the held memory is one range of %d bytes (%d held blocks, %d cached)", r.largestRun, s.HeldBlocks, s.Queues[0].Cached)
	// And a request of all of it is served from it: no large request is
	// kept from the held memory, which Fragmentation > 0 says there is.
	allocs := s.DeviceAllocs
	whole := mustAlloc(t, on, s.ManagedBytes)
	assert.Equal(t, allocs, p.Stats().DeviceAllocs, "the whole held range serves a request of its size")
	mustClose(t, whole)
}
