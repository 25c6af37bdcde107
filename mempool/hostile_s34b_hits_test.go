package mempool_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PASSES: Stats.Hits "requests served by a held block", Misses "requests that
// found no held block that fits": a request served by a segment's free
// tail (a held block, HeldBlocks counts it) is a hit, with no device
// allocation.
func TestHostileS34bHitsOfFreeTail(t *testing.T) {
	for _, v := range s34bVariants() {
		t.Run(v.name, func(t *testing.T) {
			p, q, _ := peerPool(t, v.pp, nil)
			alloc := s34bAllocFn(p, q, v.on)
			a, err := alloc(1000)
			require.NoError(t, err)
			s0 := p.Stats()
			assert.Equal(t, int64(1), s0.Misses)
			assert.Equal(t, int64(0), s0.Hits)
			b, err := alloc(1000)
			require.NoError(t, err)
			s1 := p.Stats()
			if s1.DeviceAllocs == s0.DeviceAllocs {
				assert.Equal(t, int64(1), s1.Hits, "served by a held block with no device allocation: a hit")
				assert.Equal(t, int64(1), s1.Misses)
			} else {
				assert.Equal(t, int64(2), s1.Misses)
			}
			require.NoError(t, a.Close())
			require.NoError(t, b.Close())
			c, err := alloc(1000)
			require.NoError(t, err)
			s2 := p.Stats()
			assert.Equal(t, s1.Hits+1, s2.Hits)
			assert.Equal(t, s2.Hits+s2.Misses, int64(3))
			require.NoError(t, c.Close())
		})
	}
}
