package mempool

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// blockSizeOf, the queue caches' direct call, answers as the policy's
// BlockSize does, for both policies, every leading-bit count and a spread
// of sizes. It needs no OpenCL.
func TestBlockSizeOfIsThePolicys(t *testing.T) {
	for _, arena := range []bool{false, true} {
		for lb := 0; lb <= MaxLeadingBits; lb++ {
			c := defaultConfig()
			c.arena, c.leadingBits = arena, lb
			p := &Pool{arena: arena, leadingBits: lb}
			p.core.init(c, 1024, 0, 0, true)
			for size := int64(0); size < 1<<22; size = size*5/4 + 1 {
				require.Equal(t, p.pol.BlockSize(size), p.blockSizeOf(size), "arena %v, lb %d, size %d", arena, lb, size)
			}
		}
	}
}

// A pool that cannot tell its context parks no sub-buffer: the device may
// be one that crashes on partly overlapping ones (review s34c).
func TestOverlapSafeNeedsAKnownContext(t *testing.T) {
	require.False(t, overlapSafe(nil))
}
