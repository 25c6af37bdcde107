package mempool_test

// Session s38b: the figures of a pool over pinned host memory
// (mempool.New(pinned)), whose reuses wait on the host (clFinish) rather
// than through markers and barriers. Stats.Queues' doc (QueueStats) and
// package metrics' help say what each figure counts.

import (
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s38bQueueStats returns the line of Stats.Queues for q; it fails the
// test if there is none.
func s38bQueueStats(t *testing.T, p *mempool.Pool, q *cl.CommandQueue) mempool.QueueStats {
	t.Helper()
	for _, qs := range p.Stats().Queues {
		if qs.Queue == q {
			return qs
		}
	}
	require.FailNow(t, "no line of Stats.Queues for the queue")
	return mempool.QueueStats{}
}

// QueueStats.Handovers: "Requests made on the queue, those served by a
// held block, and those whose block was last used on another queue".
// A pinned block given back on the allocator's queue and taken by
// On(q2) is such a request: q2's line must count it, as in any other
// pool (here, where the pool waits with clFinish rather than a barrier,
// the request still was a handover from another queue).
func TestHostileS38bPinnedHandoverCountedOnRequestingQueue(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, _, _, q := s38PinnedPool(t, pp)
		q2 := cltest.SecondQueue(t, q, 0)
		on2 := p.On(q2)
		a := mustAlloc(t, p, 4096) // on the allocator's queue q
		base, off := a.Base(), a.Offset()
		mustClose(t, a)
		b, err := on2.Allocate(4096)
		require.NoError(t, err)
		defer b.Close()
		require.True(t, b.Base() == base && b.Offset() == off, "the block given back on q serves q2's request")
		s2 := s38bQueueStats(t, p, q2)
		assert.Equal(t, int64(1), s2.Requests)
		assert.Equal(t, int64(1), s2.Hits)
		assert.Equal(t, int64(1), s2.Handovers,
			"q2's request took a block last used on q: QueueStats.Handovers (metrics: clpool_queue_handovers_total) counts it")
	})
}

// The same comparison with a plain pool of exact bins over an Immediate
// allocator, as a reference: a block last used on q taken by On(q2)
// counts one handover on q2's line.
func TestHostileS38bPlainHandoverCountedOnRequestingQueue(t *testing.T) {
	p, q, _ := peerPool(t, peerPolicies[0], nil)
	q2 := cltest.SecondQueue(t, q, 0)
	on2 := p.On(q2)
	a := mustAlloc(t, p, 4096)
	base, off := a.Base(), a.Offset()
	mustClose(t, a)
	b, err := on2.Allocate(4096)
	require.NoError(t, err)
	defer b.Close()
	require.True(t, b.Base() == base && b.Offset() == off, "the block given back on q serves q2's request")
	assert.Equal(t, int64(1), s38bQueueStats(t, p, q2).Handovers)
}

// QueueStats: in a pool over pinned memory, HostWaits counts the host's
// waits for the queue itself. A reuse on the same in-order queue waits
// for it (the host touches the bytes), enqueues no marker, and is no
// handover.
func TestHostileS38bPinnedSameQueueReuseIsAHostWait(t *testing.T) {
	p, _, _, q := s38PinnedPool(t, peerPolicies[0])
	for range 5 {
		mustClose(t, mustAlloc(t, p, 4096))
	}
	s := s38bQueueStats(t, p, q)
	assert.Equal(t, int64(5), s.Requests)
	assert.Zero(t, s.Markers, "no marker is enqueued by a pinned pool's reuse")
	assert.Zero(t, s.Handovers, "a reuse on the block's own queue is no handover")
	assert.Equal(t, int64(4), s.HostWaits, "each reuse waited for the queue")
}

// "Such a pool has no queue caches": a pinned pool never caches a block
// in a queue's cache, on the allocator's queue or another.
func TestHostileS38bPinnedHasNoQueueCaches(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, _, _, q := s38PinnedPool(t, pp)
		q2 := cltest.SecondQueue(t, q, 0)
		on2 := p.On(q2)
		var bs []*mempool.PooledBuffer
		for range 4 {
			bs = append(bs, mustAlloc(t, p, 256))
			b, err := on2.Allocate(256)
			require.NoError(t, err)
			bs = append(bs, b)
		}
		mustClose(t, bs...)
		for _, qs := range p.Stats().Queues {
			assert.Zero(t, qs.Cached, "queue %v caches blocks", qs.Queue)
		}
		if !pp.arena { // the arena merges the blocks given back
			assert.Equal(t, 8, p.HeldBlocks())
		}
	})
}

// After pinned reuses that waited for a pending transfer, and FreeHeld
// (which waits for it too), the pool's figures agree with the allocator's
// count: device allocations and frees, active and held blocks.
func TestHostileS38bPinnedFiguresAfterWaitedReuse(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, pinned, count, q := s38PinnedPool(t, pp)
		q2 := cltest.SecondQueue(t, q, 0)
		a := mustAlloc(t, p, 4096)
		x := closeInTransfer(t, pinned, a, q2)
		b := mustAlloc(t, p, 4096)
		c := mustAlloc(t, p, 100)
		assert.Equal(t, int64(4196), p.ActiveBytes())
		assert.Equal(t, 2, p.ActiveBlocks())
		mustClose(t, b, c)
		x.check(t)
		require.NoError(t, p.FreeHeld())
		m := p.MemoryStats()
		cs := count.Stats()
		assert.Equal(t, cs.Allocs, m["num_device_alloc"])
		assert.Equal(t, cs.Frees, m["num_device_free"])
		assert.Zero(t, p.HeldBlocks())
		assert.Zero(t, p.ActiveBytes())
		assert.Zero(t, m["allocated_bytes.all.current"])
		assert.Zero(t, pinned.Live())
		pooltest.CheckStats(t, p.Stats())
	})
}
