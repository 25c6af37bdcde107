package mempool_test

// Hostile review s40e: the last rung counts the segments a request's own
// final decide freed as a change since its refusal, and asks the device
// again with nothing changed (s40c's own-unreserve finding, for frees).

import (
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A pool (exact bins) over a device; blocks A and Y active; request R is
// allocating a segment (gated: slow), then the device is full (every
// later allocation refused, as a device at its end). Request W is refused
// by the device, goes down the ladder and waits on the last rung for R's
// segment. Meanwhile the user closes Y: a wholly free segment, a change.
// W's round frees it with its new segment's try, and the device refuses
// again. From then on nothing changes (R is still on its way, nothing
// freed or closed): W should fail. Instead the next round counts W's own
// free of Y (a batch of frees ended after the decision recorded
// freesSeen) as memory given back "since the refusal", and asks the
// device again: one more device allocation refused, one more OOMRetry,
// and half a second more of waiting, with nothing changed.
//
// Doc: inflight.go finalRounds ("Each round needs a change since the last
// refusal"); doc.go step 7 ("if anything came back or was freed since the
// refusal"); stats.go OOMRetries. Cause (guess): core.decide records
// lad.freesSeen (core.go:126) before serve frees the decision's own
// segments (ladder.go:87, freeFor -> freeSegments -> deviceFreed bumps
// freeBatches), so rungFinal's `p.l.freeBatches > lad.freesSeen`
// (ladder.go:262) is true after every round that freed something.
func TestS40eOwnFinalFreeCountsAsChange(t *testing.T) {
	size := int64(1 << 20) // a block larger than a queue cache holds: Y goes to the policy at its Close
	g := newGated()
	calls := &s40cCalls{}
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator {
		g.Allocator = a
		calls.Allocator = g
		return calls
	})
	a, err := f.pool.Allocate(size)
	require.NoError(t, err)
	y, err := f.pool.Allocate(size)
	require.NoError(t, err)
	open := g.hold()
	defer func() {
		if open != nil {
			open()
		}
	}()
	r := heldInAllocator(t, f.pool, g, 2*size) // another bin: R's segment never serves W
	g.refuse.Store(1 << 20)                    // the device is full from now on
	w := downToLastRung(f.pool, size/2)        // another bin again
	if w.returned(0) {
		t.Skipf("W returned before Y's Close (%v): nothing to test", w.err)
	}
	retries0, calls0 := f.pool.Stats().OOMRetries, calls.n.Load()
	require.NoError(t, y.Close()) // a wholly free segment: one change
	wb, wErr := w.result(t, "W")
	if wErr == nil {
		require.NoError(t, wb.Close())
	}
	s := f.pool.Stats()
	asked, retries := calls.n.Load()-calls0, s.OOMRetries-retries0
	t.Logf("after Y's Close: %d device allocations asked, %d OOMRetries, %d device frees", asked, retries, s.DeviceFrees)
	g.refuse.Store(0)
	open()
	open = nil
	rb, rErr := r.result(t, "R")
	require.NoError(t, rErr)
	require.ErrorIs(t, wErr, mempool.ErrOutOfMemory)
	assert.Equal(t, int64(1), s.DeviceFrees, "Y's segment freed by W's round")
	assert.LessOrEqual(t, asked, int64(1), "device allocations W asked for after one change (Y closed)")
	assert.LessOrEqual(t, retries, int64(1), "OOMRetries after one change")
	require.NoError(t, rb.Close())
	require.NoError(t, a.Close())
}
