package mempool_test

// Hostile review s34b: ports of RMM's tests (pool_memory_resource,
// limiting_resource_adaptor, statistics_resource_adaptor,
// tracking_resource_adaptor, their error types), and of CuPy's and torch's
// memory tests not yet in peers_port_test.go.

import (
	"strings"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s34bVariants: each policy, with allocations through pool.Allocate and
// through On(q).
type s34bVariant struct {
	name string
	pp   peerPolicy
	on   bool
}

func s34bVariants() []s34bVariant {
	var vs []s34bVariant
	for _, pp := range peerPolicies {
		vs = append(vs, s34bVariant{pp.name + "/pool", pp, false}, s34bVariant{pp.name + "/on", pp, true})
	}
	return vs
}

type s34bAlloc func(int64) (*mempool.PooledBuffer, error)

func s34bAllocFn(p *mempool.Pool, q *cl.CommandQueue, on bool) s34bAlloc {
	if on {
		return p.On(q).Allocate
	}
	return p.Allocate
}

// PASSES (port of RMM's LimitingTest.OverLimit / UnderLimitDueToFrees):
// allocating up to the limit works; a request over it fails with an
// out-of-memory error and changes nothing; freeing makes room again.
func TestHostileS34bLimitingAdaptor(t *testing.T) {
	for _, v := range s34bVariants() {
		t.Run(v.name, func(t *testing.T) {
			const size = 100 << 10
			const limit = 4 << 20
			p, q, count := peerPool(t, v.pp, nil, mempool.WithLimit(limit))
			alloc := s34bAllocFn(p, q, v.on)
			var bufs []*mempool.PooledBuffer
			defer func() {
				for _, b := range bufs {
					b.Close()
				}
			}()
			var err error
			for i := 0; i < 1000; i++ {
				var b *mempool.PooledBuffer
				b, err = alloc(size)
				if err != nil {
					break
				}
				bufs = append(bufs, b)
			}
			require.Error(t, err)
			require.ErrorIs(t, err, mempool.ErrOutOfMemory)
			require.NotEmpty(t, bufs)
			before, cbefore := p.Stats(), count.Stats()
			assert.LessOrEqual(t, before.ManagedBytes, int64(limit))
			_, err = alloc(size)
			require.ErrorIs(t, err, mempool.ErrOutOfMemory)
			var oom *mempool.OutOfMemoryError
			require.ErrorAs(t, err, &oom)
			assert.Equal(t, int64(size), oom.Requested)
			assert.Equal(t, int64(limit), oom.Limit)
			assert.Nil(t, oom.Err, "the limit refused, not the device")
			assert.Equal(t, len(bufs), oom.ActiveBlocks)
			assert.Equal(t, int64(len(bufs))*size, oom.ActiveBytes)
			assert.Equal(t, before.ManagedBytes, oom.ManagedBytes)
			after, cafter := p.Stats(), count.Stats()
			assert.Equal(t, countersOf(before), countersOf(after), "a refused request changes nothing")
			assert.Equal(t, before.DeviceAllocs, after.DeviceAllocs)
			assert.Equal(t, before.DeviceFrees, after.DeviceFrees)
			assert.Equal(t, before.Allocation, after.Allocation)
			assert.Equal(t, before.RequestedBytes, after.RequestedBytes)
			assert.Equal(t, before.ReservedBytes, after.ReservedBytes)
			assert.Equal(t, before.OOMs+1, after.OOMs)
			assert.Equal(t, cbefore.Allocs, cafter.Allocs)
			// Freeing makes room again.
			require.NoError(t, bufs[0].Close())
			b, err := alloc(size)
			require.NoError(t, err)
			bufs[0] = b
		})
	}
}

// PASSES (port of RMM's statistics_resource_adaptor tests): counts and
// bytes, current, peak and total, after allocations, frees and resets.
func TestHostileS34bStatisticsAdaptor(t *testing.T) {
	for _, v := range s34bVariants() {
		t.Run(v.name, func(t *testing.T) {
			p, q, _ := peerPlainPool(t, v.pp, nil)
			alloc := s34bAllocFn(p, q, v.on)
			const size = 1000
			var bufs []*mempool.PooledBuffer
			for i := 0; i < 10; i++ {
				b, err := alloc(size)
				require.NoError(t, err)
				bufs = append(bufs, b)
			}
			s := p.Stats()
			assert.Equal(t, mempool.Stat{Current: 10, Peak: 10, Allocated: 10}, s.Allocation.All)
			assert.Equal(t, mempool.Stat{Current: 10 * size, Peak: 10 * size, Allocated: 10 * size}, s.RequestedBytes.All)
			for _, b := range bufs[:5] {
				require.NoError(t, b.Close())
			}
			s = p.Stats()
			assert.Equal(t, mempool.Stat{Current: 5, Peak: 10, Allocated: 10, Freed: 5}, s.Allocation.All)
			assert.Equal(t, mempool.Stat{Current: 5 * size, Peak: 10 * size, Allocated: 10 * size, Freed: 5 * size}, s.RequestedBytes.All)
			assert.Equal(t, int64(10*size), s.PeakActiveBytes)
			p.ResetPeak()
			s = p.Stats()
			assert.Equal(t, mempool.Stat{Current: 5, Peak: 5, Allocated: 10, Freed: 5}, s.Allocation.All)
			assert.Equal(t, int64(5*size), s.PeakActiveBytes)
			for i := 0; i < 2; i++ {
				b, err := alloc(size)
				require.NoError(t, err)
				bufs[i] = b
			}
			s = p.Stats()
			assert.Equal(t, mempool.Stat{Current: 7, Peak: 7, Allocated: 12, Freed: 5}, s.Allocation.All)
			p.ResetAccumulated()
			s = p.Stats()
			assert.Equal(t, mempool.Stat{Current: 7, Peak: 7}, s.Allocation.All)
			assert.Equal(t, mempool.Stat{Current: 7 * size, Peak: 7 * size}, s.RequestedBytes.All)
			for _, b := range bufs {
				if !b.Closed() {
					require.NoError(t, b.Close())
				}
			}
			s = p.Stats()
			assert.Equal(t, mempool.Stat{Current: 0, Peak: 7, Allocated: 0, Freed: 7}, s.Allocation.All)
			assert.Equal(t, mempool.Stat{Current: 0, Peak: 7 * size, Allocated: 0, Freed: 7 * size}, s.RequestedBytes.All)
		})
	}
}

// PASSES (port of RMM's tracking_resource_adaptor tests): the outstanding
// allocations are listed (Snapshot's active blocks), with their sizes;
// freed ones leave the list.
func TestHostileS34bTrackingAdaptor(t *testing.T) {
	for _, v := range s34bVariants() {
		t.Run(v.name, func(t *testing.T) {
			p, q, _ := peerPool(t, v.pp, nil)
			alloc := s34bAllocFn(p, q, v.on)
			sizes := []int64{8, 100, 1000, 4096, 5000, 100000, 1 << 20, 3 << 20}
			live := map[uint64]int64{}
			var bufs []*mempool.PooledBuffer
			for _, n := range sizes {
				b, err := alloc(n)
				require.NoError(t, err)
				bufs = append(bufs, b)
				live[b.ID()] = n
			}
			check := func() {
				t.Helper()
				got := map[uint64]int64{}
				var bytes int64
				snap := p.Snapshot()
				for _, seg := range snap.Segments {
					for _, blk := range seg.Blocks {
						if blk.State == mempool.StateActive {
							got[blk.ID] = blk.Requested
							bytes += blk.Requested
						}
					}
				}
				assert.Equal(t, live, got)
				assert.Equal(t, bytes, snap.ActiveBytes)
				assert.Equal(t, p.Stats().AllocatedBytes.All.Current, s34bActiveBlockBytes(snap))
			}
			check()
			for i := 0; i < len(bufs); i += 2 {
				delete(live, bufs[i].ID())
				require.NoError(t, bufs[i].Close())
			}
			check()
			for i := 1; i < len(bufs); i += 2 {
				delete(live, bufs[i].ID())
				require.NoError(t, bufs[i].Close())
			}
			check()
		})
	}
}

func s34bActiveBlockBytes(s mempool.Snapshot) int64 {
	var n int64
	for _, seg := range s.Segments {
		for _, b := range seg.Blocks {
			if b.State == mempool.StateActive {
				n += b.Size
			}
		}
	}
	return n
}

// PASSES (torch's test_memory_stats: reset_peak_memory_stats sets every
// peak to its current value; reset_accumulated_memory_stats zeroes every
// allocated and freed), with blocks active on two queues and in caches.
func TestHostileS34bResetsEveryKey(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, _ := peerPlainPool(t, pp, nil)
		q2 := cltest.SecondQueue(t, q, 0)
		a1, a2 := p.On(q), p.On(q2)
		var keep []*mempool.PooledBuffer
		for i, n := range []int64{64, 1000, 70000, 2 << 20, 512, 300} {
			a := a1
			if i%2 == 1 {
				a = a2
			}
			b, err := a.Allocate(n)
			require.NoError(t, err)
			b2, err := a.Allocate(n)
			require.NoError(t, err)
			require.NoError(t, b2.Close())
			keep = append(keep, b)
		}
		require.NoError(t, keep[0].Close())
		keep = keep[1:]
		p.ResetPeak()
		m := p.MemoryStats()
		for k, v := range m {
			if base, ok := strings.CutSuffix(k, ".peak"); ok {
				assert.Equal(t, m[base+".current"], v, "%s after ResetPeak", k)
			}
		}
		p.ResetAccumulated()
		m = p.MemoryStats()
		for k, v := range m {
			if strings.HasSuffix(k, ".allocated") || strings.HasSuffix(k, ".freed") || k == "num_alloc_retries" || k == "num_ooms" || k == "num_device_alloc" || k == "num_device_free" {
				assert.Zero(t, v, "%s after ResetAccumulated", k)
			}
		}
		for _, b := range keep {
			require.NoError(t, b.Close())
		}
		m = p.MemoryStats()
		for k, v := range m {
			if base, ok := strings.CutSuffix(k, ".current"); ok {
				if strings.HasPrefix(k, "allocation.") || strings.HasPrefix(k, "allocated_bytes.") || strings.HasPrefix(k, "requested_bytes.") || strings.HasPrefix(k, "active") {
					assert.Zero(t, v, k)
					// What was freed since the reset is what was current then.
					assert.Equal(t, m[base+".freed"], m[base+".peak"], "%s: freed since the reset vs the peak since", base)
				}
			}
		}
	})
}

// PASSES (torch's empty_cache: with nothing in use, every segment goes
// back; reserved and segment stats drop to zero, num_device_free catches
// up with num_device_alloc).
func TestHostileS34bEmptyCacheZeroesReserved(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, _ := peerPool(t, pp, nil)
		q2 := cltest.SecondQueue(t, q, 0)
		var bufs []*mempool.PooledBuffer
		for i, n := range []int64{1, 512, 4000, 1 << 20, 5 << 20, 700} {
			a := p.On(q)
			if i%2 == 1 {
				a = p.On(q2)
			}
			b, err := a.Allocate(n)
			require.NoError(t, err)
			bufs = append(bufs, b)
		}
		for _, b := range bufs {
			require.NoError(t, b.Close())
		}
		require.NoError(t, p.FreeHeld())
		m := p.MemoryStats()
		for _, k := range []string{"reserved_bytes", "segment", "inactive_split", "inactive_split_bytes", "allocation", "allocated_bytes", "requested_bytes", "active", "active_bytes"} {
			for _, pool := range []string{"all", "small_pool", "large_pool"} {
				assert.Zero(t, m[k+"."+pool+".current"], k+"."+pool+".current")
			}
		}
		assert.Equal(t, m["num_device_alloc"], m["num_device_free"])
		assert.Equal(t, m["segment.all.allocated"], m["segment.all.freed"])
		assert.Equal(t, m["reserved_bytes.all.allocated"], m["reserved_bytes.all.freed"])
		s := p.Stats()
		assert.Zero(t, s.HeldBlocks)
		assert.Zero(t, s.HeldBytes)
		assert.Zero(t, s.ManagedBytes)
		for _, qs := range s.Queues {
			assert.Zero(t, qs.Cached)
		}
		assert.Empty(t, p.Snapshot().Segments)
	})
}

// PASSES (CuPy's test_used_bytes / free_bytes / total_bytes /
// n_free_blocks with streams, and free_all_blocks(stream)): the figures
// sum over every stream; freeing one stream's blocks leaves the others'.
func TestHostileS34bBytesOnSeveralQueues(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, _ := peerPool(t, pp, nil)
		q2 := cltest.SecondQueue(t, q, 0)
		a1, a2 := p.On(q), p.On(q2)
		b1, err := a1.Allocate(3 << 20)
		require.NoError(t, err)
		b2, err := a2.Allocate(3 << 20)
		require.NoError(t, err)
		s := p.Stats()
		assert.Equal(t, int64(6<<20), s.ActiveBytes)
		assert.Zero(t, s.HeldBytes)
		assert.Equal(t, s.ManagedBytes, s.AllocatedBytes.All.Current+s.HeldBytes)
		require.NoError(t, b1.Close())
		s = p.Stats()
		assert.Equal(t, int64(3<<20), s.ActiveBytes)
		assert.Equal(t, s.ManagedBytes, s.AllocatedBytes.All.Current+s.HeldBytes, "total = used + free")
		require.NoError(t, b2.Close())
		s = p.Stats()
		assert.Zero(t, s.ActiveBytes)
		assert.Equal(t, s.ManagedBytes, s.HeldBytes, "total = free")
		held := s.HeldBlocks
		// free_all_blocks(stream=s1) frees only s1's.
		require.NoError(t, a1.FreeHeld())
		s = p.Stats()
		if pp.arena {
			// The arena's blocks may share a segment: a segment both
			// queues used stays. At least none grew.
			assert.LessOrEqual(t, s.HeldBlocks, held)
		} else {
			assert.Equal(t, held-1, s.HeldBlocks, "only the block of q1 is freed")
			assert.Equal(t, s.ManagedBytes, s.HeldBytes)
		}
		require.NoError(t, a2.FreeHeld())
		s = p.Stats()
		if !pp.arena {
			assert.Zero(t, s.HeldBlocks)
			assert.Zero(t, s.ManagedBytes)
		}
	})
}

// PASSES (CuPy's test_set_limit during use): a limit set below what is in
// use keeps the blocks in use, refuses new requests, and lets them in
// again once enough is given back.
func TestHostileS34bSetLimitDuringUse(t *testing.T) {
	for _, v := range s34bVariants() {
		t.Run(v.name, func(t *testing.T) {
			p, q, _ := peerPool(t, v.pp, nil)
			alloc := s34bAllocFn(p, q, v.on)
			a, err := alloc(2 << 20)
			require.NoError(t, err)
			b, err := alloc(2 << 20)
			require.NoError(t, err)
			c, err := alloc(100)
			require.NoError(t, err)
			require.NoError(t, c.Close())
			managed := p.ManagedBytes()
			require.NoError(t, p.SetLimit(managed/2))
			assert.Equal(t, managed/2, p.Limit())
			assert.Equal(t, 2, p.ActiveBlocks(), "blocks in use stay")
			_, err = alloc(2 << 20)
			require.ErrorIs(t, err, mempool.ErrOutOfMemory)
			_, err = alloc(100)
			require.ErrorIs(t, err, mempool.ErrOutOfMemory, "the pool is over its limit: every new segment is refused")
			require.NoError(t, a.Close())
			require.NoError(t, b.Close())
			d, err := alloc(100)
			require.NoError(t, err, "given back, the memory is within the limit again")
			require.NoError(t, d.Close())
			require.NoError(t, p.SetLimit(0))
			assert.Zero(t, p.Limit())
		})
	}
}

// PASSES (RMM's pool tests of alignment: every block is aligned).
func TestHostileS34bArenaAlignment(t *testing.T) {
	p, q, _ := peerPool(t, peerPolicies[1], nil)
	align := max(q.Device().MemBaseAddrAlign, 512)
	var bufs []*mempool.PooledBuffer
	for _, n := range []int64{1, 3, 511, 513, 1000, 4095, 4097, 65537, 777777, 1, 2, 3} {
		b, err := p.Allocate(n)
		require.NoError(t, err)
		bufs = append(bufs, b)
		assert.Zero(t, b.Offset()%align, "block of %d at %d", n, b.Offset())
	}
	snap := p.Snapshot()
	for _, seg := range snap.Segments {
		for _, blk := range seg.Blocks {
			assert.Zero(t, blk.Offset%align)
			assert.Zero(t, blk.Size%align, "block sizes keep the next block aligned")
		}
	}
	for _, b := range bufs {
		require.NoError(t, b.Close())
	}
}

// PASSES (RMM's pool: many small allocations freed, then one large that
// needs the whole limit: the pool gives its small segments up).
func TestHostileS34bManySmallThenLarge(t *testing.T) {
	for _, v := range s34bVariants() {
		t.Run(v.name, func(t *testing.T) {
			const limit = 8 << 20
			p, q, _ := peerPool(t, v.pp, nil, mempool.WithLimit(limit))
			alloc := s34bAllocFn(p, q, v.on)
			var bufs []*mempool.PooledBuffer
			for i := 0; i < 300; i++ {
				b, err := alloc(int64(1000 + 37*i))
				require.NoError(t, err)
				bufs = append(bufs, b)
			}
			for _, b := range bufs {
				require.NoError(t, b.Close())
			}
			big := int64(6 << 20)
			if !v.pp.arena {
				big = 7 << 20 // bin size 7.5 MiB... fits the 8 MiB limit
			}
			b, err := alloc(big)
			require.NoError(t, err)
			require.NoError(t, b.Close())
		})
	}
}

// PASSES (RMM's error types, and the Budget's): an out-of-memory of the
// device is an OutOfMemoryError wrapping the allocator's error (which
// matches cl.ErrMemObjectAllocationFailure); both match
// allocator.ErrOutOfMemory; other errors do not.
func TestHostileS34bErrorTypes(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, _, _ := peerPool(t, pp, func(a allocator.Allocator) allocator.Allocator { return allocator.NewBudget(a, 2<<20) })
		b, err := p.Allocate(1 << 20)
		require.NoError(t, err)
		defer b.Close()
		_, err = p.Allocate(3 << 20)
		require.Error(t, err)
		var oom *mempool.OutOfMemoryError
		require.ErrorAs(t, err, &oom)
		assert.ErrorIs(t, err, allocator.ErrOutOfMemory)
		assert.ErrorIs(t, err, mempool.ErrOutOfMemory)
		assert.ErrorIs(t, err, cl.ErrMemObjectAllocationFailure, "unwraps to the device's refusal")
		assert.NotNil(t, oom.Err)
		var ce *cl.CallError
		assert.ErrorAs(t, err, &ce, "the device's error is reachable")
		assert.GreaterOrEqual(t, oom.AllocSize, oom.Requested)
		assert.Positive(t, oom.DeviceTotal)
		assert.Zero(t, oom.DeviceMaxAlloc)
		assert.Zero(t, oom.Limit)
		assert.Equal(t, oom.ManagedBytes, p.ManagedBytes())
		assert.Equal(t, int64(3<<20), oom.Requested)
		assert.Equal(t, 1, oom.ActiveBlocks)
		assert.Contains(t, err.Error(), "out of memory")
		assert.NotErrorIs(t, err, mempool.ErrClosed)
		assert.NotErrorIs(t, err, mempool.ErrPanicked)
		_, err = p.Allocate(-1)
		assert.NotErrorIs(t, err, mempool.ErrOutOfMemory, "a negative size is bad input, not out of memory")
	})
}

// PASSES (RMM's Budget-like adaptors: statistics of the allocator wrappers).
func TestHostileS34bBudgetCountingStats(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	c := allocator.NewCounting(imm)
	b := allocator.NewBudget(c, 10000)
	var bufs []*cl.Buffer
	for _, n := range []int64{1000, 2000, 3000, 4000} {
		buf, err := b.Allocate(n)
		require.NoError(t, err)
		bufs = append(bufs, buf)
	}
	assert.Equal(t, int64(10000), b.Live())
	_, err = b.Allocate(1)
	require.ErrorIs(t, err, allocator.ErrOutOfMemory)
	require.ErrorIs(t, err, cl.ErrMemObjectAllocationFailure)
	assert.Equal(t, int64(10000), b.Live(), "a refusal changes nothing")
	cs := c.Stats()
	assert.Equal(t, allocator.CountingStats{Allocs: 4, Live: 4, LiveBytes: 10000}, cs)
	z, err := b.Allocate(0)
	require.NoError(t, err)
	assert.Nil(t, z)
	require.NoError(t, b.Free(bufs[1]))
	assert.Equal(t, int64(8000), b.Live())
	require.ErrorIs(t, b.Free(bufs[1]), allocator.ErrFreed)
	assert.Equal(t, int64(8000), b.Live())
	buf, err := b.Allocate(2000)
	require.NoError(t, err)
	bufs[1] = buf
	for _, buf := range bufs {
		require.NoError(t, allocator.Free(buf))
	}
	assert.Zero(t, b.Live())
	cs = c.Stats()
	assert.Equal(t, allocator.CountingStats{Allocs: 5, Frees: 5}, cs)
}
