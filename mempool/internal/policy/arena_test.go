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
	assert.Equal(t, policy.Counts{FreeBlocks: 1, FreeBytes: 2048, SplitBlocks: [2]int{1, 0}, SplitBytes: [2]int64{2048, 0}, Segments: 1}, a.Counts())
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
	b1 := p.Add(seg(policy.SmallSegment), 1024)
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

func TestOversizeSegmentsAreNeverSplit(t *testing.T) {
	p := policy.NewArenas[int](512, 4, 8<<20, policy.DefaultPreferredSegment)
	assert.True(t, p.Oversize(9<<20))
	assert.False(t, p.Oversize(8<<20))
	n := p.SegmentSize(9<<20 + 1)
	assert.Equal(t, int64(9<<20+256<<10), n, "rounded to OwnUnit")
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
	p := policy.NewArenas[int](512, 4, 0, 256<<20)
	assert.Equal(t, int64(policy.SmallSegment), p.SegmentSize(1))
	assert.Equal(t, int64(policy.SmallSegment), p.SegmentSize(1<<20))
	assert.Equal(t, int64(3<<20+256<<10), p.SegmentSize(3<<20+1), "a tiny program pays for its request only, to OwnUnit")
	assert.Equal(t, int64(199<<20), p.SegmentSize(199<<20), "over half the preferred size: its own segment")
	assert.Equal(t, int64(199<<20+256<<10), p.SegmentSize(199<<20+1))
	// The pool grows: a segment is 1/16 of what it holds.
	var bs []*policy.Block[int]
	for range 32 {
		bs = append(bs, p.Add(seg(64<<20), 64<<20))
	}
	assert.Equal(t, int64(128<<20), p.SegmentSize(3<<20))
	assert.Equal(t, int64(128<<20), p.SegmentSize(3<<20), "the pool's ladder, not the policy, shrinks a refused segment")
	for _, b := range bs {
		p.Put(b)
	}
	assert.Len(t, p.BeforeGrow(1<<30), 32, "growing past the high-water mark frees the empty segments first")
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

// BeforeGrow keeps wholly free segments while the pool grows less than
// its slack past its high-water mark; TakeKept then gives them up, and
// past the slack BeforeGrow does.
func TestArenasSlackBeforeGrowing(t *testing.T) {
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	grow := func(size int64) *policy.Block[int] {
		require.Nil(t, p.Get(size))
		require.Empty(t, p.BeforeGrow(size))
		return p.Add(p.NewSegment(size), size)
	}
	big := grow(32 << 20)
	kept := grow(32 << 20)
	require.Nil(t, p.Put(kept)) // wholly free: 64 MiB held, the high-water mark

	// A small segment (2 MiB) passes the mark but not 1/16 of the 64
	// MiB the blocks once took: the free segment stays.
	assert.Empty(t, p.BeforeGrow(1000))
	assert.Empty(t, p.TakeKept(0), "nothing past the mark yet")
	gone := p.TakeKept(policy.SmallSegment)
	require.Len(t, gone, 1)
	assert.Equal(t, int64(32<<20), gone[0].Size)

	require.Nil(t, p.Put(big))
	// 34 MiB more passes the mark (32 + 34 > 64 MiB) within the slack;
	// 40 MiB passes the slack too: the wholly free 32 MiB goes.
	assert.Empty(t, p.BeforeGrow(34<<20))
	gone = p.BeforeGrow(40 << 20)
	require.Len(t, gone, 1)
	assert.Equal(t, int64(32<<20), gone[0].Size)
	require.NoError(t, p.Check())
}
