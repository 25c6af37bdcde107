package policy_test

import (
	"testing"

	"github.com/clpool/clpool/mempool/internal/policy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newArena(t *testing.T) *policy.Arena[int] {
	a := policy.NewArena[int](512, 4)
	t.Cleanup(func() { require.NoError(t, a.Check()) })
	return a
}

func seg(size int64) *policy.Segment[int] { return &policy.Segment[int]{Size: size} }

// From CuPy's TestSingleDeviceMemoryPool.test_split: a block splits, and
// the rest serves the next request.
func TestArenaSplit(t *testing.T) {
	a := newArena(t)
	s := seg(4096)
	b1 := a.Add(s, 1024)
	assert.Equal(t, int64(0), b1.Off)
	assert.Equal(t, int64(1024), b1.Size)
	b2 := a.Get(1024)
	require.NotNil(t, b2)
	assert.Same(t, s, b2.Seg)
	assert.Equal(t, int64(1024), b2.Off)
	assert.Equal(t, policy.Counts{FreeBlocks: 1, FreeBytes: 2048, SplitBlocks: [2]int{0, 1}, SplitBytes: [2]int64{0, 2048}, Segments: 1}, a.Counts(),
		"a segment not marked small is large")
	a.Put(b1)
	a.Put(b2)
}

// From CuPy's test_merge: blocks given back merge with free neighbours,
// on either side, into one block covering the segment.
func TestArenaMerge(t *testing.T) {
	for _, order := range [][3]int{{0, 1, 2}, {2, 1, 0}, {0, 2, 1}, {1, 0, 2}} {
		a := newArena(t)
		s := seg(3 * 512)
		bs := []*policy.Block[int]{a.Add(s, 512), a.Get(512), a.Get(512)}
		for i, k := range order {
			whole := a.Put(bs[k])
			require.NoError(t, a.Check())
			if i < 2 {
				assert.Nil(t, whole)
			} else {
				assert.Same(t, s, whole, "the last block back frees the segment")
			}
		}
		assert.Equal(t, policy.Counts{FreeBlocks: 1, FreeBytes: 1536, Segments: 1}, a.Counts())
		a.Remove(s)
	}
}

// From CuPy's test_free_all_blocks_split: a segment whose other half is
// still in use is not wholly free, so it is not released.
func TestArenaFreeAllBlocksWithASplitBlockInUse(t *testing.T) {
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	b1 := p.Add(seg(policy.FirstSegment), 1024)
	b2 := p.Get(1024)
	require.NotNil(t, b2)
	p.Put(b1)
	assert.Nil(t, p.TakeLargest(), "b2 is still in use")
	assert.Equal(t, [2]int{2, 0}, p.Counts().SplitBlocks, "b1 and the tail, on either side of b2")
	p.Put(b2)
	s := p.TakeLargest()
	require.NotNil(t, s)
	assert.Equal(t, policy.Counts{}, *p.Counts())
	require.NoError(t, p.Check())
}

func TestArenaGoodFitAndAlignment(t *testing.T) {
	a := newArena(t)
	s := seg(1 << 20)
	b := a.Add(s, a.Round(1))
	assert.Equal(t, int64(512), b.Size, "a block is at least one unit")
	c := a.Get(a.Round(513))
	assert.Equal(t, int64(1024), c.Size)
	assert.Equal(t, int64(512), c.Off)
	// Free a 4 KiB hole between active blocks; a 3 KiB request takes it
	// rather than the big tail.
	h := a.Get(4096)
	d := a.Get(512)
	a.Put(h)
	e := a.Get(3072)
	assert.Equal(t, h.Off, e.Off)
	for _, x := range []*policy.Block[int]{b, c, d, e} {
		a.Put(x)
	}
}

func TestArenaKeepsCachesForRangesThatComeBack(t *testing.T) {
	a := newArena(t)
	s := seg(1 << 20)
	b := a.Add(s, 1024)
	b.Cache = 7
	a.Put(b) // merges with the free tail: the range is gone, its cache parked
	assert.Zero(t, b.Cache)
	assert.Empty(t, a.TakeStale(nil))
	b = a.Get(1024)
	assert.Equal(t, 7, b.Cache, "the same range again: the same cache")
	a.Put(b)
	// Ranges that do not come back: the segment parks 8, the older go stale.
	var stale []int
	for i := range 10 {
		b = a.Get(int64(2048 + 512*i))
		b.Cache = 100 + i
		a.Put(b)
		stale = a.TakeStale(stale)
	}
	assert.Equal(t, []int{7, 100, 101}, stale)
	a.Remove(s)
	assert.Len(t, a.TakeStale(nil), 8, "a removed segment's caches all go stale")
}

// With parking off, a cache whose range goes is stale at once, and a range
// that comes back gets none: no two caches of the arena ever overlap.
func TestArenaWithoutParkingDropsCachesAtOnce(t *testing.T) {
	a := newArena(t)
	a.SetParking(false)
	s := seg(1 << 20)
	b := a.Add(s, 1024)
	b.Cache = 7
	a.Put(b) // merges with the free tail: the range is gone
	assert.Zero(t, b.Cache)
	assert.Equal(t, []int{7}, a.TakeStale(nil))
	b = a.Get(1024)
	assert.Zero(t, b.Cache, "nothing parked for the range")
	b.Cache = 8
	c := a.Get(2048)
	c.Cache = 9
	a.Put(b) // b's range stays (c is active): its cache stays with the free block
	assert.Empty(t, a.TakeStale(nil))
	d := a.Get(512) // splits b's block: the range goes
	assert.Equal(t, []int{8}, a.TakeStale(nil))
	a.Put(d)
	a.Put(c)
	assert.Equal(t, []int{9}, a.TakeStale(nil), "merged away")
	a.Remove(s)
	assert.Empty(t, a.TakeStale(nil))
}

func TestOversizeSegmentsAreNeverSplit(t *testing.T) {
	p := policy.NewArenas[int](512, 4, 8<<20, policy.DefaultPreferredSegment)
	assert.True(t, p.Oversize(9<<20))
	assert.False(t, p.Oversize(8<<20))
	n := p.SegmentSize(9<<20 + 1)
	assert.Equal(t, int64(9<<20+policy.OwnUnit), n, "rounded to OwnUnit")
	b := p.Add(seg(n), 9<<20+1)
	assert.Equal(t, n, b.Size, "the whole segment, unsplit")
	p.Put(b)
	assert.Nil(t, p.Get(1<<20), "an ordinary request never takes an oversize block")
	assert.Nil(t, p.Get(40<<20), "nor one more than OversizeSlack too small")
	b = p.Get(9 << 20)
	require.NotNil(t, b)
	p.Put(b)
	require.NotNil(t, p.TakeLargest())
	require.NoError(t, p.Check())
}

func TestSegmentSizes(t *testing.T) {
	const kib, mib = 1 << 10, 1 << 20
	p := policy.NewArenas[int](512, 4, 0, 256*mib)
	assert.Equal(t, int64(policy.FirstSegment), p.SegmentSize(1024), "the first segment")
	assert.Equal(t, int64(policy.FirstSegment), p.SegmentSize(policy.FirstSegment))
	assert.Equal(t, int64(3*mib+4*kib), p.SegmentSize(3*mib+1), "a request past it: its own size, to OwnUnit")
	assert.Equal(t, int64(128*mib), p.SegmentSize(128*mib), "half the preferred size or more: its own segment")
	assert.Equal(t, int64(199*mib+4*kib), p.SegmentSize(199*mib+1))

	// The pool grows by a twelfth of what it holds, less the free bytes
	// of its segments in use, in 64 KiB units.
	first := p.Add(p.NewSegment(1000), 1000)
	assert.True(t, first.Seg.Small, "made for a small request")
	assert.Equal(t, int64(policy.GrowthUnit), p.SegmentSize(1024), "a twelfth of 512 KiB, less its free bytes: one unit")
	var bs []*policy.Block[int]
	for range 8 {
		b := p.Add(seg(32*mib), 32*mib)
		assert.False(t, b.Seg.Small)
		bs = append(bs, b)
	}
	step := func(held, free int64) int64 { return (held/12 - free + 64*kib - 1) / (64 * kib) * (64 * kib) }
	held := int64(policy.FirstSegment + 8*32*mib)
	free := int64(policy.FirstSegment) - first.Size
	assert.Equal(t, step(held, free), p.SegmentSize(1024))
	assert.Equal(t, p.SegmentSize(1024), p.SegmentSize(20*mib), "a request under the step takes the step")
	assert.Equal(t, int64(36*mib), p.SegmentSize(36*mib), "one over it, its own size")

	// A large request that outgrew a wholly free segment gets an eighth
	// more: the wholly free 32 MiB segments are too small for 36 MiB.
	for _, b := range bs[:4] {
		require.Nil(t, p.Put(b))
	}
	assert.Equal(t, int64(36*mib+36*mib/8), p.SegmentSize(36*mib), "36 MiB outgrew a 32 MiB segment")
	assert.Equal(t, int64(44*mib), p.SegmentSize(44*mib), "44 MiB is not a growth of 32 MiB")
	assert.Equal(t, step(held, free), p.SegmentSize(1024), "the idle segments' bytes are not scattered free bytes")
	b := p.Get(16 * mib)
	require.NotNil(t, b)
	require.Nil(t, p.Put(b))
	assert.Equal(t, step(held, free), p.SegmentSize(1024), "nor the blocks waiting unmerged in an idle segment")
	b = p.Get(16 * mib)
	c := p.Get(mib)
	assert.Equal(t, step(held, free+16*mib-c.Size), p.SegmentSize(1024), "the free bytes of a segment in use are")
	p.Put(b)
	p.Put(c)
	assert.Len(t, p.BeforeGrow(1<<30), 4, "growing past the high-water mark frees the empty segments first")
	require.NoError(t, p.Check())
}

// A segment sized for one large request serves only large requests
// while it is in use: a small block in the tail the large one left would
// pin it when the large one goes. A small request that fits nowhere else
// takes it once it is wholly free, and it becomes an ordinary segment.
func TestArenaOwnSegmentsServeLargeRequests(t *testing.T) {
	const kib, mib = 1 << 10, 1 << 20
	p := policy.NewArenas[int](512, 4, 0, 256*mib)
	small := p.Add(p.NewSegment(1000), 1000) // the first segment, 512 KiB
	assert.False(t, small.Seg.Own())
	const large = 3*mib + 100*kib + 512
	s := p.NewSegment(large)
	require.True(t, s.Own(), "past the growth step: sized for the request")
	big := p.Add(s, large)
	require.Greater(t, s.Size, big.Size, "its tail (to OwnUnit) is free")
	fill := p.Get(policy.FirstSegment - small.Size) // the first segment is full
	require.NotNil(t, fill)
	assert.Same(t, small.Seg, fill.Seg)
	assert.Nil(t, p.Get(1024), "a small request does not take the own segment's tail")
	assert.Less(t, int64(1024), p.OwnMin())
	require.Nil(t, p.Put(big))
	b := p.Get(1024)
	require.NotNil(t, b, "wholly free, it serves the small request that fits nowhere else")
	assert.Same(t, s, b.Seg)
	assert.False(t, s.Own(), "and is an ordinary segment now")
	require.NoError(t, p.Check())
}

// A request that takes a block of an own segment more than ownSpan (8)
// times its size, as no ordinary block fits it, takes the top of that
// block: the segment's head stays in one piece, and once its large array
// goes, the next array of about its size fits there again. Cut from the
// bottom, the block sat in the middle, and the next large array took a
// new segment (particles remade beside a neighbour list of random size
// held 1.39x their plan, 1.085x so).
func TestArenaSmallRequestTakesTheTopOfAnOwnSegment(t *testing.T) {
	const kib, mib = 1 << 10, 1 << 20
	p := policy.NewArenas[int](512, 4, 0, 256*mib)
	seg := p.NewSegment(8 * mib)
	require.True(t, seg.Own())
	require.Nil(t, p.Put(p.Add(seg, 8*mib)))
	large := p.Get(6 * mib) // the wholly free own segment: a 2 MiB tail is left
	require.NotNil(t, large)
	require.Same(t, seg, large.Seg)
	assert.Zero(t, large.Off)

	const small = 600 * kib // over OwnMin, under 1/8 of the segment
	require.Greater(t, int64(small), p.OwnMin())
	b := p.Get(small)
	require.NotNil(t, b, "no ordinary block fits: the own segment's tail serves it")
	require.Same(t, seg, b.Seg)
	assert.Equal(t, seg.Size, b.Off+b.Size, "it takes the top of the tail")
	require.NoError(t, p.Check())

	require.Nil(t, p.Put(large))
	next := p.Get(seg.Size - b.Size) // a larger array than the last, up to the small block
	require.NotNil(t, next, "the head is one free block")
	assert.Same(t, seg, next.Seg)
	assert.Zero(t, next.Off)
	require.NoError(t, p.Check())

	// A request of at least 1/8 of the segment is cut from the bottom,
	// as before.
	require.Nil(t, p.Put(next))
	mid := p.Get(seg.Size / 4)
	require.NotNil(t, mid)
	assert.Zero(t, mid.Off)
	require.NoError(t, p.Check())
}

// A huge segment (made for one request over half the preferred size)
// serves no request a growth step's segment would, wholly free or in the
// tail a smaller huge array left, so that small blocks never pin it: the
// next huge array finds it whole, or BeforeGrow frees it first when small
// arrays grow the pool. Before, a small request split it once it was free
// (or took the tail), and the next huge array took a second huge segment
// beside it: a trace of boundary sizes around three arrays of 128 MiB
// held 1.61x its plan.
func TestArenaHugeSegmentsServeHugeRequests(t *testing.T) {
	const mib = 1 << 20
	p := policy.NewArenas[int](512, 4, 0, 256*mib)
	live := map[*policy.Segment[int]]bool{}
	mostHuge := 0
	get := func(size int64) *policy.Block[int] {
		b := p.Get(size)
		if b == nil {
			s := p.NewSegment(size)
			for _, gone := range p.BeforeGrow(size) {
				delete(live, gone)
			}
			live[s] = true
			b = p.Add(s, size)
		}
		huge := 0
		for s := range live {
			if s.Huge() {
				huge++
			}
		}
		mostHuge = max(mostHuge, huge)
		return b
	}
	small := get(1000)
	big := get(136 * mib)
	require.True(t, big.Seg.Huge())
	p.Put(big)
	mid := get(128 * mib) // takes the wholly free huge segment: an 8 MiB tail is left
	require.Same(t, big.Seg, mid.Seg)
	var smalls []*policy.Block[int]
	for range 40 { // 1 MiB arrays, live at once: the first segment does not hold them
		b := get(1 * mib)
		assert.False(t, b.Seg.Huge(), "a 1 MiB request does not take the huge segment's tail")
		smalls = append(smalls, b)
	}
	p.Put(mid) // the huge segment is wholly free
	for range 10 {
		b := get(1 * mib)
		assert.False(t, b.Seg.Huge(), "nor a wholly free huge segment")
		smalls = append(smalls, b)
	}
	get(136 * mib)
	assert.Equal(t, 1, mostHuge, "never two huge segments at once")
	for _, b := range append(smalls, small) {
		p.Put(b)
	}
	require.NoError(t, p.Check())
}

// A program whose every round needs a little more than the one before
// (a sort of a growing set: everything freed between rounds) replaces
// its segments, at the first request after a round that grew the pool
// by a little, with one of that round's peak and an eighth more, so that
// it takes a segment every few rounds, not one per array.
func TestArenaConsolidatesAPoolThatCreeps(t *testing.T) {
	const mib = 1 << 20
	p := policy.NewArenas[int](512, 4, 0, 256*mib)
	round := func(sizes ...int64) (added int) {
		var bs []*policy.Block[int]
		for _, n := range sizes {
			b := p.Get(n)
			if b == nil {
				s := p.NewSegment(n)
				p.BeforeGrow(n)
				b = p.Add(s, n)
				added++
			}
			bs = append(bs, b)
		}
		for _, b := range bs {
			require.Nil(t, p.Put(b))
		}
		require.NoError(t, p.Check())
		return added
	}
	const n = 4 * mib
	assert.Equal(t, 4, round(n, n, n, n), "the first round: a segment per array")
	assert.False(t, p.Consolidating(), "the first round grew the pool from nothing")
	assert.Equal(t, 0, round(n, n, n, n))
	assert.False(t, p.Consolidating(), "nor did the second grow it")
	assert.Equal(t, 1, round(n, n, n, n, mib), "the third needs a little more")
	require.True(t, p.Consolidating())
	assert.Nil(t, p.Get(n), "idle after a round that grew the pool by a little: the next request replaces its segments")
	const peak = 4*n + mib
	assert.Equal(t, int64((peak+peak/8+policy.GrowthUnit-1)/policy.GrowthUnit*policy.GrowthUnit), p.SegmentSize(n))
	s := p.NewSegment(n)
	assert.Len(t, p.BeforeGrow(n), 5, "the segments it replaces")
	require.Nil(t, p.Put(p.Add(s, n)))
	assert.False(t, p.Consolidating())
	assert.Equal(t, 1, p.Counts().Segments, "one segment replaced them all")
	require.NoError(t, p.Check())
	assert.Equal(t, 0, round(n, n, n, n, mib, mib), "and serves the rounds that need a little more")
}

func TestBinsAreLIFOAndExact(t *testing.T) {
	p := policy.NewBins[int](4)
	n := p.SegmentSize(1000)
	assert.Equal(t, int64(1023), n)
	b1 := p.Add(&policy.Segment[int]{Size: n, Data: 1}, 1000)
	b2 := p.Add(&policy.Segment[int]{Size: n, Data: 2}, 1000)
	assert.Nil(t, p.Put(b1))
	assert.Nil(t, p.Put(b2))
	assert.Nil(t, p.Get(2000), "never a block of another bin")
	assert.Same(t, b2, p.Get(1000), "the most recently given back")
	assert.Equal(t, int64(1023), p.LargestFree())
	assert.Same(t, b1.Seg, p.TakeLargest())
	assert.Nil(t, p.TakeLargest())
	exact := p.Add(&policy.Segment[int]{Size: 5, Exact: true}, 5)
	assert.Same(t, exact.Seg, p.Put(exact), "an exact block is freed when given back")
	assert.Nil(t, p.Put(b2))
	assert.Equal(t, policy.Counts{FreeBlocks: 1, FreeBytes: 1023, Segments: 1}, *p.Counts())
}

// Blocks walks a segment's blocks by offset, and they cover it.
func TestSegmentBlocksCoverIt(t *testing.T) {
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	seg := p.NewSegment(1000)
	a := p.Add(seg, 1000)
	b := p.GetOn(3000, 0)
	require.NotNil(t, b)
	require.Nil(t, p.Put(a))
	var off int64
	var free []bool
	for blk := range seg.Blocks() {
		assert.Equal(t, off, blk.Off)
		off += blk.Size
		free = append(free, blk.IsFree())
	}
	assert.Equal(t, seg.Size, off)
	assert.Equal(t, []bool{true, false, true}, free)
	assert.False(t, seg.WhollyFree())
	require.Nil(t, p.Put(b))
	assert.True(t, seg.WhollyFree())
}

// Run sums a block's run of free and held neighbours, and stops at an
// active block that is not held.
func TestBlockRunStopsAtActiveBlocks(t *testing.T) {
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	seg := p.NewSegment(1024)
	a := p.Add(seg, 1024)
	b := p.GetOn(1024, 0)
	c := p.GetOn(1024, 0)
	d := p.GetOn(1024, 0)
	for _, x := range []*policy.Block[int]{a, b, c, d} {
		require.NotNil(t, x)
		require.Same(t, seg, x.Seg)
	}
	require.Nil(t, p.Put(a)) // free, waiting unmerged or merged: a's range is free either way
	never := func(*policy.Block[int]) bool { return false }
	heldB := func(x *policy.Block[int]) bool { return x == b }
	assert.Equal(t, a.Size+b.Size, b.Run(never), "b's run takes in the free a before it, and stops at the active c")
	assert.Equal(t, c.Size, c.Run(never), "c between two active blocks is its own run")
	assert.Equal(t, a.Size+b.Size+c.Size, c.Run(heldB), "b held: c's run goes on through it to the free a, and stops at the active d")
	assert.Equal(t, seg.Size-a.Size-b.Size-c.Size, d.Run(never), "d's run takes in the segment's free tail")
}

// BeforeGrow keeps wholly free segments while the pool grows less than
// its slack past its high-water mark; TakeKept then gives them up, and
// past the slack BeforeGrow does.
func TestArenasSlackBeforeGrowing(t *testing.T) {
	const mib = 1 << 20
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	grow := func(size int64) *policy.Block[int] {
		require.Nil(t, p.Get(size))
		require.Empty(t, p.BeforeGrow(size))
		b := p.Add(p.NewSegment(size), size)
		require.Equal(t, size, b.Seg.Size)
		return b
	}
	big := grow(48 * mib)
	kept := grow(16 * mib)
	require.Nil(t, p.Put(kept))
	require.Nil(t, p.Put(big))
	require.Same(t, big.Seg, p.TakeLargest()) // 16 MiB held, 64 the mark and the peak

	// 24 MiB more stays under the mark (64 MiB): the free 16 MiB stays.
	require.Nil(t, p.Get(24*mib), "16 MiB does not serve 24")
	assert.Empty(t, p.BeforeGrow(24*mib))
	assert.Empty(t, p.TakeKept(24*mib), "nothing past the mark yet")
	// 50 MiB passes the mark but not 1/16 past the 64 MiB the blocks
	// once took: BeforeGrow keeps it; TakeKept (a refused segment) not.
	require.Equal(t, int64(50*mib), p.SegmentSize(50*mib))
	assert.Empty(t, p.BeforeGrow(50*mib))
	gone := p.TakeKept(50 * mib)
	require.Len(t, gone, 1)
	assert.Equal(t, int64(16*mib), gone[0].Size)

	// 60 MiB passes the slack too: the wholly free 16 MiB goes.
	require.Nil(t, p.Put(grow(16*mib)))
	gone = p.BeforeGrow(60 * mib)
	require.Len(t, gone, 1)
	assert.Equal(t, int64(16*mib), gone[0].Size)
	require.NoError(t, p.Check())
}

// A pool that fills with arrays that never quite fill its segments, none
// given back, grows geometrically still: the segments' tails are free
// bytes of segments in use, and without a floor on the growth step they
// took it to nothing, and the pool to one segment per array (the fuzzer
// found it: 6,000 arrays of 4.75 MiB took 25 s to check).
func TestArenaGrowsGeometricallyWhateverItsTails(t *testing.T) {
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	const n, size = 3000, 19 << 18 // 4.75 MiB
	segs := 0
	for range n {
		if p.Get(size) == nil {
			s := p.NewSegment(size)
			require.Empty(t, p.BeforeGrow(size))
			p.Add(s, size)
			segs++
		}
	}
	// It grows by a 48th at least, up to 256 MiB segments: 240 of them
	// for the 14 GiB (one per array without the floor).
	assert.Less(t, segs, n/10, "%d segments for %d arrays", segs, n)
	t.Logf("%d segments for %d arrays", segs, n)
	require.NoError(t, p.Check())
}

// A tiny request (a scalar, a reduction's result) takes a block of a
// tiny segment, or a hole in a segment in use, never a cut of a wholly
// free segment: a pool as large as its live peak (a CG solver's seven
// arrays, each its own segment) keeps every segment for the arrays.
// Without it (the commit before), the 4-byte request took the free
// 512 KiB segment, and the next array missed.
func TestArenaTinyRequestsKeepWhollyFreeSegments(t *testing.T) {
	const kib = 1 << 10
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	first := p.Add(p.NewSegment(4), 4)
	assert.True(t, first.Seg.Tiny())
	assert.Equal(t, int64(policy.FirstSegment), p.SegmentSize(1024),
		"a tiny segment is not the pool's first: the next is FirstSegment (it was a growth step of 64 KiB)")
	p.Put(first)
	require.NotNil(t, p.TakeLargest())
	arr := p.Add(p.NewSegment(512*kib), 512*kib)
	require.True(t, arr.Whole())
	require.Nil(t, p.Put(arr))
	assert.Nil(t, p.Get(4), "a tiny request does not cut a wholly free segment")

	s := p.NewSegment(4)
	assert.True(t, s.Tiny())
	assert.True(t, s.Small)
	assert.Equal(t, int64(policy.TinySegment), s.Size)
	assert.Empty(t, p.BeforeGrow(4), "a tiny segment frees nothing")
	scalar := p.Add(s, 4)
	assert.Same(t, s, scalar.Seg)
	b := p.Get(512 * kib)
	require.NotNil(t, b, "the array finds its segment free")
	assert.Same(t, arr.Seg, b.Seg)
	assert.Nil(t, p.Get(600), "a request of more than TinyBlock takes no tiny block")

	// A segment in use: its hole serves tiny requests once the tiny
	// segments are full.
	half := p.Get(256 * kib)
	require.Nil(t, half, "the one ordinary segment is taken whole")
	p.Put(b)
	half = p.Get(256 * kib)
	require.NotNil(t, half)
	var tiny []*policy.Block[int]
	for range policy.TinySegment/512 - 1 {
		x := p.Get(1)
		require.NotNil(t, x)
		assert.True(t, x.Seg.Tiny())
		tiny = append(tiny, x)
	}
	x := p.Get(1)
	require.NotNil(t, x, "the tiny segment is full: the hole beside the 256 KiB block serves it")
	assert.Same(t, half.Seg, x.Seg)

	// The next tiny segment adds half the tiny bytes (4 KiB at least).
	assert.Equal(t, int64(policy.TinySegment), p.SegmentSize(1))
	for _, b := range append(tiny, scalar, x, half) {
		p.Put(b)
	}
	require.NoError(t, p.Check())

	// Wholly free tiny segments stay when the pool grows (the program's
	// scalars come back), and go with TakeLargest.
	gone := p.BeforeGrow(1 << 30)
	require.Len(t, gone, 1)
	assert.False(t, gone[0].Tiny())
	require.NotNil(t, p.TakeLargest())
	assert.Zero(t, p.Counts().Segments)
}

// Each new tiny segment adds half what the tiny segments hold, so that
// a program of many scalars takes few segments.
func TestArenaTinySegmentsGrow(t *testing.T) {
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	var sizes []int64
	for range 400 {
		if p.Get(8) == nil {
			s := p.NewSegment(8)
			sizes = append(sizes, s.Size)
			p.Add(s, 8)
		}
	}
	const kib = 1 << 10
	assert.Equal(t, []int64{4 * kib, 4 * kib, 4 * kib, 8 * kib, 12 * kib, 16 * kib, 24 * kib, 36 * kib, 56 * kib, 84 * kib}, sizes)
	require.NoError(t, p.Check())
}

// LargestFree is the largest block a request could take: blocks waiting
// unmerged count as merging would make them. A segment whose blocks all
// wait, two large ones (DefaultQuickLarge), read as two halves, and the
// pool's fragmentation and out-of-memory errors (LargestHeldSize) said
// half of it could serve a request that merging serves whole.
func TestLargestFreeCountsWaitingBlocksMerged(t *testing.T) {
	const mib = 1 << 20
	a := newArena(t)
	a.SetQuick(policy.DefaultQuick, policy.SmallRequest)
	s := seg(8 * mib)
	lo := a.Add(s, 4*mib)
	hi := a.Get(4 * mib)
	require.NotNil(t, hi)
	require.Nil(t, a.Put(lo))
	require.Nil(t, a.Put(hi), "both halves wait unmerged")
	require.Equal(t, 2, a.Waiting())
	assert.Equal(t, int64(8*mib), a.LargestFree(), "merged, the whole segment")
	require.NoError(t, a.Check())
}

// A state of several arrays remade a little larger each step: once the
// segments of the step before are given up (BeforeGrow), every array's
// new segment gets the headroom, not only the first one's: each array
// grew from a given-up segment's occupant, though other segments were
// made since. Each occupant counts once; an array remade at its size, or
// smaller, grew from none.
func TestArenasEveryRemadeArrayGetsHeadroom(t *testing.T) {
	const mib = 1 << 20
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	var old []*policy.Block[int]
	for _, size := range []int64{24 * mib, 24 * mib, 24 * mib, 8 * mib} {
		require.Nil(t, p.Get(size))
		require.Empty(t, p.BeforeGrow(size))
		old = append(old, p.Add(p.NewSegment(size), size))
	}
	for _, b := range old {
		require.Nil(t, p.Put(b))
	}
	// The next step's arrays, 0.2% larger, fit none of the wholly free
	// segments; the first request's BeforeGrow gives them all up.
	grown := func(size int64) int64 { return size + size/500 }
	first := grown(24 * mib)
	require.Nil(t, p.Get(first))
	require.Len(t, p.BeforeGrow(first), 4)
	var now []*policy.Block[int]
	for i, size := range []int64{first, grown(24 * mib), grown(24 * mib)} {
		want := p.Round(size) + p.Round(size)/policy.HeadroomDivisor
		assert.InDelta(t, want, p.SegmentSize(size), float64(policy.OwnUnit), "array %d", i)
		require.Nil(t, p.Get(size))
		now = append(now, p.Add(p.NewSegment(size), size))
	}
	// A fourth array of that size finds no given-up segment left: the
	// three were replaced, one each.
	assert.Equal(t, (p.Round(first)+policy.OwnUnit-1)/policy.OwnUnit*policy.OwnUnit, p.SegmentSize(first), "no headroom: nothing of its size was given up")
	// The 8 MiB array: none remade at its size or smaller, one larger.
	for _, size := range []int64{8 * mib, 8*mib - 8*mib/1000} {
		assert.Less(t, p.SegmentSize(size), p.Round(size)+p.Round(size)/(policy.HeadroomDivisor+1), "%d bytes", size)
	}
	// A block given back (a drain of the pool's caches, between
	// BeforeGrow and the sizing) keeps them.
	require.Nil(t, p.Put(now[0]))
	large := grown(8 * mib)
	assert.Greater(t, p.SegmentSize(large), p.Round(large)+p.Round(large)/(policy.HeadroomDivisor+1))
	require.NoError(t, p.Check())
}
