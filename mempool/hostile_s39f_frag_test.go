package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Passing (new coverage: cc1f69f's Block.Run with cached blocks of
// several queues in one segment, interleaved, and a sanitized arena
// pool, whose quarantine Stats counts as cached): Stats.Fragmentation is
// "0 when the held memory is one block (or none)", and, with the arena,
// "a block in a queue's cache counts with its held neighbours, as one
// range". An idle pool of one segment holds one range, whoever's caches
// (or quarantine) its blocks wait in; Fragmentation and the snapshot's
// largest range agree.
func TestHostileS39fFragmentationOneRangeAcrossQueuesAndQuarantine(t *testing.T) {
	t.Run("two queues' caches, interleaved", func(t *testing.T) {
		p, q, _ := peerPool(t, peerPolicies[1], nil)
		q2, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
		require.NoError(t, err)
		defer func() { require.NoError(t, q2.Release()) }()
		on1, on2 := p.On(q), p.On(q2)
		var bs []*mempool.PooledBuffer
		for i := range 8 {
			on := on1
			if i%2 == 1 {
				on = on2
			}
			bs = append(bs, mustAlloc(t, on, 4096))
		}
		// Close every other block first: a cached block between two
		// active ones, then the rest.
		for i := 0; i < len(bs); i += 2 {
			require.NoError(t, bs[i].Close())
		}
		for i := 1; i < len(bs); i += 2 {
			require.NoError(t, bs[i].Close())
		}
		s := p.Stats()
		r := s39HeldRuns(p.Snapshot())
		require.Equal(t, 1, r.segments)
		assert.Equal(t, 1, r.runs, "one unused range")
		assert.Zero(t, s.Fragmentation, "one segment, nothing in use: one range (%d held, %d bytes)", s.HeldBlocks, s.HeldBytes)
		require.NoError(t, p.FreeHeld())
	})
	t.Run("sanitized arena, quarantine", func(t *testing.T) {
		p, q, _ := peerPool(t, peerPolicies[1], nil, mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil))
		on := p.On(q)
		bs := mustAllocN(t, on, 6, 4096)
		for i := 0; i < len(bs); i += 2 {
			require.NoError(t, bs[i].Close())
		}
		mid := p.Stats()
		mr := s39HeldRuns(p.Snapshot())
		if mr.heldBytes > 0 {
			assert.InDelta(t, 1-float64(mr.largestRun)/float64(mr.heldBytes), mid.Fragmentation, 1e-9, "Fragmentation vs the snapshot's largest range, blocks in use between quarantined ones")
		}
		for i := 1; i < len(bs); i += 2 {
			require.NoError(t, bs[i].Close())
		}
		s := p.Stats()
		r := s39HeldRuns(p.Snapshot())
		require.Equal(t, 1, r.segments)
		assert.Equal(t, 1, r.runs, "one unused range")
		assert.Zero(t, s.Fragmentation, "one segment, nothing in use, blocks in quarantine: one range (%d held, %d bytes)", s.HeldBlocks, s.HeldBytes)
		assert.Empty(t, p.Findings())
	})
}
