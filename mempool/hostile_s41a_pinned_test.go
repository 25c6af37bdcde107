package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PASSES (regression guard): the package doc's pinned pool: "a block that
// commands may still use when it was closed (its queue's ... and
// RecordQueue's) is handed out again only once the host has waited for
// those queues ... Stats.Queues counts each wait as a host wait of the
// queue waited for, and a handover of the asking queue if another queue
// used the block." A block of q, also used on q2 (RecordQueue), reused by
// pool.Allocate (q): a host wait on each of q and q2, and a handover of q.
func TestS41aPinnedRecordQueueWaitsForEachQueue(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, _, _, q := s38PinnedPool(t, pp)
		q2 := cltest.SecondQueue(t, q, 0)
		p.On(q2) // q2's line exists before
		a := mustAlloc(t, p, 4096)
		base, off := a.Base(), a.Offset()
		require.NoError(t, a.RecordQueue(q2))
		mustClose(t, a)
		before1, before2 := s38bQueueStats(t, p, q), s38bQueueStats(t, p, q2)
		b := mustAlloc(t, p, 4096)
		defer mustClose(t, b)
		require.True(t, b.Base() == base && b.Offset() == off, "the block is reused")
		s1, s2 := s38bQueueStats(t, p, q), s38bQueueStats(t, p, q2)
		assert.Equal(t, int64(1), s1.HostWaits-before1.HostWaits, "a host wait for q")
		assert.Equal(t, int64(1), s2.HostWaits-before2.HostWaits, "a host wait for q2, which RecordQueue named")
		assert.Equal(t, int64(1), s1.Handovers-before1.Handovers, "another queue (q2) used the block: a handover of q")
	})
}
