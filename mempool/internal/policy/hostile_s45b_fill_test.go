package policy_test

import (
	"testing"

	"github.com/clpool/clpool/mempool/internal/policy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FillDivisor's doc: "each segment added in a row while it fills, for
// requests no larger than the one that began the run, holds twice the
// blocks of the request that makes it as the one before (1, 2, 4, ...)",
// and Add ends the run at a larger request (fillRun, fillBlock = 0, n).
// But segmentSize sizes that larger request's segment with the run's
// count (fillSize never compares n with fillBlock): after 100 arrays of
// 700 KiB allocated first, a 900 KiB array gets a segment of five of its
// blocks (4,608,000 bytes), where the same free set with the fill ended
// gives it the growth step (1,638,400): 2.8x the segment, for a request
// the run is not for.
func TestHostileS45bFillSizesALargerRequestByTheRun(t *testing.T) {
	g := newGrower(policy.DefaultPreferredSegment)
	var last *policy.Block[int]
	for range 100 {
		last = g.get(700 << 10)
	}
	require.NoError(t, g.p.Check())
	const larger = 900 << 10
	during := g.p.SegmentSize(larger)
	// End the fill without changing the free set: the same block given
	// back (it waits unmerged) and taken again.
	require.Nil(t, g.p.Put(last))
	require.Same(t, last, g.p.Get(700<<10))
	require.NoError(t, g.p.Check())
	ended := g.p.SegmentSize(larger)
	assert.Equal(t, ended, during,
		"a %d-byte request, larger than the 700 KiB ones of the fill run: its segment while the pool fills, against the same pool with the fill ended", larger)
}

// A preferred segment size that is not a multiple of the alignment (the
// pool passes 256 MiB; a caller of NewArenas may not) capped the growth
// step at it, and the segments it made were unaligned: Check reported
// "not aligned to 4096" (review s45b). NewArenas now rounds it down to
// the growth unit.
func TestHostileS45bPreferredSizeOffTheAlignment(t *testing.T) {
	g := &grower{p: policy.NewArenas[int](4096, 4, 0, 3<<20+512)}
	for range 400 { // 120 MB: the step reaches the preferred size
		g.get(300 << 10)
		require.NoError(t, g.p.Check())
	}
}
