package mempool_test

// Session s38 ports of CuPy's tests/cupy_tests/cuda_tests/test_memory.py
// (TestSingleDeviceMemoryPool's *_stream tests, free_all_blocks on every
// stream, set_limit below what the pool holds) and of PyOpenCL's
// MemoryPool counters (held_blocks, active_blocks, managed_bytes,
// active_bytes, stop_holding) not yet in peers_port_test.go, against
// clpool's queues (a stream is a command queue, Pool.On) and their
// caches: each port first lets a queue's cache take blocks, since that is
// where the pool's counters and the device's can come apart.

import (
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// CuPy test_used_bytes_stream, test_free_bytes_stream,
// test_total_bytes_stream: a block given back on the default stream, then
// a smaller request on another: used is the new request's, and used +
// free == total. (CuPy keeps streams' free lists apart, so its total is
// 6 units; clpool hands blocks over between queues, documented, so the
// port checks the sums, and with exact bins, where 2u is a bin of its
// own, CuPy's figures.)
func TestPeersS38CupyBytesStream(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, count := peerPool(t, pp, nil)
		u := peerUnit(q)
		on2 := p.On(cltest.SecondQueue(t, q, 0))
		mustClose(t, mustAlloc(t, p, 4*u))
		p2 := mustAlloc(t, on2, 2*u)
		s := p.Stats()
		assert.Equal(t, 2*u, s.ActiveBytes, "used_bytes")
		assert.Equal(t, 1, s.ActiveBlocks)
		assert.Equal(t, s.ManagedBytes, s.AllocatedBytes.All.Current+s.HeldBytes, "used + free == total")
		if !pp.arena {
			blk := func(n int64) int64 { return mempool.AllocSize(mempool.BinNumber(n*u, 4), 4) }
			assert.Equal(t, blk(4), s.HeldBytes, "free_bytes")
			assert.Equal(t, blk(4)+blk(2), s.ManagedBytes, "total_bytes")
		}
		s38CheckDevice(t, p, count, "p2 live")
		mustClose(t, p2)
	})
}

// CuPy test_free_all_blocks_all_streams: blocks given back on two streams;
// free_all_blocks() frees both, and the next request on either stream is
// new memory. The blocks are small, so they wait in their queues' caches.
func TestPeersS38CupyFreeAllBlocksAllStreams(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, count := peerPool(t, pp, nil)
		u := peerUnit(q)
		on1, on2 := p.On(q), p.On(cltest.SecondQueue(t, q, 0))
		b1 := mustAlloc(t, on1, 4*u)
		b2 := mustAlloc(t, on2, 4*u)
		mustClose(t, b1, b2)
		require.NoError(t, p.FreeHeld())
		assert.Zero(t, p.HeldBlocks(), "n_free_blocks")
		assert.Zero(t, p.ManagedBytes(), "total_bytes")
		assert.Zero(t, count.Stats().Live)
		allocs := count.Stats().Allocs
		b3 := mustAlloc(t, on1, 4*u)
		b4 := mustAlloc(t, on2, 4*u)
		assert.Greater(t, count.Stats().Allocs, allocs, "new memory")
		mustClose(t, b3, b4)
	})
}

// CuPy test_free_all_blocks_stream in an arena: blocks large enough to be
// segments of their own, given back on two streams; free_all_blocks of
// one stream frees only its segment, and the other stream's serves its
// next request without a device allocation.
func TestPeersS38CupyFreeAllBlocksStreamArena(t *testing.T) {
	p, q, count := peerPool(t, peerPolicies[1], nil)
	on1, on2 := p.On(q), p.On(cltest.SecondQueue(t, q, 0))
	const size = 8 << 20
	b1 := mustAlloc(t, on1, size)
	b2 := mustAlloc(t, on2, size)
	require.NotSame(t, b1.Base(), b2.Base(), "a segment each")
	base2 := b2.Base()
	mustClose(t, b1, b2)
	managed := p.ManagedBytes()
	require.NoError(t, on1.FreeHeld())
	assert.Less(t, p.ManagedBytes(), managed, "the first queue's segment is freed")
	assert.GreaterOrEqual(t, p.ManagedBytes(), int64(size), "the second queue's stays")
	allocs := count.Stats().Allocs
	b4 := mustAlloc(t, on2, size)
	assert.Same(t, base2, b4.Base(), "the second queue's segment serves it")
	assert.Equal(t, allocs, count.Stats().Allocs)
	mustClose(t, b4)
	require.NoError(t, p.FreeHeld())
	assert.Zero(t, p.ManagedBytes())
}

// CuPy test_free_stream (the preference, not the separation): with a
// block given back on each of two queues, each queue's next request of
// the size takes its own queue's block, with no handover.
func TestPeersS38CupyEachStreamItsOwnBlock(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, _ := peerPool(t, pp, nil)
		u := peerUnit(q)
		on1, on2 := p.On(q), p.On(cltest.SecondQueue(t, q, 0))
		a := mustAlloc(t, on1, 4*u)
		b := mustAlloc(t, on2, 4*u)
		aBase, aOff, bBase, bOff := a.Base(), a.Offset(), b.Base(), b.Offset()
		mustClose(t, a, b)
		before := p.Stats()
		b2 := mustAlloc(t, on2, 4*u)
		a2 := mustAlloc(t, on1, 4*u)
		assert.True(t, b2.Base() == bBase && b2.Offset() == bOff, "the second queue takes its own block")
		assert.True(t, a2.Base() == aBase && a2.Offset() == aOff, "the first queue takes its own block")
		after := p.Stats()
		var hand int64
		for i := range after.Queues {
			hand += after.Queues[i].Handovers
			if i < len(before.Queues) {
				hand -= before.Queues[i].Handovers
			}
		}
		assert.Zero(t, hand, "no handover")
		mustClose(t, a2, b2)
	})
}

// PyOpenCL active_blocks, held_blocks, active_bytes, managed_bytes (and
// CuPy's used_bytes, n_free_blocks): read on their own, right after
// requests that a queue's cache served, they say what is in use now, as
// Stats does.
func TestPeersS38PyOpenCLCountersAfterQueueHits(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, _ := peerPool(t, pp, nil)
		on2 := p.On(cltest.SecondQueue(t, q, 0))
		warm := mustAllocN(t, on2, 3, 4096)
		mustClose(t, warm...)
		_ = p.Stats()
		live := mustAllocN(t, on2, 3, 4096)
		// No Stats in between: the single counters on their own.
		assert.Equal(t, 3, p.ActiveBlocks(), "active_blocks")
		assert.Equal(t, int64(3*4096), p.ActiveBytes(), "active_bytes")
		held, heldBytes, managed := p.HeldBlocks(), p.HeldBytes(), p.ManagedBytes()
		s := p.Stats()
		assert.Equal(t, s.HeldBlocks, held, "held_blocks")
		assert.Equal(t, s.HeldBytes, heldBytes)
		assert.Equal(t, s.ManagedBytes, managed, "managed_bytes")
		mustClose(t, live...)
		assert.Zero(t, p.ActiveBlocks(), "active_blocks after the closes")
		assert.Zero(t, p.ActiveBytes())
	})
}

// PyOpenCL stop_holding: after it, a block given back is freed at once
// (exact bins) or with its segment once that is wholly free (arena), also
// when it was allocated on a queue whose cache would keep it.
func TestPeersS38PyOpenCLStopHoldingQueues(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, count := peerPool(t, pp, nil)
		on2 := p.On(cltest.SecondQueue(t, q, 0))
		// Blocks waiting in the queue's cache before StopHolding.
		warm := mustAllocN(t, on2, 4, 4096)
		mustClose(t, warm...)
		require.NoError(t, p.StopHolding())
		assert.Zero(t, p.HeldBlocks(), "stop_holding frees what is held, cached blocks included")
		assert.Zero(t, p.ManagedBytes())
		assert.Zero(t, count.Stats().Live)
		assert.False(t, p.Stats().Holding)
		for i := range 3 {
			b := mustAlloc(t, on2, 4096)
			require.NoError(t, b.Close())
			assert.Zero(t, p.HeldBlocks(), "close %d after stop_holding: nothing held", i)
			assert.Zero(t, p.ManagedBytes(), "close %d after stop_holding: freed", i)
			assert.Zero(t, count.Stats().Live, "close %d after stop_holding: on the device too", i)
		}
	})
}

// CuPy set_limit below what the pool holds (and the doc of SetLimit):
// held memory is freed until the pool is within the limit, cached blocks
// of every queue included; with nothing in use, the pool then holds
// nothing over the limit.
func TestPeersS38CupySetLimitBelowCached(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, count := peerPool(t, pp, nil)
		ons := []*mempool.QueueAllocator{p.On(q), p.On(cltest.SecondQueue(t, q, 0))}
		var bs []*mempool.PooledBuffer
		for i := range 12 {
			b, err := ons[i%2].Allocate(int64(8192 * (1 + i%3)))
			require.NoError(t, err)
			bs = append(bs, b)
		}
		mustClose(t, bs...)
		require.NotZero(t, p.ManagedBytes())
		require.NoError(t, p.SetLimit(4096))
		assert.LessOrEqual(t, p.ManagedBytes(), int64(4096), "within the limit once nothing is in use")
		s38CheckDevice(t, p, count, "after set_limit")
		require.NoError(t, p.SetLimit(0))
	})
}

// CuPy test_alloc_limit across streams: under a limit, memory given back
// on one queue (and waiting in its cache) makes room for a request of
// another size on another queue.
func TestPeersS38CupyLimitRoomFromOtherQueue(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		const limit = 1 << 20
		p, q, count := peerPool(t, pp, nil, mempool.WithLimit(limit))
		on1, on2 := p.On(q), p.On(cltest.SecondQueue(t, q, 0))
		var bs []*mempool.PooledBuffer
		for {
			b, err := on2.Allocate(32 << 10)
			if err != nil {
				require.ErrorIs(t, err, mempool.ErrOutOfMemory)
				break
			}
			bs = append(bs, b)
			require.Less(t, len(bs), 100)
		}
		require.NotEmpty(t, bs)
		mustClose(t, bs...)
		b, err := on1.Allocate(512 << 10)
		require.NoError(t, err, "the other queue's held blocks make room")
		assert.LessOrEqual(t, p.ManagedBytes(), int64(limit))
		s38CheckDevice(t, p, count, "after")
		require.NoError(t, b.Close())
	})
}

// CuPy's OutOfMemoryError message and torch's OOM message say what is in
// use: the error's counts are the pool's at the refusal, even right after
// hits that a queue's cache served.
func TestPeersS38CupyOOMErrorCountsAfterQueueHits(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		const budget = 8 << 20
		p, q, _ := peerPool(t, pp, func(a allocator.Allocator) allocator.Allocator {
			return allocator.NewBudget(a, budget)
		})
		on2 := p.On(cltest.SecondQueue(t, q, 0))
		warm := mustAllocN(t, on2, 5, 4096)
		mustClose(t, warm...)
		_ = p.Stats()
		live := mustAllocN(t, on2, 5, 4096)
		_, err := p.On(q).Allocate(budget)
		require.ErrorIs(t, err, mempool.ErrOutOfMemory)
		var oom *mempool.OutOfMemoryError
		require.ErrorAs(t, err, &oom)
		assert.Equal(t, 5, oom.ActiveBlocks, "blocks in use at the refusal")
		assert.Equal(t, int64(5*4096), oom.ActiveBytes)
		s := p.Stats()
		assert.Equal(t, s.ManagedBytes, oom.ManagedBytes)
		assert.Equal(t, s.HeldBlocks, oom.HeldBlocks)
		mustClose(t, live...)
	})
}
