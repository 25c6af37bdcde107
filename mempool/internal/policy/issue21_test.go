package policy_test

import (
	"testing"

	"github.com/clpool/clpool/mempool/internal/policy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holes cuts a segment into free blocks of the given sizes, in order,
// each followed by an active 512-byte spacer that keeps it from merging,
// and nothing past the last spacer; then gives the holes back in order
// (the last the newest). It returns the holes.
func holes(t *testing.T, a *policy.Arena[int], sizes ...int64) []*policy.Block[int] {
	var total int64
	for _, n := range sizes {
		total += n + 512
	}
	var bs []*policy.Block[int]
	bs = append(bs, a.Add(&policy.Segment[int]{Size: total}, sizes[0]))
	for i, n := range sizes {
		if i > 0 {
			bs = append(bs, a.Get(n))
		}
		require.NotNil(t, bs[i])
		require.NotNil(t, a.Get(512))
	}
	for _, b := range bs {
		require.Nil(t, a.Put(b))
	}
	require.NoError(t, a.Check())
	return bs
}

// A request takes a block of its own class that fits however many
// smaller blocks of the class were given back after it (issue 21: find
// looked at the newest 8 only, and with no class above, the pool went to
// the device).
func TestArenaFindsAFitBehindSmallerBlocksOfItsClass(t *testing.T) {
	const mib = 1 << 20
	a := newArena(t)
	fit := a.Round(3*mib + 123<<10) // 3.12 MiB
	sizes := []int64{fit}
	for range 9 {
		sizes = append(sizes, 3*mib)
	}
	bs := holes(t, a, sizes...)
	n := a.Round(3*mib + 100<<10) // 3.1 MiB: the class of 3 MiB
	require.Equal(t, policy.BinNumber(fit, 4), policy.BinNumber(n, 4), "one class")
	b := a.Get(n)
	require.NotNil(t, b, "the 3.12 MiB block fits")
	assert.Same(t, bs[0].Seg, b.Seg)
	assert.Equal(t, int64(0), b.Off)
	assert.Equal(t, n, b.Size)
	a.Put(b)
}

// Within its class, a request takes the smallest block that fits, before
// any of a class above.
func TestArenaTakesTheBestFitOfItsClassFirst(t *testing.T) {
	const mib = 1 << 20
	a := newArena(t)
	sizes := []int64{a.Round(3*mib + 120<<10), a.Round(3*mib + 110<<10), 4 * mib}
	for range 12 {
		sizes = append(sizes, 3*mib)
	}
	bs := holes(t, a, sizes...)
	b := a.Get(a.Round(3*mib + 100<<10))
	require.NotNil(t, b)
	assert.Equal(t, bs[1].Off, b.Off, "the 3.11 MiB block: the best fit")
	c := a.Get(a.Round(3*mib + 100<<10))
	require.NotNil(t, c)
	assert.Equal(t, bs[0].Off, c.Off, "then the 3.12 MiB one, not the 4 MiB one above")
	d := a.Get(a.Round(3*mib + 100<<10))
	require.NotNil(t, d)
	assert.Equal(t, bs[2].Off, d.Off, "then the class above")
	a.Put(b)
	a.Put(c)
	a.Put(d)
}

// Every block a policy hands out, exact-size ones included, is one of
// its segment's Blocks, and they cover the segment (issue 21: an arena's
// exact-size block was in no segment's walk, so the pool's SVM free path
// would free it without waiting for its queues).
func TestEveryBlockIsInItsSegmentsWalk(t *testing.T) {
	type pol interface {
		placement
		Check() error
	}
	bins := policy.NewBins[int](4)
	policies := map[string]pol{
		"bins":   binsChecked{bins},
		"arenas": policy.NewArenas[int](512, 4, 16<<20, policy.DefaultPreferredSegment),
	}
	sizes := []int64{1, 1000, 3000, 1000, 1 << 20, 3 << 20, 3 << 20, 24 << 20}
	for name, p := range policies {
		t.Run(name, func(t *testing.T) {
			var got []*policy.Block[int]
			for i, size := range sizes {
				b := p.Get(size)
				if b == nil {
					s := p.NewSegment(size)
					if i%3 == 2 { // as the pool makes one near the device's largest buffer
						s.Size, s.Exact, s.Oversize = size, true, false
					}
					b = p.Add(s, size)
				}
				require.NotNil(t, b)
				got = append(got, b)
			}
			exact := 0
			for _, b := range got {
				if b.Seg.Exact {
					exact++
				}
				var walked []*policy.Block[int]
				var off int64
				for x := range b.Seg.Blocks() {
					assert.Equal(t, off, x.Off)
					off += x.Size
					walked = append(walked, x)
				}
				assert.Contains(t, walked, b, "a %d-byte block (exact: %v)", b.Size, b.Seg.Exact)
				assert.Equal(t, b.Seg.Size, off, "the blocks cover the segment")
				assert.False(t, b.Seg.WhollyFree())
			}
			require.NotZero(t, exact)
			for _, b := range got {
				if s := p.Put(b); s != nil {
					assert.True(t, s.Exact, "only exact segments go at once")
					var walked []*policy.Block[int]
					for x := range s.Blocks() {
						walked = append(walked, x)
					}
					assert.Equal(t, []*policy.Block[int]{b}, walked, "the pool walks it to wait for its uses")
				}
			}
			require.NoError(t, p.Check())
		})
	}
}

type binsChecked struct{ *policy.Bins[int] }

func (binsChecked) Check() error { return nil }

// An idle arena, every block given back, has no inactive split, whether
// or not some blocks wait unmerged (issue 21: it reported the blocks
// waiting and their neighbours); with one block active, the split is the
// segment's other free blocks.
func TestNoInactiveSplitOnAnIdleArena(t *testing.T) {
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	sizes := []int64{1000, 512, 4096, 3000, 512, 8192, 1000, 2048}
	var bs []*policy.Block[int]
	for _, size := range sizes {
		b := p.Get(size)
		if b == nil {
			require.Empty(t, bs, "one segment serves them all")
			b = p.Add(p.NewSegment(size), size)
		}
		bs = append(bs, b)
	}
	seg := bs[0].Seg
	for _, b := range bs {
		require.Same(t, seg, b.Seg)
	}
	for _, b := range bs {
		require.Nil(t, p.Put(b))
	}
	require.NotZero(t, p.Waiting(), "some blocks wait unmerged")
	require.NoError(t, p.Check())
	c := *p.Counts()
	assert.Equal(t, [2]int{}, c.SplitBlocks, "nothing active: no inactive split")
	assert.Equal(t, [2]int64{}, c.SplitBytes)
	assert.Equal(t, int64(policy.FirstSegment), c.FreeBytes)

	// One block active again: every other free block is split.
	b := p.Get(3000)
	require.NotNil(t, b)
	require.Same(t, seg, b.Seg)
	require.NoError(t, p.Check())
	c = *p.Counts()
	assert.Equal(t, [2]int{c.FreeBlocks, 0}, c.SplitBlocks)
	assert.Equal(t, [2]int64{policy.FirstSegment - b.Size, 0}, c.SplitBytes)
	assert.Equal(t, c.FreeBytes, c.SplitBytes[0])

	// A large segment, with an active block: its free blocks are split;
	// the small segment is idle again.
	const mib = 1 << 20
	big := p.Add(p.NewSegment(3*mib), 3*mib/2)
	require.Equal(t, int64(3*mib), big.Seg.Size)
	require.Nil(t, p.Put(b))
	require.NoError(t, p.Check())
	c = *p.Counts()
	assert.Equal(t, [2]int{0, 1}, c.SplitBlocks, "the small segment is idle; the large one's tail is split")
	assert.Equal(t, [2]int64{0, 3 * mib / 2}, c.SplitBytes)
	o := p.Get(5 * mib / 4)
	require.NotNil(t, o)
	require.Same(t, big.Seg, o.Seg)
	c = *p.Counts()
	assert.Equal(t, [2]int{0, 1}, c.SplitBlocks)
	assert.Equal(t, [2]int64{0, mib / 4}, c.SplitBytes)
	require.Nil(t, p.Put(big))
	require.NoError(t, p.Check())
	c = *p.Counts()
	assert.Equal(t, [2]int{0, 2}, c.SplitBlocks, "on either side of o")
	assert.Equal(t, [2]int64{0, 7 * mib / 4}, c.SplitBytes)
	require.Nil(t, p.Put(o), "the segment is kept")
	require.NoError(t, p.Check())
	assert.Equal(t, [2]int{}, p.Counts().SplitBlocks)
	assert.Equal(t, [2]int64{}, p.Counts().SplitBytes)
}

// The same for a bare arena, whose counts are its own.
func TestNoInactiveSplitOnAnIdleBareArena(t *testing.T) {
	a := newArena(t)
	a.SetQuick(3, 1<<20)
	s := seg(1 << 20)
	bs := []*policy.Block[int]{a.Add(s, 512)}
	for _, n := range []int64{1024, 512, 2048, 512, 4096} {
		bs = append(bs, a.Get(n))
	}
	for _, b := range bs {
		a.Put(b)
	}
	require.NotZero(t, a.Waiting(), "some blocks wait unmerged")
	require.NoError(t, a.Check())
	c := a.Counts()
	assert.Zero(t, c.SplitBlocks)
	assert.Zero(t, c.SplitBytes)
	b := a.Get(512)
	require.NoError(t, a.Check())
	c = a.Counts()
	assert.Equal(t, [2]int{0, c.FreeBlocks}, c.SplitBlocks, "a segment not marked small is large")
	assert.Equal(t, [2]int64{0, int64(1<<20) - b.Size}, c.SplitBytes)
	a.Put(b)
	a.Flush()
	assert.Equal(t, policy.Counts{FreeBlocks: 1, FreeBytes: 1 << 20, Segments: 1}, a.Counts())
}
