package mempool_test

// Session s38 ports of RMM's memory-resource tests (tests/mr/device:
// pool_mr_tests.cpp, mr_ref_test.hpp's shared allocation patterns,
// arena_mr_tests.cpp's defragmentation) that peers_port_test.go and
// hostile_s34b_rmm_test.go do not cover yet. RMM's streams are command
// queues (Pool.On); its upstream limiting_resource_adaptor is an
// allocator.Budget of the device; rmm::out_of_memory is ErrOutOfMemory.

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s38Live is a block handed out and what was asked for it.
type s38Live struct {
	b    *mempool.PooledBuffer
	size int64
}

// s38CheckDisjoint fails if two live blocks share bytes, or a block is
// not aligned to the device's base-address alignment (RMM's
// is_pointer_aligned, concurrent_allocations_are_different).
func s38CheckDisjoint(t *testing.T, q *cl.CommandQueue, live []s38Live, when string) {
	t.Helper()
	align := q.Context().MemBaseAddrAlign()
	type rng struct{ lo, hi int64 }
	byBase := map[*cl.Buffer][]rng{}
	for i, l := range live {
		base := l.b.Base()
		require.NotNil(t, base, "%s: live block %d has no base", when, i)
		off := l.b.Offset()
		assert.Zero(t, off%align, "%s: block %d offset %d not aligned to %d", when, i, off, align)
		sz := max(l.size, 1) // a zero-byte block still owns an address
		assert.LessOrEqual(t, off+l.size, base.Size(), "%s: block %d runs past its segment", when, i)
		for _, r := range byBase[base] {
			if off < r.hi && r.lo < off+sz {
				t.Errorf("%s: block %d [%d,%d) overlaps a live block [%d,%d) of the same segment", when, i, off, off+sz, r.lo, r.hi)
			}
		}
		byBase[base] = append(byBase[base], rng{off, off + sz})
	}
}

// s38CheckDevice checks that what the pool says it manages is what the
// device holds: segments and their bytes against the counting allocator's
// live buffers, and used + free == total.
func s38CheckDevice(t *testing.T, p *mempool.Pool, count *allocator.Counting, when string) {
	t.Helper()
	s := p.Stats()
	c := count.Stats()
	assert.Equal(t, int64(c.Live), s.Segment.All.Current, "%s: segments vs device buffers", when)
	assert.Equal(t, c.LiveBytes, s.ManagedBytes, "%s: managed bytes vs device bytes", when)
	assert.Equal(t, s.ManagedBytes, s.ReservedBytes.All.Current, "%s: reserved bytes", when)
	assert.Equal(t, s.ManagedBytes, s.AllocatedBytes.All.Current+s.HeldBytes, "%s: used + free == total", when)
}

// RMM PoolTest.ForceGrowth: over an upstream limited to 6000 bytes a pool
// grows for 1000, 4000 and 500 bytes, and refuses 2000 more with
// out_of_memory. Scaled to MiB (a CPU device's pool works in bigger
// units); exact bins round each request to its bin, so the budget is the
// three bins' blocks and a little more.
func TestPeersS38RmmForceGrowth(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		const mib = int64(1 << 20)
		sizes := []int64{mib, 4 * mib, mib / 2}
		budget := 6 * mib
		if !pp.arena {
			budget = 0
			for _, s := range sizes {
				budget += mempool.AllocSize(mempool.BinNumber(s, 4), 4)
			}
			budget += mib / 4
		}
		var dev *allocator.Budget
		p, q, count := peerPool(t, pp, func(a allocator.Allocator) allocator.Allocator {
			dev = allocator.NewBudget(a, budget)
			return dev
		})
		for _, on := range []bool{false, true} {
			alloc := s34bAllocFn(p, q, on)
			var live []s38Live
			for _, s := range sizes {
				b, err := alloc(s)
				require.NoError(t, err, "on=%v: %d bytes fit the upstream", on, s)
				live = append(live, s38Live{b, s})
			}
			s38CheckDisjoint(t, q, live, "grown")
			before := p.Stats()
			_, err := alloc(2 * mib)
			require.Error(t, err, "on=%v: too much", on)
			assert.ErrorIs(t, err, mempool.ErrOutOfMemory)
			assert.ErrorIs(t, err, cl.ErrMemObjectAllocationFailure, "the upstream's refusal, wrapped")
			assert.True(t, strings.Contains(strings.ToLower(err.Error()), "out of memory"), "what(): %v", err)
			after := p.Stats()
			assert.Equal(t, before.OOMs+1, after.OOMs)
			assert.Equal(t, before.ActiveBlocks, after.ActiveBlocks)
			assert.Equal(t, before.ActiveBytes, after.ActiveBytes)
			assert.LessOrEqual(t, dev.Live(), budget)
			s38CheckDevice(t, p, count, "after the refusal")
			for _, l := range live {
				require.NoError(t, l.b.Close())
			}
			// Everything given back: the 2 MiB now fits (the pool frees what
			// it holds if it must).
			b, err := alloc(2 * mib)
			require.NoError(t, err, "on=%v: fits once the rest is given back", on)
			require.NoError(t, b.Close())
			require.NoError(t, p.FreeHeld())
			s38CheckDevice(t, p, count, "after FreeHeld")
			assert.Zero(t, p.ManagedBytes())
		}
	})
}

// RMM mr_ref_test.hpp test_various_allocations (and its async twin on a
// stream): 0 bytes, 4 B, 1 KiB, 1 MiB, a large one, each allocated and
// freed; then 1 PiB fails with out_of_memory, twice, and leaves nothing
// behind. Run on the pool and on a queue of it.
func TestPeersS38RmmVariousAllocations(t *testing.T) {
	for _, v := range s34bVariants() {
		t.Run(v.name, func(t *testing.T) {
			p, q, count := peerPool(t, v.pp, nil)
			alloc := s34bAllocFn(p, q, v.on)
			for _, size := range []int64{0, 4, 1 << 10, 1 << 20, 64 << 20} {
				b, err := alloc(size)
				require.NoError(t, err, "%d bytes", size)
				assert.Equal(t, size, b.Size())
				require.NotNil(t, b.Base(), "%d bytes", size)
				assert.GreaterOrEqual(t, b.Base().Size()-b.Offset(), size, "%d bytes: the block holds the request", size)
				require.NoError(t, b.Close())
			}
			before := p.Stats()
			for i := range 2 {
				b, err := alloc(1 << 50)
				assert.Nil(t, b)
				require.Error(t, err, "1 PiB, try %d", i)
				assert.ErrorIs(t, err, mempool.ErrOutOfMemory)
				assert.Contains(t, strings.ToLower(err.Error()), "out of memory")
			}
			after := p.Stats()
			assert.Equal(t, before.OOMs+2, after.OOMs, "num_ooms")
			assert.Equal(t, countersOf(before), countersOf(after), "a refused request changes nothing")
			assert.Equal(t, before.DeviceAllocs, after.DeviceAllocs)
			assert.Equal(t, before.DeviceFrees, after.DeviceFrees, "1 PiB is refused at once, freeing nothing")
			assert.Equal(t, int64(5), after.Allocation.All.Allocated)
			assert.Equal(t, int64(5), after.Allocation.All.Freed)
			assert.Zero(t, after.RequestedBytes.All.Current)
			s38CheckDevice(t, p, count, "end")
		})
	}
}

// RMM concurrent_allocations_are_different (issue #861), with zero-byte
// requests too: two live allocations never share an address, on the pool
// or on a queue, however small, even when the second comes right after the
// first went back (hit path) and both are of size 0.
func TestPeersS38RmmAllocationsAreDifferent(t *testing.T) {
	for _, v := range s34bVariants() {
		t.Run(v.name, func(t *testing.T) {
			p, q, _ := peerPool(t, v.pp, nil)
			alloc := s34bAllocFn(p, q, v.on)
			for _, size := range []int64{0, 1, 8, 512} {
				// Warm the caches with blocks of the size given back.
				var warm []*mempool.PooledBuffer
				for range 3 {
					b, err := alloc(size)
					require.NoError(t, err)
					warm = append(warm, b)
				}
				mustClose(t, warm...)
				var live []s38Live
				for range 4 {
					b, err := alloc(size)
					require.NoError(t, err)
					live = append(live, s38Live{b, size})
				}
				s38CheckDisjoint(t, q, live, "size "+itoa(size))
				for _, l := range live {
					require.NoError(t, l.b.Close())
				}
			}
		})
	}
}

func itoa(n int64) string {
	if n == 0 {
		return "0"
	}
	var d []byte
	for ; n > 0; n /= 10 {
		d = append([]byte{byte('0' + n%10)}, d...)
	}
	return string(d)
}

// RMM test_random_allocations with MultiStream: 100 allocations of
// uniform random sizes up to a bound, on two streams in turn, each live
// block distinct and aligned, then all freed; the statistics end where
// they began and every device buffer is accounted for.
func TestPeersS38RmmRandomAllocationsTwoQueues(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, count := peerPool(t, pp, nil)
		q2 := cltest.SecondQueue(t, q, 0)
		ons := []*mempool.QueueAllocator{p.On(q), p.On(q2)}
		rng := rand.New(rand.NewSource(38))
		const maxSize = 1 << 20
		var live []s38Live
		var want int64
		for i := range 100 {
			size := 1 + rng.Int63n(maxSize)
			b, err := ons[i%2].Allocate(size)
			require.NoError(t, err, "allocation %d of %d bytes", i, size)
			live = append(live, s38Live{b, size})
			want += size
		}
		s38CheckDisjoint(t, q, live, "all live")
		s := p.Stats()
		assert.Equal(t, 100, s.ActiveBlocks)
		assert.Equal(t, want, s.ActiveBytes)
		assert.Equal(t, want, s.PeakActiveBytes)
		assert.Equal(t, int64(100), s.Allocation.All.Peak)
		peerCheckSnapshot(t, p, "all live")
		s38CheckDevice(t, p, count, "all live")
		for _, l := range live {
			require.NoError(t, l.b.Close())
		}
		s = p.Stats()
		assert.Zero(t, s.ActiveBlocks)
		assert.Zero(t, s.ActiveBytes)
		assert.Equal(t, s.Allocation.All.Allocated, s.Allocation.All.Freed)
		assert.Equal(t, s.AllocatedBytes.All.Allocated, s.AllocatedBytes.All.Freed)
		assert.Equal(t, s.RequestedBytes.All.Allocated, s.RequestedBytes.All.Freed)
		assert.Equal(t, want, s.RequestedBytes.All.Allocated)
		peerCheckSnapshot(t, p, "all freed")
		s38CheckDevice(t, p, count, "all freed")
		var reqs int64
		for _, qs := range s.Queues {
			reqs += qs.Requests
		}
		assert.Equal(t, int64(100), reqs, "every request counted on its queue")
	})
}

// RMM test_mixed_random_allocation_free: 200 steps, each an allocation
// (53%) or the free of a random live block, across three queues; after
// every step the counts agree with what the test holds, and at checkpoints
// the snapshot and the device agree with the statistics.
func TestPeersS38RmmMixedRandomAllocationFree(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, count := peerPool(t, pp, nil)
		ons := []*mempool.QueueAllocator{p.On(q), p.On(cltest.SecondQueue(t, q, 0)), p.On(cltest.SecondQueue(t, q, 0))}
		rng := rand.New(rand.NewSource(53))
		const maxSize = 256 << 10
		var live []s38Live
		var bytes, peak int64
		allocs := 0
		defer func() {
			for _, l := range live {
				l.b.Close()
			}
		}()
		for i := range 200 {
			doAlloc := len(live) == 0 || (rng.Intn(100) < 53 && allocs < 100)
			if doAlloc {
				size := 1 + rng.Int63n(maxSize)
				if rng.Intn(4) == 0 {
					size = int64(512 << rng.Intn(6)) // exact sizes, the queue caches' hits
				}
				b, err := ons[rng.Intn(len(ons))].Allocate(size)
				require.NoError(t, err, "step %d", i)
				live = append(live, s38Live{b, size})
				allocs++
				bytes += size
				peak = max(peak, bytes)
			} else {
				j := rng.Intn(len(live))
				require.NoError(t, live[j].b.Close(), "step %d", i)
				bytes -= live[j].size
				live = append(live[:j], live[j+1:]...)
			}
			s := p.Stats()
			require.Equal(t, len(live), s.ActiveBlocks, "step %d", i)
			require.Equal(t, bytes, s.ActiveBytes, "step %d", i)
			require.Equal(t, peak, s.PeakActiveBytes, "step %d: the peak of the bytes asked for", i)
			if i%25 == 0 {
				s38CheckDisjoint(t, q, live, "step "+itoa(int64(i)))
				peerCheckSnapshot(t, p, "step "+itoa(int64(i)))
				s38CheckDevice(t, p, count, "step "+itoa(int64(i)))
			}
		}
		for _, l := range live {
			require.NoError(t, l.b.Close())
		}
		live = nil
		peerCheckSnapshot(t, p, "end")
		s38CheckDevice(t, p, count, "end")
		require.NoError(t, p.FreeHeld())
		assert.Zero(t, p.ManagedBytes())
		assert.Zero(t, count.Stats().Live)
	})
}

// RMM PoolTest.DeletedStream: a block allocated on a stream that is then
// destroyed; the pool serves a request of the same size afterwards, from
// another stream and with no stream at all, and a request on the deleted
// stream is an error rather than a crash.
func TestPeersS38RmmDeletedStream(t *testing.T) {
	for _, pp := range peerPolicies {
		for _, next := range []string{"pool", "other-queue"} {
			t.Run(pp.name+"/"+next, func(t *testing.T) {
				p, q, count := peerPool(t, pp, nil)
				q2, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
				require.NoError(t, err)
				const size = 10000
				on2 := p.On(q2)
				b := mustAlloc(t, on2, size)
				require.NoError(t, b.Close())
				require.NoError(t, q2.Release())
				allocs := count.Stats().Allocs
				var b2 *mempool.PooledBuffer
				if next == "pool" {
					b2, err = p.Allocate(size)
				} else {
					b2, err = p.On(cltest.SecondQueue(t, q, 0)).Allocate(size)
				}
				require.NoError(t, err)
				assert.Equal(t, allocs, count.Stats().Allocs, "the block given back on the deleted queue serves it")
				require.NoError(t, b2.Close())
				_, err = on2.Allocate(size)
				assert.ErrorIs(t, err, cl.ErrInvalidCommandQueue, "the deleted queue's allocator refuses")
				require.NoError(t, p.FreeHeld())
				assert.Zero(t, p.ManagedBytes())
				assert.Zero(t, count.Stats().Live)
			})
		}
	}
}

// RMM PoolTest.TwoLargeBuffers: a pool capped at half the memory serves
// two requests of a quarter each (here the cap is the pool's limit, and
// each request is exactly half of it), given back in the order taken.
// Exact bins round each to its bin (PyOpenCL's rule, documented), so their
// limit is two such blocks.
func TestPeersS38RmmTwoLargeBuffers(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		const quarter = int64(8 << 20)
		limit := 2 * quarter
		if !pp.arena {
			limit = 2 * mempool.AllocSize(mempool.BinNumber(quarter, 4), 4)
		}
		p, _, count := peerPool(t, pp, func(a allocator.Allocator) allocator.Allocator {
			return allocator.NewBudget(a, 2*limit)
		}, mempool.WithLimit(limit))
		b1 := mustAlloc(t, p, quarter)
		b2, err := p.Allocate(quarter)
		require.NoError(t, err, "the second quarter fits the limit exactly")
		assert.LessOrEqual(t, p.ManagedBytes(), limit)
		mustClose(t, b1, b2)
		// Again, in the other order, from what is held.
		allocs := count.Stats().Allocs
		b2, err = p.Allocate(quarter)
		require.NoError(t, err)
		b1, err = p.Allocate(quarter)
		require.NoError(t, err)
		assert.Equal(t, allocs, count.Stats().Allocs, "served from the held blocks")
		mustClose(t, b2, b1)
		s38CheckDevice(t, p, count, "end")
	})
}

// RMM arena_mr_tests Defragment (and CuPy's free_all_blocks on OOM): many
// small blocks allocated and given back, some on a second queue (so they
// wait in its cache), then one request of nearly the whole budget: the
// pool gives every held block back to the device and serves it.
func TestPeersS38RmmDefragment(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		const budget = 24 << 20
		p, q, count := peerPool(t, pp, func(a allocator.Allocator) allocator.Allocator {
			return allocator.NewBudget(a, budget)
		})
		ons := []*mempool.QueueAllocator{p.On(q), p.On(cltest.SecondQueue(t, q, 0))}
		var live []*mempool.PooledBuffer
		for i := range 60 {
			b, err := ons[i%2].Allocate(int64(64<<10) + int64(i%5)*4096)
			require.NoError(t, err)
			live = append(live, b)
		}
		live = append(live, mustAlloc(t, p, 2<<20))
		mustClose(t, live...)
		require.NotZero(t, p.HeldBytes())
		big := int64(budget - 3<<20)
		if !pp.arena {
			// The bin's block must fit the budget.
			for mempool.AllocSize(mempool.BinNumber(big, 4), 4) > budget {
				big -= 1 << 20
			}
		}
		b, err := ons[1].Allocate(big)
		require.NoError(t, err, "everything held is given back for the large request")
		assert.Equal(t, 1, p.ActiveBlocks())
		s38CheckDevice(t, p, count, "large live")
		peerCheckSnapshot(t, p, "large live")
		require.NoError(t, b.Close())
		assert.Zero(t, p.Stats().OOMs)
	})
}
