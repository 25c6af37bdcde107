package trace

import (
	"cmp"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"
)

// Layout is the clairvoyant plan of a trace that Plan computes: where, in
// one contiguous range of memory, every block of the trace goes when
// every lifetime is known in advance. No allocator manages fewer bytes
// than PeakLive; Size is what one that knew the future manages by Plan's
// greedy method. Size is not a lower bound: another placement can take
// fewer bytes, down to PeakLive's rounded equivalent.
type Layout struct {
	Align    int64 // every block's size is rounded up to a multiple of it
	PeakLive int64 // the most bytes live at once, as requested (not rounded): Summarize's PeakLiveBytes
	// Size is the range's bytes: the highest end of any block. It
	// saturates at math.MaxInt64.
	Size   int64
	Blocks []Placement // one per allocation, in the trace's order
}

// Placement is where a Layout puts one block, and when the block lives.
type Placement struct {
	ID int64 // the trace's id for the block
	// Alloc and Free are the indexes, in the events given to Plan, of the
	// block's allocation and of its free; Free is len(events) for a block
	// the trace leaves live. The block lives from Alloc up to, and not
	// including, Free; two blocks whose lives share an index never share
	// a byte.
	Alloc, Free int
	// Size is the bytes the block takes: its requested size (at least 1)
	// rounded up to a multiple of the layout's Align; math.MaxInt64 if
	// that is more.
	Size int64
	// Offset is the block's place in the range. It saturates at
	// math.MaxInt64; an offset under it is exact whatever the other
	// blocks' sizes.
	Offset int64
}

// Ratio returns Size / PeakLive: the bytes the plan takes for each byte
// live at the peak. It is +Inf when PeakLive is 0 and Size is not (a
// trace of empty blocks) and NaN when both are 0 (no allocations). It is
// the ratio of the two figures as they are, saturated or not.
func (l Layout) Ratio() float64 {
	return float64(l.Size) / float64(l.PeakLive)
}

// Plan lays out the blocks of events, knowing all their lifetimes in
// advance: it takes the blocks largest first (by rounded size; of equal
// sizes, the first allocated first) and puts each at the lowest offset
// where it shares no byte with a block already placed whose lifetime
// intersects its own. This is the greedy-by-size method of TFLite's arena
// planner and XLA's heap simulator, and the same plan, figure for figure,
// as the project's offline_plan.py with the same align, for traces that
// allocate each id once (the script keys blocks by id, and of an id
// allocated again after its free keeps only the last block; Plan keeps
// every block).
//
// A block's size is rounded up to a multiple of align; a block of 0 bytes
// (or, in events built by hand, fewer) takes align bytes, as one of 1 byte
// does. The time is the event's index: events of other ops than Alloc and
// Free are ignored, and the events' times are not used. For events as
// Read returns them, each allocation is a block that lives until the free
// of its id, or to the end of the trace. Events that Read would refuse
// are planned as Summarize counts them: a free of an id that is not live
// is ignored, and an allocation of a live id leaves the block it replaces
// live to the end.
//
// Sizes and offsets are exact on the way, in 128 bits, and saturate at
// math.MaxInt64 in the Layout. Plan examines, for each block, only the
// blocks whose lifetimes intersect its own: it takes time O((n + k) log n)
// for n blocks and k pairs of blocks alive at once; on the mlp trace
// (26,951 blocks, a million such pairs), about a tenth of a second. Plan
// panics if align is less than 1.
func Plan(events []Event, align int64) Layout {
	if align < 1 {
		panic(fmt.Sprintf("trace: Plan with align %d, want at least 1", align))
	}
	l := Layout{Align: align, PeakLive: Summarize(events).PeakLiveBytes}
	var sizes []uint64 // each block's rounded size
	live := map[int64]int{}
	for i, ev := range events {
		switch ev.Op {
		case Alloc:
			live[ev.ID] = len(l.Blocks)
			l.Blocks = append(l.Blocks, Placement{ID: ev.ID, Alloc: i, Free: len(events)})
			sizes = append(sizes, roundUp(ev.Size, align))
		case Free:
			if b, ok := live[ev.ID]; ok {
				l.Blocks[b].Free = i
				delete(live, ev.ID)
			}
		}
	}
	n := len(l.Blocks)
	if n == 0 {
		return l
	}

	// The order of placement: largest first, then first allocated first.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		if c := cmp.Compare(sizes[b], sizes[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})

	// The blocks are in the order of their allocations, so the blocks
	// allocated before a block's free are a prefix of them. A block
	// allocated before the free of b and freed after b's allocation lives
	// at a time b does: the blocks placed so far that do are those of the
	// prefix in ends whose Free is past b's Alloc.
	ends := newMaxTree(n)
	offsets := make([]u128, n)
	var overlapping []span
	var top u128
	for _, b := range order {
		p := &l.Blocks[b]
		prefix := sort.Search(n, func(i int) bool { return l.Blocks[i].Alloc >= p.Free })
		overlapping = overlapping[:0]
		ends.each(prefix, p.Alloc, func(o int) {
			overlapping = append(overlapping, span{offsets[o], offsets[o].add(u128{lo: sizes[o]})})
		})
		slices.SortFunc(overlapping, func(x, y span) int { return x.from.cmp(y.from) })
		size := u128{lo: sizes[b]}
		var off u128 // the lowest offset not yet ruled out
		for _, s := range overlapping {
			if s.from.cmp(off.add(size)) >= 0 { // b fits below s
				break
			}
			if s.to.cmp(off) > 0 {
				off = s.to
			}
		}
		offsets[b] = off
		if end := off.add(size); end.cmp(top) > 0 {
			top = end
		}
		ends.set(b, p.Free)
		p.Offset, p.Size = off.saturated(), u128{lo: sizes[b]}.saturated()
	}
	l.Size = top.saturated()
	return l
}

// roundUp returns max(size, 1) rounded up to a multiple of align, which is
// at least 1. The result is less than 2^64: at most math.MaxInt64 +
// align - 1.
func roundUp(size, align int64) uint64 {
	n, a := uint64(max(size, 1)), uint64(align)
	q := n / a
	if n%a != 0 {
		q++
	}
	return q * a
}

// span is the bytes from, up to and not including to, of a block placed.
type span struct{ from, to u128 }

// u128 is an unsigned 128-bit integer, hi·2^64 + lo: Plan's offsets, which
// n blocks of up to 2^64 bytes each cannot overflow.
type u128 struct{ hi, lo uint64 }

func (x u128) add(y u128) u128 {
	lo, carry := bits.Add64(x.lo, y.lo, 0)
	return u128{x.hi + y.hi + carry, lo}
}

func (x u128) cmp(y u128) int {
	switch {
	case x.hi < y.hi || x.hi == y.hi && x.lo < y.lo:
		return -1
	case x == y:
		return 0
	}
	return 1
}

// saturated returns x clamped to math.MaxInt64.
func (x u128) saturated() int64 {
	if x.hi != 0 || x.lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(x.lo)
}

// maxTree is a segment tree over the blocks, in the order of their
// allocations, that keeps the greatest Free of the blocks placed in each
// subtree (-1 where none is placed).
type maxTree struct {
	leaves int // a power of two, at least the number of blocks
	max    []int
}

func newMaxTree(n int) *maxTree {
	leaves := 1
	for leaves < n {
		leaves *= 2
	}
	t := &maxTree{leaves: leaves, max: make([]int, 2*leaves)}
	for i := range t.max {
		t.max[i] = -1
	}
	return t
}

// set records that block i, freed at free, is placed.
func (t *maxTree) set(i, free int) {
	for node := t.leaves + i; node > 0; node /= 2 {
		t.max[node] = max(t.max[node], free)
	}
}

// each calls f with every placed block of the first prefix blocks whose
// Free is greater than after. It takes time O((k+1) log n) for k blocks.
func (t *maxTree) each(prefix, after int, f func(block int)) {
	// The canonical nodes that cover [0, prefix), bottom up.
	for lo, hi := t.leaves, t.leaves+prefix; lo < hi; lo, hi = lo/2, hi/2 {
		if lo%2 == 1 {
			t.descend(lo, after, f)
			lo++
		}
		if hi%2 == 1 {
			hi--
			t.descend(hi, after, f)
		}
	}
}

// descend calls f with every block under node whose Free is greater than
// after.
func (t *maxTree) descend(node, after int, f func(block int)) {
	if t.max[node] <= after {
		return
	}
	if node >= t.leaves {
		f(node - t.leaves)
		return
	}
	t.descend(2*node, after, f)
	t.descend(2*node+1, after, f)
}
