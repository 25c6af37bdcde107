package mempool_test

import (
	"testing"

	_ "github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PASSES: Stats.Fragmentation: "0 when the held memory is one block (or none)".
// A block given back on a queue waits in the queue's cache, where it counts
// as held (HeldBlocks 1, HeldBytes its size): the held memory is one block.
func TestHostileS34bFragmentationOfOneCachedBlock(t *testing.T) {
	for _, v := range s34bVariants() {
		t.Run(v.name, func(t *testing.T) {
			p, q, _ := peerPool(t, v.pp, nil)
			alloc := s34bAllocFn(p, q, v.on)
			b, err := alloc(1000)
			require.NoError(t, err)
			require.NoError(t, b.Close())
			s := p.Stats()
			if v.pp.arena {
				// The arena's block sits in a segment with its free tail:
				// two held blocks at most, the cached one and the rest.
				t.Logf("arena: held %d blocks, %d bytes, fragmentation %v", s.HeldBlocks, s.HeldBytes, s.Fragmentation)
				return
			}
			require.Equal(t, 1, s.HeldBlocks)
			var cached int64
			for _, qs := range s.Queues {
				cached += qs.Cached
			}
			t.Logf("held %d block (%d bytes), %d cached, fragmentation %v", s.HeldBlocks, s.HeldBytes, cached, s.Fragmentation)
			assert.Zero(t, s.Fragmentation, "the held memory is one block")
			_, ok := p.LargestHeldBin()
			assert.True(t, ok, "a block is held")
		})
	}
}
