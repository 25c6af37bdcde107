package mempool_test

// Session s38 ports of torch's caching-allocator tests (test/test_cuda.py)
// not yet in peers_port_test.go: memory_stats after work on several
// streams (the peaks and totals torch keeps exact), reset_peak_memory_stats
// and reset_accumulated_memory_stats right after work on a stream,
// record_stream and its out-of-memory test, the OOM observer, and
// empty_cache with live tensors. Streams are command queues (Pool.On);
// each queue's cache (package doc, "Many goroutines") is what these push
// on: the doc promises exact counts for one goroutine, whatever the
// queues.

import (
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s38Model follows what torch's statistics must be, for one goroutine's
// requests: the allocation count and the bytes asked for, current, peak
// and totals.
type s38Model struct {
	n, nPeak, nAlloc, nFreed int64
	b, bPeak, bAlloc, bFreed int64
}

func (m *s38Model) alloc(size int64) {
	m.n++
	m.nAlloc++
	m.b += size
	m.bAlloc += size
	m.nPeak = max(m.nPeak, m.n)
	m.bPeak = max(m.bPeak, m.b)
}

func (m *s38Model) free(size int64) {
	m.n--
	m.nFreed++
	m.b -= size
	m.bFreed += size
}

func (m *s38Model) resetPeak()        { m.nPeak, m.bPeak = m.n, m.b }
func (m *s38Model) resetAccumulated() { m.nAlloc, m.nFreed, m.bAlloc, m.bFreed = 0, 0, 0, 0 }

func (m *s38Model) check(t *testing.T, p *mempool.Pool, when string) {
	t.Helper()
	s := p.Stats()
	assert.Equal(t, mempool.Stat{Current: m.n, Peak: m.nPeak, Allocated: m.nAlloc, Freed: m.nFreed}, s.Allocation.All, "%s: allocation.all", when)
	assert.Equal(t, mempool.Stat{Current: m.b, Peak: m.bPeak, Allocated: m.bAlloc, Freed: m.bFreed}, s.RequestedBytes.All, "%s: requested_bytes.all", when)
	assert.Equal(t, m.bPeak, s.PeakActiveBytes, "%s: PeakActiveBytes", when)
	ms := p.MemoryStats()
	assert.Equal(t, m.nPeak, ms["allocation.all.peak"], "%s", when)
	assert.Equal(t, m.bPeak, ms["requested_bytes.all.peak"], "%s", when)
}

// torch test_memory_stats on several streams: one goroutine interleaves
// small requests (the queue caches' hits) on three queues, so that the
// live peak is reached only across queues; the peaks and totals are
// exact at every read.
func TestPeersS38TorchStatsInterleavedQueues(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, _ := peerPlainPool(t, pp, nil)
		ons := []*mempool.QueueAllocator{p.On(q), p.On(cltest.SecondQueue(t, q, 0)), p.On(cltest.SecondQueue(t, q, 0))}
		sizes := []int64{4096, 8192, 16384}
		var m s38Model
		// Warm each queue's cache with a block of its size.
		for i, on := range ons {
			b := mustAlloc(t, on, sizes[i])
			m.alloc(sizes[i])
			require.NoError(t, b.Close())
			m.free(sizes[i])
		}
		m.check(t, p, "warm")
		for round := range 40 {
			// Each queue takes its block in turn (all three live at once),
			// then gives it back in turn: the peak is their sum.
			var bs []*mempool.PooledBuffer
			for i, on := range ons {
				b := mustAlloc(t, on, sizes[i])
				m.alloc(sizes[i])
				bs = append(bs, b)
			}
			for i, b := range bs {
				require.NoError(t, b.Close())
				m.free(sizes[i])
			}
			if round%10 == 9 {
				m.check(t, p, "round "+itoa(int64(round)))
			}
			if round == 19 {
				p.ResetPeak()
				m.resetPeak()
				m.check(t, p, "after reset_peak")
			}
		}
		m.check(t, p, "end")
		s := p.Stats()
		assert.Equal(t, sizes[0]+sizes[1]+sizes[2], s.PeakActiveBytes, "three live at once")
	})
}

// torch reset_peak_memory_stats right after a burst on another stream:
// the burst's blocks are back (their queue's cache holds them, its sums
// maybe not yet counted), and the reset makes every peak the current
// value; no later read may show the burst's peak again.
func TestPeersS38TorchResetPeakAfterQueueBurst(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, _ := peerPlainPool(t, pp, nil)
		on2 := p.On(cltest.SecondQueue(t, q, 0))
		keep := mustAlloc(t, p, 1000)
		// Warm on2's cache, and read, so that its sums are in.
		warm := mustAllocN(t, on2, 4, 4096)
		mustClose(t, warm...)
		_ = p.Stats()
		p.ResetPeak()
		// The burst: hits in on2's cache, four live at once, all given back.
		burst := mustAllocN(t, on2, 4, 4096)
		mustClose(t, burst...)
		p.ResetPeak() // no Stats between the burst and the reset
		s := p.Stats()
		assert.Equal(t, int64(1000), s.ActiveBytes)
		assert.Equal(t, s.ActiveBytes, s.PeakActiveBytes, "reset_peak: the peak is the current value")
		assert.Equal(t, s.Allocation.All.Current, s.Allocation.All.Peak, "allocation.all.peak after reset")
		assert.Equal(t, s.AllocatedBytes.All.Current, s.AllocatedBytes.All.Peak, "allocated_bytes.all.peak after reset")
		assert.Equal(t, s.AllocatedBytes.Small.Current, s.AllocatedBytes.Small.Peak, "allocated_bytes.small_pool.peak after reset")
		assert.Equal(t, s.RequestedBytes.All.Current, s.RequestedBytes.All.Peak)
		for k, v := range p.MemoryStats() {
			if len(k) > 5 && k[len(k)-5:] == ".peak" {
				cur := k[:len(k)-5] + ".current"
				assert.Equal(t, p.MemoryStats()[cur], v, "%s after reset_peak", k)
			}
		}
		mustClose(t, keep)
	})
}

// torch reset_accumulated_memory_stats right after work on a stream: the
// totals count only what comes after the reset, even though the queue's
// cache summed the earlier requests and may not have handed them in yet.
func TestPeersS38TorchResetAccumulatedAfterQueueWork(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, _ := peerPlainPool(t, pp, nil)
		on := p.On(cltest.SecondQueue(t, q, 0))
		b := mustAlloc(t, on, 4096)
		require.NoError(t, b.Close())
		_ = p.Stats()
		// Hits in the cache, not yet read.
		for range 10 {
			b := mustAlloc(t, on, 4096)
			require.NoError(t, b.Close())
		}
		p.ResetAccumulated() // no Stats between the work and the reset
		s := p.Stats()
		assert.Zero(t, s.Allocation.All.Allocated, "allocation.all.allocated after reset_accumulated")
		assert.Zero(t, s.Allocation.All.Freed, "allocation.all.freed after reset_accumulated")
		assert.Zero(t, s.RequestedBytes.All.Allocated)
		assert.Zero(t, s.AllocatedBytes.All.Freed)
		assert.Zero(t, s.Hits, "hits after reset_accumulated")
		for _, qs := range s.Queues {
			assert.Zero(t, qs.Requests, "queue %q requests after reset_accumulated", qs.Name)
			assert.Zero(t, qs.Hits, "queue %q hits after reset_accumulated", qs.Name)
		}
		// One more request: counted from zero.
		require.NoError(t, mustAlloc(t, on, 4096).Close())
		s = p.Stats()
		assert.Equal(t, int64(1), s.Allocation.All.Allocated)
		assert.Equal(t, int64(1), s.Allocation.All.Freed)
		assert.Equal(t, int64(1), s.Hits)
	})
}

// torch test_record_stream, hostile: a block used on a second stream
// (record_stream) and given back, then merged in the arena with its free
// neighbour, is taken by a larger request on the first queue or on a
// third: the merged block must still wait for the second queue's kernel,
// which reads the recorded block, so what the new owner writes lands
// after the kernel's reads. (TestRecordQueueOrdersTheOtherQueue covers
// the block taken back whole; this one its merge.)
func TestPeersS38TorchRecordStreamMerged(t *testing.T) {
	for _, next := range []string{"first", "third"} {
		t.Run(next, func(t *testing.T) {
			p, q, _ := peerPool(t, peerPolicies[1], nil)
			quiet(t, p) // no queue caches: a block given back merges at once
			q2 := cltest.SecondQueue(t, q, 0)
			q3 := cltest.SecondQueue(t, q, 0)
			k := cltest.SlowReadKernel(t, q2)
			n, iters := 256, cltest.Size(q, 100, 1000000)
			size := int64(4 * n)
			on1 := p.On(q)
			a := mustAlloc(t, on1, size)
			b := mustAlloc(t, on1, size)
			require.Same(t, a.Base(), b.Base(), "one segment")
			out, err := q.Context().CreateBuffer(cl.MemReadWrite, size)
			require.NoError(t, err)
			defer out.Release()
			require.NoError(t, q.WriteBuffer(a.Base(), a.Offset(), cl.Bytes(allOnes(n))))
			require.NoError(t, q.Finish())
			require.NoError(t, a.RecordQueue(q2))
			require.NoError(t, k.SetArgs(a.Buffer(), out, int32(iters)))
			require.NoError(t, q2.EnqueueKernel(k, []int{n}, nil))
			require.NoError(t, q2.Flush())
			aOff := a.Offset()
			require.NoError(t, a.Close()) // legal at once
			require.NoError(t, b.Close()) // merges with a's block
			alloc := on1
			if next == "third" {
				alloc = p.On(q3)
			}
			c := mustAlloc(t, alloc, 2*size)
			overlaps := c.Base() == out || (c.Offset() < aOff+size && aOff < c.Offset()+c.Size())
			if !overlaps {
				t.Logf("the merged request took memory apart from the recorded block: weaker check")
			}
			fillWait(t, alloc.Queue(), c, 7)
			require.NoError(t, c.Close())
			require.NoError(t, q2.Finish())
			assert.False(t, slowReadCorrupted(t, q2, out, n, iters), "the kernel on the recorded queue read bytes rewritten under it")
		})
	}
}

// torch test_caching_allocator_record_stream_oom: blocks whose recorded
// streams may still use them are held, not lost: a request that needs
// their memory still succeeds (the pool frees them and retries), and no
// OOM is counted.
func TestPeersS38TorchRecordStreamOOM(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		const budget = 16 << 20
		p, q, count := peerPool(t, pp, func(a allocator.Allocator) allocator.Allocator {
			return allocator.NewBudget(a, budget)
		})
		q2 := cltest.SecondQueue(t, q, 0)
		on := p.On(q)
		var bs []*mempool.PooledBuffer
		for range 10 {
			b := mustAlloc(t, on, 1<<20)
			require.NoError(t, b.RecordQueue(q2))
			bs = append(bs, b)
		}
		mustClose(t, bs...)
		big := int64(12 << 20)
		if !pp.arena {
			big = 11 << 20 // its bin's block fits the budget
		}
		b, err := p.On(q2).Allocate(big)
		require.NoError(t, err, "the held, recorded blocks are freed for it")
		assert.Zero(t, p.Stats().OOMs)
		s38CheckDevice(t, p, count, "big live")
		require.NoError(t, b.Close())
	})
}

// torch test_notifies_oom (OutOfMemoryObserver) and CuPy's memory hook:
// a refused request is told to the hooks as a malloc that failed, with
// the request's size, its queue and an error matching ErrOutOfMemory;
// every alloc_before has its alloc_after.
func TestPeersS38TorchNotifiesOOM(t *testing.T) {
	for _, v := range s34bVariants() {
		t.Run(v.name, func(t *testing.T) {
			const limit = 4 << 20
			p, q, _ := peerPool(t, v.pp, nil, mempool.WithLimit(limit))
			var events []mempool.Event
			remove := p.AddHook(mempool.HookFunc(func(e mempool.Event) { events = append(events, e) }))
			defer remove()
			alloc := s34bAllocFn(p, q, v.on)
			keep, err := alloc(3 << 20)
			require.NoError(t, err)
			events = events[:0]
			_, err = alloc(2 << 20)
			require.ErrorIs(t, err, mempool.ErrOutOfMemory)
			var mb, ma, ab, aa int
			for _, e := range events {
				switch e.Kind {
				case mempool.MallocBefore:
					mb++
					assert.Equal(t, int64(2<<20), e.Size)
				case mempool.MallocAfter:
					ma++
					assert.Equal(t, int64(2<<20), e.Size)
					assert.ErrorIs(t, e.Err, mempool.ErrOutOfMemory, "malloc_after carries the refusal")
					assert.Zero(t, e.BlockID)
					if v.on {
						assert.Same(t, q, e.Queue, "the request's queue")
					}
				case mempool.AllocBefore:
					ab++
				case mempool.AllocAfter:
					aa++
				}
			}
			assert.Equal(t, 1, mb, "one malloc_before")
			assert.Equal(t, 1, ma, "one malloc_after")
			assert.Equal(t, ab, aa, "every alloc_before has its alloc_after")
			require.NoError(t, keep.Close())
		})
	}
}

// torch empty_cache with live tensors (test_caching_allocator... /
// _test_memory_stats_generator's empty_cache steps) on several streams:
// FreeHeld gives back every wholly free segment, including those whose
// blocks waited in the caches of other queues, and keeps the live blocks
// and their segments; the statistics agree with the snapshot after it.
func TestPeersS38TorchEmptyCacheLiveAcrossQueues(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, count := peerPool(t, pp, nil)
		ons := []*mempool.QueueAllocator{p.On(q), p.On(cltest.SecondQueue(t, q, 0)), p.On(cltest.SecondQueue(t, q, 0))}
		var live, dead []*mempool.PooledBuffer
		for i := range 30 {
			b, err := ons[i%3].Allocate(int64(4096 * (1 + i%4)))
			require.NoError(t, err)
			if i%3 == 0 {
				live = append(live, b)
			} else {
				dead = append(dead, b)
			}
		}
		big, err := ons[1].Allocate(3 << 20)
		require.NoError(t, err)
		dead = append(dead, big)
		mustClose(t, dead...)
		before := p.Stats()
		require.NoError(t, p.FreeHeld())
		after := p.Stats()
		assert.Equal(t, before.Allocation.All.Current, after.Allocation.All.Current)
		assert.Equal(t, before.AllocatedBytes.All.Current, after.AllocatedBytes.All.Current, "memory_allocated unchanged by empty_cache")
		assert.Equal(t, before.ReservedBytes.All.Peak, after.ReservedBytes.All.Peak, "empty_cache keeps the reserved peak")
		assert.Less(t, after.ManagedBytes, before.ManagedBytes, "the 3 MiB block's memory went back")
		for _, qs := range after.Queues {
			assert.Zero(t, qs.Cached, "FreeHeld gives every cache back first: queue %d", qs.Queue)
		}
		peerCheckSnapshot(t, p, "after empty_cache")
		s38CheckDevice(t, p, count, "after empty_cache")
		// Every held block left is of a segment with a live block.
		for _, seg := range p.Snapshot().Segments {
			var activeIn bool
			for _, b := range seg.Blocks {
				activeIn = activeIn || b.State == mempool.StateActive
			}
			assert.True(t, activeIn, "segment %d of %d bytes is wholly free after empty_cache", seg.ID, seg.Size)
		}
		mustClose(t, live...)
		require.NoError(t, p.FreeHeld())
		assert.Zero(t, p.ManagedBytes())
		assert.Zero(t, count.Stats().Live)
	})
}
