package mempool_test

import (
	"fmt"
	"testing"

	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/require"
)

// PASSES (RMM's pool: filled with one size up to its limit, then all
// given back, it serves one request of (nearly) the whole limit).
func TestHostileS34bExploreCapacity(t *testing.T) {
	for _, v := range s34bVariants() {
		for _, n := range []int64{5000, 100000, 300 << 10} { // 8 and 600 bytes held the suite 50 s for nothing more
			t.Run(fmt.Sprintf("%s/%d", v.name, n), func(t *testing.T) {
				const limit = 2 << 20
				p, q, _ := peerPool(t, v.pp, nil, mempool.WithLimit(limit))
				alloc := s34bAllocFn(p, q, v.on)
				var bufs []*mempool.PooledBuffer
				for {
					b, err := alloc(n)
					if err != nil {
						break
					}
					bufs = append(bufs, b)
				}
				s := p.Stats()
				t.Logf("%d blocks of %d: %d bytes requested, managed %d, held %d (%d), segments %d", len(bufs), n, int64(len(bufs))*n, s.ManagedBytes, s.HeldBytes, s.HeldBlocks, s.Segment.All.Current)
				for _, b := range bufs {
					require.NoError(t, b.Close())
				}
				big := int64(limit)
				if !v.pp.arena {
					big = limit * 7 / 8
				}
				b, err := alloc(big)
				require.NoError(t, err, "all given back, a request of the whole limit")
				require.NoError(t, b.Close())
			})
		}
	}
}
