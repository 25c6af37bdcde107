package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PASSES (port of torch's max_split_size_mb statistics (oversize_allocations,
// oversize_segments) through reset_peak_memory_stats,
// reset_accumulated_memory_stats and empty_cache.
func TestHostileS34bOversizeStats(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(map[bool]string{false: "pool", true: "on"}[on], func(t *testing.T) {
			p, q, _ := peerPlainPool(t, peerPolicies[1], nil, mempool.WithMaxSplitSize(1<<20))
			alloc := s34bAllocFn(p, q, on)
			a, err := alloc(2 << 20)
			require.NoError(t, err)
			b, err := alloc(3 << 20)
			require.NoError(t, err)
			c, err := alloc(1000) // not oversize
			require.NoError(t, err)
			s := p.Stats()
			assert.Equal(t, mempool.Stat{Current: 2, Peak: 2, Allocated: 2}, s.OversizeAllocations)
			assert.Equal(t, mempool.Stat{Current: 2, Peak: 2, Allocated: 2}, s.OversizeSegments)
			require.NoError(t, a.Close())
			s = p.Stats()
			assert.Equal(t, mempool.Stat{Current: 1, Peak: 2, Allocated: 2, Freed: 1}, s.OversizeAllocations)
			assert.Equal(t, mempool.Stat{Current: 2, Peak: 2, Allocated: 2}, s.OversizeSegments, "a held oversize segment is still a segment")
			p.ResetPeak()
			s = p.Stats()
			assert.Equal(t, int64(1), s.OversizeAllocations.Peak)
			assert.Equal(t, int64(2), s.OversizeSegments.Peak)
			m := p.MemoryStats()
			assert.Equal(t, int64(1), m["oversize_allocations.peak"])
			assert.Equal(t, int64(1<<20), m["max_split_size"])
			p.ResetAccumulated()
			s = p.Stats()
			assert.Equal(t, mempool.Stat{Current: 1, Peak: 1}, s.OversizeAllocations)
			assert.Equal(t, mempool.Stat{Current: 2, Peak: 2}, s.OversizeSegments)
			require.NoError(t, p.FreeHeld())
			s = p.Stats()
			assert.Equal(t, mempool.Stat{Current: 1, Peak: 2, Freed: 1}, s.OversizeSegments, "empty_cache frees the held oversize segment")
			// Allocation stats include the oversize blocks.
			assert.Equal(t, int64(2), s.Allocation.All.Current)
			assert.Equal(t, int64(3<<20+1000), s.RequestedBytes.All.Current)
			require.NoError(t, b.Close())
			require.NoError(t, c.Close())
			s = p.Stats()
			assert.Equal(t, mempool.Stat{Current: 0, Peak: 1, Freed: 1}, s.OversizeAllocations)
			// A 1.5 MiB request takes the 3 MiB oversize segment held (torch takes
			// an oversize block within 20 MiB of the request) or a new one: either
			// way it counts as oversize.
			d, err := alloc(3 << 19)
			require.NoError(t, err)
			s = p.Stats()
			assert.Equal(t, int64(1), s.OversizeAllocations.Current)
			require.NoError(t, d.Close())
		})
	}
}
