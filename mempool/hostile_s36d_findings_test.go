package mempool_test

import (
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ab33435: Findings checks a quarantined block whose queue's Release is
// under way once that Release returns. A Release that has begun but waits
// for a Hold of the queue (cl's Release: "once every Hold of it has
// ended") makes TryHold fail, but released is not yet set: Finished
// returns false at once, without waiting, and the second pass's TryHold
// fails again, so the block is skipped and its write after close missed.
func TestHostileS36dFindingsSkipsBlockWhoseReleaseWaitsForAHold(t *testing.T) {
	out := &syncBuffer{}
	f := newFixture(t, nil, mempool.WithSanitizer(), mempool.WithSanitizerOutput(out))
	qa, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
	require.NoError(t, err)

	const size = 4000
	b, err := f.pool.On(qa).Allocate(size)
	require.NoError(t, err)
	id, base, off := b.ID(), b.Base(), b.Offset()
	require.NoError(t, b.Close()) // poisoned on qa, in quarantine

	ev, err := qa.EnqueueFillBuffer(base, []byte{0x5a}, off, 16)
	require.NoError(t, err)
	require.NoError(t, ev.Release())
	require.NoError(t, qa.Finish())

	require.True(t, qa.Hold()) // another goroutine's use of the queue
	released := make(chan error, 1)
	go func() { released <- qa.Release() }()
	for qa.TryHold() { // until the Release is under way (waiting for the hold)
		qa.Unhold()
		time.Sleep(time.Millisecond)
	}
	firstCh := make(chan []mempool.Finding, 1)
	go func() { firstCh <- f.pool.Findings() }()
	var first []mempool.Finding
	returnedEarly := false
	select {
	case first = <-firstCh:
		returnedEarly = true
	case <-time.After(300 * time.Millisecond):
	}
	qa.Unhold()
	require.NoError(t, <-released)
	if !returnedEarly {
		first = <-firstCh
	}
	second := f.pool.Findings()
	found := func(fs []mempool.Finding) bool {
		for _, g := range fs {
			if g.Kind == mempool.WriteAfterClose && g.BlockID == id {
				return true
			}
		}
		return false
	}
	t.Logf("Findings returned before the hold ended: %v", returnedEarly)
	require.True(t, found(second), "control: the write after close is found once the queue is released: %v", second)
	assert.True(t, found(first), "Findings, called while the block's queue's Release waited for a Hold, skipped the block in quarantine: %v", first)
}
