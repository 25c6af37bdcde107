package policy_test

// Hostile review, round 4, of the arena policy (Arenas): each test failed
// on the code it was written against, and shows a defect since fixed.

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/mempool/internal/policy"
)

// A max split size below the alignment (mempool.WithMaxSplitSize accepts
// any positive size: 256, or 2048 on a device of 4 KiB alignment) makes
// tiny requests oversize. GetOn sends them down the tiny path before it
// looks at Oversize, but NewSegment/Add mark their segment Oversize: its
// one block is never split and never indexed, so no tiny request ever
// takes it back (only GetWhole would, and the tiny path never calls it),
// and BeforeGrow frees nothing for a tiny request. Every allocation of a
// scalar then takes a new segment, each sized by the tiny segments'
// growing total: 40 alloc/free rounds of one 4-byte request held ~1.9 GB.
func TestR4TinyRequestUnderSmallMaxSplitGrowsForever(t *testing.T) {
	p := policy.NewArenas[int](512, 4, 256, policy.DefaultPreferredSegment)
	g := &grower{p: p}
	added := 0
	for range 40 {
		b, grew := g.grow(4)
		if grew {
			added++
		}
		require.NoError(t, p.Check())
		require.Nil(t, p.Put(b))
		require.NoError(t, p.Check())
	}
	t.Logf("%d segments, %d bytes held for one live 4-byte request", added, g.held)
	assert.LessOrEqual(t, added, 1, "one 4-byte request allocated and freed over and over")
	assert.LessOrEqual(t, g.held, int64(64<<10))
}

// Round's contract: size rounded up to a multiple of align, at least
// align. Near MaxInt64 the rounding overflows to a negative size, which
// GetOn treats as tiny: Get hands out a 3584-byte block for a request of
// 2^63-101 bytes. SegmentSize's OwnUnit rounding overflows a little
// lower (2^63-1000), giving a negative segment size. (mempool caps
// requests at 1<<60 or the device's largest buffer, so the pool does not
// reach this; the policy's own contract is broken.)
func TestR4HugeRequestRoundingOverflows(t *testing.T) {
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	p.Add(p.NewSegment(1), 1) // a tiny segment, with room
	huge := int64(math.MaxInt64 - 100)
	assert.GreaterOrEqual(t, p.Round(huge), huge, "Round: size rounded up to a multiple of align")
	if b := p.Get(huge); b != nil {
		assert.GreaterOrEqual(t, b.Size, huge, "Get handed out a %d-byte block for a request of %d bytes", b.Size, huge)
	}
	near := int64(math.MaxInt64 - 1000) // Round does not overflow; OwnUnit rounding does
	assert.GreaterOrEqual(t, p.SegmentSize(near), p.Round(near), "SegmentSize(%d)", near)
	require.NoError(t, p.Check())
}

// The consolidation (IdleDivisor, CreepDivisor) sizes its segment by the
// last busy period's peak of active bytes, oversize blocks included, and
// BeforeGrow (pending) then frees every wholly free segment, the oversize
// ones included. The new segment is an ordinary one, which no oversize
// request may take (GetWhole takes oversize segments only), so the
// oversize arrays of the next round take new segments of their own: a
// round identical to the one before doubled what the pool holds (60 ->
// 122 MiB), past its high-water mark, for a live peak of 58 MiB.
func TestR4ConsolidationReplacesOversizeSegmentsWithAnOrdinaryOne(t *testing.T) {
	const mib = 1 << 20
	p := policy.NewArenas[int](512, 4, 16*mib, policy.DefaultPreferredSegment)
	g := &grower{p: p}
	get := func(n int64) *policy.Block[int] {
		b := g.get(n)
		require.NoError(t, p.Check())
		return b
	}
	put := func(bs ...*policy.Block[int]) {
		for _, b := range bs {
			require.Nil(t, p.Put(b))
			require.NoError(t, p.Check())
		}
	}
	// Round 0: a 40 MiB oversize array and a 1 MiB one.
	put(get(40*mib), get(mib))
	// Round 1: the same, and a 17 MiB oversize array more: the pool grows
	// by a little.
	put(get(40*mib), get(mib), get(17*mib))
	highWater := g.held
	t.Logf("after round 1: %d MiB held, consolidating %v", g.held/mib, p.Consolidating())
	// Round 2, the same as round 1.
	x := get(mib)
	t.Logf("the 1 MiB request's segment: %d MiB", x.Seg.Size/mib)
	y, z := get(40*mib), get(17*mib)
	t.Logf("after round 2's allocations: %d MiB held", g.held/mib)
	put(x, y, z)
	assert.LessOrEqual(t, g.held, highWater,
		"round 2 repeats round 1, whose segments were all kept (oversize ones serve only oversize requests)")
}

// BeforeGrow's slack "keeps a program whose phases take turns at the peak
// (a sort of large arrays, then one of small ones) from freeing one
// phase's segments to make the next one's, and allocating them again
// each turn". The consolidation bypasses it: in the small phase, a busy
// period that grew the pool by one 896 KiB segment (of 41 MiB held) ends
// idle, and the next 6 MiB request is declined so that one segment of that
// period's peak and an eighth (6.9 MiB) replaces the wholly free ones,
// the large phase's 40 MiB segment among them. The large phase then
// allocates 40 MiB again, and its BeforeGrow frees the 6.9 MiB segment:
// three device allocations (48 MiB) every round, forever, for identical
// rounds.
func TestR4ConsolidationFreesTheOtherPhasesSegmentEveryRound(t *testing.T) {
	const mib, kib = 1 << 20, 1 << 10
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	g := &grower{p: p}
	var perRound []int
	for range 10 {
		added := 0
		get := func(n int64) *policy.Block[int] {
			b, grew := g.grow(n)
			if grew {
				added++
			}
			require.NoError(t, p.Check())
			return b
		}
		put := func(bs ...*policy.Block[int]) {
			for _, b := range bs {
				require.Nil(t, p.Put(b))
				require.NoError(t, p.Check())
			}
		}
		// The small phase: a 6 MiB array and a 100 KiB one, twice.
		x, y := get(6*mib), get(100*kib)
		put(x, y)
		x, y = get(6*mib), get(100*kib)
		put(x, y)
		// The large phase: one 40 MiB array.
		put(get(40 * mib))
		perRound = append(perRound, added)
	}
	t.Logf("segments added per round: %v; %d MiB held", perRound, g.held/mib)
	late := 0
	for _, n := range perRound[3:] {
		late += n
	}
	assert.Zero(t, late, "identical rounds whose phases take turns at the peak keep their segments")
}
