package mempool_test

// Session s38b: the ways a pinned segment leaves a pool (the ladder under
// a Budget, SetLimit, StopHolding, a drop) and a queue's Release racing a
// hand-out, each while a transfer from a pinned block's host bytes is
// pending on a queue the pool knows of. allocator.Pinned's doc: "the pool
// hands the block out again, or frees it, only once those queues'
// commands have completed".

import (
	"runtime"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The out-of-memory ladder under a Budget frees the held pinned segment
// that a transfer of another queue still reads, to make room: the free
// (an unmap) waits for that transfer.
func TestHostileS38bPinnedLadderFreesAfterTransfer(t *testing.T) {
	t.Setenv(mempool.LimitEnv, "")
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	pinned, err := allocator.NewPinned(q)
	require.NoError(t, err)
	count := pooltest.Counting(t, pinned)
	p, err := mempool.New(allocator.NewBudget(count, 10<<10))
	require.NoError(t, err)
	defer func() {
		assert.NoError(t, p.Close())
		assert.Zero(t, pinned.Live())
	}()
	a := mustAlloc(t, p, 4096)
	x := closeInTransfer(t, pinned, a, q2)
	b := mustAlloc(t, p, 8192) // the budget (10 KiB) has room only once a's segment is freed
	defer b.Close()
	assert.Equal(t, int64(1), count.Stats().Frees, "the ladder freed the held segment")
	assert.True(t, x.done(t), "the pinned segment was freed under the transfer from it")
	x.check(t)
}

// SetLimit below the held bytes frees the held pinned segment: only once
// the transfer from it has completed.
func TestHostileS38bPinnedSetLimitFreesAfterTransfer(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, pinned, _, q := s38PinnedPool(t, pp)
		q2 := cltest.SecondQueue(t, q, 0)
		a := mustAlloc(t, p, 4096)
		x := closeInTransfer(t, pinned, a, q2)
		require.NoError(t, p.SetLimit(1))
		assert.Zero(t, pinned.Live(), "SetLimit frees the held pinned buffer")
		assert.True(t, x.done(t), "the pinned segment was freed under the transfer from it")
		x.check(t)
		require.NoError(t, p.SetLimit(0))
	})
}

// After StopHolding, the Close of a block whose transfer is still pending
// on its own queue (On(q2)) frees its segment: only once the transfer has
// completed.
func TestHostileS38bPinnedStopHoldingCloseFreesAfterTransfer(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, pinned, _, q := s38PinnedPool(t, pp)
		q2 := cltest.SecondQueue(t, q, 0)
		require.NoError(t, p.StopHolding())
		a, err := p.On(q2).Allocate(4096)
		require.NoError(t, err)
		x := startPinnedTransfer(t, pinned, a, q2)
		mustClose(t, a)
		assert.Zero(t, pinned.Live(), "Close frees the segment after StopHolding")
		assert.True(t, x.done(t), "the pinned segment was freed under the transfer from it")
		x.check(t)
	})
}

// A pinned block dropped without Close right after a transfer from it is
// enqueued on its queue comes back through its finalizer; the next owner
// gets it only once the transfer has completed.
func TestHostileS38bPinnedDroppedBlockWaitsForTransfer(t *testing.T) {
	p, pinned, _, q := s38PinnedPool(t, peerPolicies[0])
	q2 := cltest.SecondQueue(t, q, 0)
	on2 := p.On(q2)
	var x *pinnedTransfer
	func() {
		a, err := on2.Allocate(4096)
		require.NoError(t, err)
		x = startPinnedTransfer(t, pinned, a, q2)
	}()
	deadline := time.Now().Add(5 * time.Second)
	for p.Stats().Reclaimed == 0 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, int64(1), p.Stats().Reclaimed, "the dropped block came back")
	b := mustAlloc(t, p, 4096) // the allocator's queue, not q2
	defer b.Close()
	x.overwrite(t, pinned, b, "the dropped block came back to a new owner before the transfer from it completed")
	x.check(t)
}

// The queue RecordQueue named is released (its Release finishes the
// transfer) while another goroutine takes the block: no hang, and the
// block is handed out with the transfer done.
func TestHostileS38bPinnedHandoutRacesQueueRelease(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, pinned, _, q := s38PinnedPool(t, pp)
		q2 := cltest.SecondQueue(t, q, 0)
		a := mustAlloc(t, p, 4096)
		x := closeInTransfer(t, pinned, a, q2)
		released := make(chan error, 1)
		go func() { released <- q2.Release() }()
		var b *mempool.PooledBuffer
		var err error
		ok := within(t, "a hand-out racing the Release of the recorded queue", func() { b, err = p.Allocate(4096) })
		require.True(t, ok)
		require.NoError(t, err)
		x.overwrite(t, pinned, b, "the block came back before the transfer from it completed")
		require.NoError(t, <-released)
		x.q = q // q2 is released: read the transfer's result on q
		x.check(t)
		mustClose(t, b)
	})
}
