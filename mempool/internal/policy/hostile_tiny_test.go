package policy_test

// Hostile tests of the tiny requests (commit d880f25): requests of up to
// max(TinyBlock, alignment) bytes take tiny segments, else a hole of a
// segment in use, and never cut a wholly free segment. Each test says
// whether it FAILS on d880f25 (a defect) or passes (an attack that held,
// kept as a regression test).

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/mempool/internal/policy"
)

// FAILS on d880f25. The docs (arenas.go's constants, doc.go) say a tiny
// request takes a tiny segment's block "else a hole of a segment in
// use" ("else a free block of a segment in use"). Arena.find looks only
// at the smallest fit of the ordinary index and gives up if that is a
// wholly free segment, so a larger hole of a segment in use is passed
// over and the pool allocates a new tiny segment on the device instead.
// (FuzzArena's model encodes the code's rule, not the doc's.)
func TestHostileTinyPassesOverAHoleBehindASmallerFreeSegment(t *testing.T) {
	const kib = 1 << 10
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	a := p.Add(p.NewSegment(256*kib), 256*kib) // the first segment, 512 KiB
	c := p.Get(256 * kib)
	require.NotNil(t, c)
	require.Same(t, a.Seg, c.Seg, "the first segment is full")
	require.Nil(t, p.Get(100*kib))
	b := p.Add(p.NewSegment(100*kib), 100*kib) // a 100 KiB segment of its own
	require.Less(t, b.Seg.Size, int64(256*kib))
	require.Nil(t, p.Put(b))
	require.True(t, b.Seg.WhollyFree(), "the 100 KiB segment is wholly free")
	require.Nil(t, p.Put(c)) // a 256 KiB hole in the first segment, which is in use (a)
	require.NoError(t, p.Check())

	x := p.Get(4)
	require.NotNil(t, x, "no tiny segment has room, but the first segment (in use) has a 256 KiB hole")
	if x != nil {
		assert.Same(t, a.Seg, x.Seg)
	}
}

// FAILS on d880f25. step() leaves the tiny segments' bytes out of what
// the pool holds ("tiny segments serve no other request"), but still
// subtracts their free bytes (SplitBytes counts every segment in use,
// tiny ones included) as "scattered" free bytes the growth would have
// made. Tiny segments each pinned by one scalar then shrink every later
// growth step of ordinary requests toward its floor (1/48 of the pool
// instead of 1/12): more, smaller device allocations for the arrays,
// from bytes the arrays can never use.
func TestHostileTinyFreeBytesShrinkTheGrowthStep(t *testing.T) {
	const mib = 1 << 20
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	big := p.Add(p.NewSegment(8*mib), 8*mib)
	require.True(t, big.Whole())
	before := p.SegmentSize(1024)
	require.Greater(t, before, int64(4*policy.GrowthUnit), "a twelfth of 8 MiB")

	// 2000 scalars, then all but the first of each tiny segment go.
	var keep, drop []*policy.Block[int]
	seen := map[*policy.Segment[int]]bool{}
	for range 2000 {
		x := p.Get(4)
		if x == nil {
			x = p.Add(p.NewSegment(4), 4)
		}
		require.True(t, x.Seg.Tiny())
		if !seen[x.Seg] {
			seen[x.Seg] = true
			keep = append(keep, x)
		} else {
			drop = append(drop, x)
		}
	}
	for _, x := range drop {
		require.Nil(t, p.Put(x))
	}
	require.NoError(t, p.Check())
	t.Logf("%d tiny segments, each pinned by one scalar", len(keep))
	assert.Equal(t, before, p.SegmentSize(1024),
		"the tiny segments' free bytes serve no ordinary request: they must not shrink its growth step")
}

// FAILS on d880f25. A tiny segment then held at most 64 KiB:
// 128 blocks. A program with many live scalars (or, on a device whose
// alignment is 4 KiB, many live requests of up to 4 KiB: all tiny then)
// takes one device allocation per 64 KiB, where the same number of
// 1 KiB requests takes a geometric growth (a twelfth of the pool at a
// time). TestArenaTinySegmentsGrow's claim, "a program of many scalars
// takes few segments", holds for 400 scalars only.
func TestHostileManyTinyRequestsTakeManySegments(t *testing.T) {
	count := func(size int64, align int64) int {
		p := policy.NewArenas[int](align, 4, 0, policy.DefaultPreferredSegment)
		n := 0
		for range 100_000 {
			if p.Get(size) == nil {
				p.Add(p.NewSegment(size), size)
				n++
			}
		}
		require.NoError(t, p.Check())
		return n
	}
	ordinary, tiny := count(1024, 512), count(512, 512)
	t.Logf("100000 live requests: %d segments of 1 KiB ones, %d of 512-byte ones", ordinary, tiny)
	assert.LessOrEqual(t, tiny, 2*ordinary+8,
		"half the bytes in tiny requests should not take many times the device allocations")
	ordinary4k, tiny4k := count(8192, 4096), count(4096, 4096)
	t.Logf("alignment 4096: %d segments of 8 KiB requests, %d of 4 KiB (tiny) ones", ordinary4k, tiny4k)
	assert.LessOrEqual(t, tiny4k, 2*ordinary4k+8)
}

// FAILS on d880f25. takeAll's comment: "A tiny segment is made only when
// no tiny one has room, so the wholly free ones are few and small". After
// a burst of scalars the wholly free tiny segments are many (one per 64
// KiB of the burst's peak), and they stay through every growth of the
// pool (BeforeGrow, TakeKept never free them): only FreeHeld or the
// out-of-memory ladder (TakeLargest) ever gives them back.
func TestHostileWhollyFreeTinySegmentsAreNotFew(t *testing.T) {
	const mib = 1 << 20
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	var live []*policy.Block[int]
	segs := map[*policy.Segment[int]]bool{}
	for range 20_000 { // 10 MB of scalars at the peak
		x := p.Get(4)
		if x == nil {
			x = p.Add(p.NewSegment(4), 4)
			segs[x.Seg] = true
		}
		live = append(live, x)
	}
	for _, x := range live {
		p.Put(x)
	}
	n := len(segs)
	// The program moves on to arrays, larger than anything held: growth.
	for range 4 {
		for _, s := range p.BeforeGrow(64 * mib) {
			delete(segs, s)
		}
		b := p.Add(p.NewSegment(64*mib), 64*mib)
		segs[b.Seg] = true
	}
	require.NoError(t, p.Check())
	var idleTiny int
	var idleBytes int64
	for s := range segs {
		if s.Tiny() && s.WhollyFree() {
			idleTiny++
			idleBytes += s.Size
		}
	}
	segs2 := n
	t.Logf("%d tiny segments after the burst; %d wholly free tiny segments (%d bytes) after 4 growths", segs2, idleTiny, idleBytes)
	assert.LessOrEqual(t, idleTiny, 1, "one wholly free tiny segment stays, at most")
}

// Holds on d880f25 (regression). TakeLargest frees wholly free tiny
// segments too, so repeated TakeLargest empties the pool: FreeHeld and
// the ladder leave no segment behind, and the tiny bytes go to zero (a
// new tiny segment is then 4 KiB again).
func TestHostileTakeLargestEmptiesTinySegments(t *testing.T) {
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	var live []*policy.Block[int]
	for range 3000 {
		x := p.Get(4)
		if x == nil {
			x = p.Add(p.NewSegment(4), 4)
		}
		live = append(live, x)
	}
	live = append(live, p.Add(p.NewSegment(1<<20), 1<<20))
	for _, x := range live {
		p.Put(x)
	}
	for p.TakeLargest() != nil {
	}
	assert.Zero(t, p.Counts().Segments)
	assert.Equal(t, int64(policy.TinySegment), p.SegmentSize(4), "the tiny bytes went with the segments")
	assert.Equal(t, int64(policy.FirstSegment), p.SegmentSize(1024))
	require.NoError(t, p.Check())
}

// Holds on d880f25 (regression). With a 4 KiB alignment every request
// of up to 4 KiB is tiny; the first tiny segment holds eight blocks
// (32 KiB), the tiny bytes double to 64 KiB segments, and an 8 KiB request never takes their
// blocks.
func TestHostileTinyWithPageAlignment(t *testing.T) {
	const kib = 1 << 10
	p := policy.NewArenas[int](4096, 4, 0, policy.DefaultPreferredSegment)
	s := p.NewSegment(4096)
	assert.True(t, s.Tiny(), "4 KiB is one block of the alignment: tiny")
	assert.Equal(t, int64(32*kib), s.Size)
	x := p.Add(s, 1)
	assert.Nil(t, p.Get(8*kib), "a non-tiny request takes no tiny block")
	var sizes []int64
	for range 100 {
		if p.Get(4096) == nil {
			n := p.NewSegment(4096)
			sizes = append(sizes, n.Size)
			p.Add(n, 4096)
		}
	}
	assert.Equal(t, []int64{32 * kib, 32 * kib, 48 * kib, 72 * kib, 108 * kib, 164 * kib}, sizes,
		"eight blocks first, then half the tiny bytes each")
	p.Put(x)
	require.NoError(t, p.Check())
}
