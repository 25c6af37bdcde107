package mempool_test

// Hostile review s45e: the sanitizer's quarantine against calls that are
// no memory pressure at all.

import (
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Review s45e found what these tests describe (in the present tense, as
// found); each failed before its fix in session 45.

// A SetLimit that leaves the pool far within the new limit (or raises
// it) frees nothing, as its doc says ("a limit below the bytes the pool
// manages makes it free held segments"), and is no memory pressure: the
// package doc lets a closed block out of the quarantine early only when
// newer ones push it out, when the pool drains what it sets aside
// (FreeHeld, the out-of-memory ladder, Close), or while a request is on
// the ladder. Yet SetLimit's freeHeldWhile drains the whole quarantine
// before it asks whether anything needs freeing: the closed block goes
// back to the policy, a write through a buffer kept past its Close goes
// unseen, and the next Allocate hands that corrupted block to a correct
// user.
func TestHostileS45eSetLimitWithRoomEmptiesTheQuarantine(t *testing.T) {
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			f := newSanFixture(t, pol.opts...)
			kept := s45eQuarantineOne(t, f)

			// Far more room than the pool manages: nothing to free.
			managed := f.pool.Stats().ManagedBytes
			require.NoError(t, f.pool.SetLimit(1<<30))
			require.Less(t, managed, int64(1<<30))
			assert.Equal(t, 1, mempool.Quarantined(f.pool),
				"SetLimit(1 GiB) with %d bytes managed emptied the quarantine", managed)

			// The bug the sanitizer is for: a write through the kept buffer.
			s45eWriteAfterCloseFound(t, f, kept, "a write after Close, the block closed before a SetLimit with room")
		})
	}
}

// The same through a queue's FreeHeld: QueueAllocator.FreeHeld frees the
// segments "that only the allocator's queue may still use", yet it
// empties the whole quarantine, the blocks of other queues included, and
// a write after Close to a block of the pool's own queue goes unseen
// because some other task freed what its queue held.
func TestHostileS45eOtherQueuesFreeHeldEmptiesTheQuarantine(t *testing.T) {
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			f := newSanFixture(t, pol.opts...)
			q2 := cltest.SecondQueue(t, f.q, 0)
			kept := s45eQuarantineOne(t, f)

			require.NoError(t, f.pool.On(q2).FreeHeld()) // another task's queue: it held nothing
			assert.Equal(t, 1, mempool.Quarantined(f.pool),
				"q2's FreeHeld took a block of the pool's queue out of the quarantine")

			s45eWriteAfterCloseFound(t, f, kept, "a write after Close, the block closed before another queue's FreeHeld")
		})
	}
}

// SanitizerQuarantineBytes' doc: "A block larger than
// SanitizerQuarantineBytes leaves at once: its poison is checked then".
// It never waits in the quarantine, so its bytes are none of the bytes
// that wait, and the blocks that do wait have no reason to leave. Yet
// enter counts the large block's bytes in before it looks for the oldest
// to push out: the quarantine is over its bytes until every block older
// than the large one has left, and the large one then leaves too. One
// Close of a large block empties the whole quarantine, and a write after
// Close to a small block closed just before it goes unseen.
func TestHostileS45eLargeBlockEmptiesTheQuarantine(t *testing.T) {
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			f := newSanFixture(t, pol.opts...)
			big, err := f.pool.Allocate(mempool.SanitizerQuarantineBytes + 1)
			require.NoError(t, err)
			kept := s45eQuarantineOne(t, f)

			require.NoError(t, big.Close()) // leaves at once, as documented
			assert.Equal(t, 1, mempool.Quarantined(f.pool),
				"the large block took the small one out of the quarantine with it")

			s45eWriteAfterCloseFound(t, f, kept, "a write after Close to the small block, closed before the large one")
		})
	}
}

// s45eQuarantineOne closes a block of 4,000 bytes, zeroed, into f's
// quarantine, and returns its buffer, kept past the Close.
func s45eQuarantineOne(t *testing.T, f *sanFixture) *cl.Buffer {
	t.Helper()
	b, err := f.pool.Allocate(4000)
	require.NoError(t, err)
	kept := b.Buffer()
	require.NotNil(t, kept)
	require.NoError(t, f.q.WriteBuffer(kept, 0, make([]byte, 4000)))
	require.NoError(t, b.Close())
	require.Equal(t, 1, mempool.Quarantined(f.pool), "the closed block waits in the quarantine")
	return kept
}

// s45eWriteAfterCloseFound writes through kept and asserts that Findings
// reports one write after Close.
func s45eWriteAfterCloseFound(t *testing.T, f *sanFixture, kept *cl.Buffer, what string) {
	t.Helper()
	require.NoError(t, f.q.WriteBuffer(kept, 8, []byte{1, 2, 3, 4}))
	got := f.pool.Findings()
	assert.Equal(t, 1, findingKinds(got)[mempool.WriteAfterClose], "%s: %v", what, got)
}
