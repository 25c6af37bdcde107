package policy_test

import (
	"testing"

	"github.com/clpool/clpool/mempool/internal/policy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const s43bMiB = 1 << 20

// s43bGiveUp makes a pool of sizes' arrays (each a segment of its own),
// frees them all, and has a request of trigger bytes give them up
// (BeforeGrow), as the first array of a grown state does. It returns the
// policy, with the trigger's segment added, and the block of a small
// array (kept active, in a segment of its own made first) for the caller
// to give back.
func s43bGiveUp(t *testing.T, sizes []int64, trigger int64) (*policy.Arenas[int], *policy.Block[int]) {
	t.Helper()
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	small := p.Add(p.NewSegment(100_000), 100_000)
	var old []*policy.Block[int]
	for _, size := range sizes {
		require.Nil(t, p.Get(size))
		require.Empty(t, p.BeforeGrow(size))
		old = append(old, p.Add(p.NewSegment(size), size))
	}
	for _, b := range old {
		require.Nil(t, p.Put(b))
	}
	require.Nil(t, p.Get(trigger))
	require.Len(t, p.BeforeGrow(trigger), len(sizes), "the trigger gives up every wholly free segment")
	p.Add(p.NewSegment(trigger), trigger)
	return p, small
}

// An array remade at the very size it had (no growth), after a larger
// request gave its old segment up, gets 1/8 more than its block: the
// exclusion "but n itself" in outgrew compares the request's block
// (rounded to 512 B) with the given-up segment's size (rounded to
// OwnUnit, 4 KiB), which differ for every size not a multiple of 4 KiB,
// and for a large request (over 1/BigDivisor of the pool) the window is
// 1/4 either side (outgrew(n, 4)), so a segment that already had the
// headroom matches too. Before 068fcf8 the same array got its block
// rounded to OwnUnit. Fails at 068fcf8: 27004928 (1.125x) for 24001000.
func TestHostileS43bSameSizeRemakeGetsHeadroom(t *testing.T) {
	const n = 24_001_000 // not a multiple of 4 KiB
	p, _ := s43bGiveUp(t, []int64{n, n, n, n}, 40*s43bMiB)
	own := (p.Round(n) + policy.OwnUnit - 1) / policy.OwnUnit * policy.OwnUnit
	assert.Equal(t, own, p.SegmentSize(n), "an array remade at its old size (%d) needs no headroom", n)
	require.NoError(t, p.Check())
}

// An array remade smaller than the segment it had gets the headroom:
// outgrew matches a given-up size up to n/4 above a large request's
// block. The doc of BigDivisor says "outgrew a wholly free segment (one
// of at least 3/4 of its size, and less)". Fails at 068fcf8: a request
// 20% smaller than its old segment gets a segment 1/8 larger than itself.
func TestHostileS43bShrunkArrayGetsHeadroom(t *testing.T) {
	const old = 24 * s43bMiB
	p, _ := s43bGiveUp(t, []int64{old, old, old, old}, 40*s43bMiB)
	for _, n := range []int64{old - old/500, old - old/50, old - old/5} {
		own := (p.Round(n) + policy.OwnUnit - 1) / policy.OwnUnit * policy.OwnUnit
		assert.Equal(t, own, p.SegmentSize(n), "an array of %d bytes, smaller than the %d-byte segment given up, grew out of nothing", n, int64(old))
	}
	require.NoError(t, p.Check())
}

// The doc of outgrew: "The pool may call BeforeGrow, drain its queue
// caches into the policy, and size the segment again: the segments
// BeforeGrow freed the first time count." Draining a queue cache gives
// its blocks back with Put, and 068fcf8's Put cleared p.gone: the second
// sizing no longer saw them (before 068fcf8, cleared at Add, it did;
// since 0c07a0f, a round of give-ups lasts until the next). Fails at
// 068fcf8: the request that outgrew the given-up segments by 0.2% gets
// no headroom once a cached block comes back in between.
func TestHostileS43bDrainBetweenBeforeGrowAndSizingLosesGone(t *testing.T) {
	const old = 24 * s43bMiB
	n := int64(old + old/500)
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	small := p.Add(p.NewSegment(100_000), 100_000) // a block the queue cache holds
	s43bFourGivenBack(t, p, old)
	// The pool's order (mempool core.decide): size, BeforeGrow, drain,
	// size again.
	require.Nil(t, p.Get(n))
	first := p.SegmentSize(n)
	require.Len(t, p.BeforeGrow(n), 4)
	require.Equal(t, first, p.SegmentSize(n), "sized again after BeforeGrow, as the first time")
	require.Nil(t, p.Put(small)) // the drain of the queue caches
	require.Nil(t, p.Get(n))
	assert.Equal(t, first, p.SegmentSize(n), "sized again after the drain: the segments BeforeGrow freed count")
	require.NoError(t, p.Check())
}

// forget takes off p.gone the size nearest the new segment's request,
// however far from it: a segment made for a small request (a temporary
// between the state's arrays) takes off a given-up 24 MiB size, and one
// array of the remade state loses its headroom. The doc: "each taken off
// by the new segment that replaces it". Fails at 068fcf8.
func TestHostileS43bForgetTakesAnUnrelatedSize(t *testing.T) {
	const old = 24 * s43bMiB
	n := int64(old + old/500)
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	s43bFourGivenBack(t, p, old)
	require.Nil(t, p.Get(n))
	require.Len(t, p.BeforeGrow(n), 4)
	headroom := p.SegmentSize(n)
	p.Add(p.NewSegment(n), n) // the first array: replaces one
	// A small temporary that needs a segment of its own (none is free).
	tmp := int64(4 * s43bMiB) // past the headroom left in the first array's segment
	require.Nil(t, p.Get(tmp))
	require.Empty(t, p.BeforeGrow(tmp))
	p.Add(p.NewSegment(tmp), tmp)
	for i := range 3 { // three arrays left, three given-up segments left to replace
		assert.Equal(t, headroom, p.SegmentSize(n), "array %d of the remade state", i+2)
		p.Add(p.NewSegment(n), n)
	}
	require.NoError(t, p.Check())
}

// s43bFourGivenBack adds four segments of size bytes to p, each for one
// request of its size, and gives their blocks back: wholly free.
func s43bFourGivenBack(t *testing.T, p *policy.Arenas[int], size int64) {
	var blocks []*policy.Block[int]
	for range 4 {
		blocks = append(blocks, p.Add(p.NewSegment(size), size))
	}
	for _, b := range blocks {
		require.Nil(t, p.Put(b))
	}
}
