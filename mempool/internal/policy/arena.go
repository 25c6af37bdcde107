package policy

import (
	"fmt"
	"math"
)

// MinBlock is the smallest block an arena hands out, and the unit its
// blocks are rounded to when the device asks for less alignment.
const MinBlock = 512

// indexLeadingBits caps the leading bits of an arena's size classes: more
// would make its bitmaps large for no gain (1/1024 of a block's size).
const indexLeadingBits = 10

// Arena cuts segments into blocks: a request takes the free block that
// fits it best and splits off what it does not need; a block given back
// merges with its free neighbours. Free blocks are indexed by size class
// (the bins of BinNumber) in TLSF's two-level index (freeIndex), so the
// first class above a request's own that has a block (every block of
// which fits) is found in O(1); each class's list is sorted by size, so
// whether one of the request's own class fits is known in O(1) too.
//
// The free blocks of segments sized for one request (own segments, see
// Segment.own) are indexed apart: only requests of at least ownMin bytes
// take them, so that small blocks do not settle in the tail a large block
// left and pin the segment when it goes (on a trace of many sizes, most
// of the scattered free bytes were such segments held by a block of a few
// KiB). A smaller request takes a wholly free own segment only when no
// other block fits it, which then becomes an ordinary segment. A request
// that takes a block of an own segment more than ownSpan times its size
// (as no ordinary block fits it: see findOwned) takes the top of that
// block, not its bottom, so that the segment's head stays in one piece
// for the next request of about the segment's size.
//
// The free blocks of huge segments (made for one request over half the
// preferred segment size) are indexed apart too: they serve requests of
// at least ownMin bytes, but none of at most the growth step while the
// segment is more than twice the step (see passOver), and a wholly free
// one is never adopted.
//
// An arena may defer merging, as dlmalloc's fast bins do: a few blocks
// given back wait unmerged on quick lists, by exact size (see SetQuick), and a request
// of exactly one's size takes it back as it is (no split, no merge, its
// sub-buffer kept). Any other request, and taking a segment out
// (TakeLargest), first merges them all (Flush): every other choice is
// made among merged blocks, as if none had waited.
type Arena[T comparable] struct {
	align int64 // block sizes and offsets are multiples of it
	lb    int   // leading bits of the size classes

	sized freeIndex[T] // the merged free blocks of ordinary segments
	owned freeIndex[T] // the merged free blocks of own segments
	tiny  freeIndex[T] // the merged free blocks of tiny segments
	huge  freeIndex[T] // the merged free blocks of huge segments (see passOver)
	// tinyMax is the largest request that takes blocks of tiny segments
	// only (0: none do, and the arena has no tiny segment).
	tinyMax int64
	// tinySplit is the free bytes of the tiny segments in use (a part
	// of the counts' SplitBytes), which no other request can take.
	tinySplit int64
	// ownMin is the least request that takes blocks of own segments.
	ownMin int64
	quick  quickLists[T] // the free blocks waiting unmerged

	segs  []*Segment[T] // every segment
	empty []*Segment[T] // the wholly free ones, in the order they became so
	bytes int64         // the bytes of every segment
	// The free set, kept up to date: the policy's counts (or the arena's
	// own), whose inactive split, by the segments' kinds, is the free
	// blocks of the segments that have an active block.
	counts *Counts
	stale  []T
	noPark bool      // a cache dropped goes to stale at once (SetParking)
	spare  *Block[T] // blocks merged away, for split to reuse (linked by fnext)
	// step, if set, returns the growth step: the segment a request of
	// at most that size would get (see find).
	step func() int64
}

// kindOf returns the index of s's kind in Counts' SplitBlocks: 0 for a
// small segment, 1 for a large one.
func kindOf[T comparable](s *Segment[T]) uint8 {
	if s.Small {
		return 0
	}
	return 1
}

// NewArena returns an empty arena whose blocks are multiples of align (a
// power of two, at least MinBlock) and whose size classes have
// leadingBits bits of mantissa (at most 10 are used).
func NewArena[T comparable](align int64, leadingBits int) *Arena[T] {
	if align < MinBlock || align&(align-1) != 0 {
		panic(fmt.Sprintf("policy: arena alignment %d is not a power of two of at least %d", align, MinBlock))
	}
	lb := min(leadingBits, indexLeadingBits)
	return &Arena[T]{align: align, lb: lb, sized: newFreeIndex[T](lb), owned: newFreeIndex[T](lb), tiny: newFreeIndex[T](lb),
		huge: newFreeIndex[T](lb), counts: new(Counts)}
}

// SetOwnMin sets the least request that takes blocks of own segments.
func (a *Arena[T]) SetOwnMin(n int64) { a.ownMin = n }

// SetTinyMax sets the largest request that takes blocks of tiny segments
// (Segment.tiny), and no other; 0, the default, makes none tiny. Set it
// before the first segment.
func (a *Arena[T]) SetTinyMax(n int64) { a.tinyMax = n }

// FreeBytes returns the bytes of the free blocks.
func (a *Arena[T]) FreeBytes() int64 { return a.counts.FreeBytes }

// SplitBytes returns the bytes of the free blocks of segments that have
// an active block.
func (a *Arena[T]) SplitBytes() int64 { return a.counts.SplitBytes[0] + a.counts.SplitBytes[1] }

// TinySplitBytes returns the part of SplitBytes in tiny segments.
func (a *Arena[T]) TinySplitBytes() int64 { return a.tinySplit }

// Bytes returns the bytes of every segment.
func (a *Arena[T]) Bytes() int64 { return a.bytes }

// Round returns the bytes of the block that serves a request of size: a
// multiple of the alignment, at least one unit.
func (a *Arena[T]) Round(size int64) int64 { return Round(size, a.align) }

// Round returns the size of an arena's block for a request of size, its
// blocks aligned to align (a power of two): size rounded up to a multiple
// of align, at least align; math.MaxInt64, which no block fits, if that
// multiple is past it (the pool caps requests far below).
func Round(size, align int64) int64 {
	if size <= align {
		return align
	}
	if size > math.MaxInt64-(align-1) {
		return math.MaxInt64
	}
	return (size + align - 1) &^ (align - 1)
}

// SetQuick lets up to n blocks of at most maxSize bytes given back wait
// unmerged (see Arena), and up to min(n, DefaultQuickLarge) larger ones;
// n = 0, the default, merges every block at once. Blocks waiting are
// merged first.
func (a *Arena[T]) SetQuick(n int, maxSize int64) {
	a.Flush()
	n = max(n, 0)
	a.quick.setLimits(n, min(n, DefaultQuickLarge), maxSize)
}

// Get takes a free block of at least n bytes (n from Round), splits off
// the bytes it does not need, and returns it active; nil if no free block
// fits. A block waiting unmerged of exactly n bytes comes first. Else it
// merges the waiting blocks, so that the choice is made among merged
// blocks only, and takes the smallest block that fits: of n's own class
// if one there fits, else of the next class that has one, all of whose
// blocks fit.
func (a *Arena[T]) Get(n int64) *Block[T] { return a.GetOn(n, 0) }

// GetOn is Get for a request on queue q (0: none): of the blocks of n
// bytes waiting unmerged, it prefers one that only q may still use.
func (a *Arena[T]) GetOn(n int64, q int32) *Block[T] {
	if a.quick.len() > 0 {
		// A tiny request takes a waiting block of its size too, even in
		// a segment with no other block in use: keeping it for the
		// tiny segments cost particles 1.130x -> 1.182x its plan.
		if b := a.quick.getOn(n, q); b != nil {
			a.quick.remove(b)
			a.take(b)
			return b
		}
	}
	a.Flush()
	b := a.find(n)
	if b == nil {
		return nil
	}
	// A block of an own segment much larger than the request (taken as
	// no ordinary block fits: see findOwned) gives the request its top:
	// its head stays in one piece for a request of the segment's size.
	a.cut(b, n, b.Seg.own && !spans(b.Seg, n))
	return b
}

// GetAny is Get when nothing else is left (the pool's out-of-memory
// ladder): the smallest free block of at least n bytes, of any segment
// but an oversize one, whatever the placement rules (an own segment's
// blocks kept for large requests; tiny segments' blocks for tiny ones,
// which take no block of a wholly free segment), cut from the block's
// bottom. nil if none fits.
func (a *Arena[T]) GetAny(n int64) *Block[T] {
	a.Flush()
	c := BinNumber(n, a.lb)
	var b *Block[T]
	for _, x := range a.indexes() {
		if f := fitIn(x, c, n); f != nil && (b == nil || f.Size < b.Size) {
			b = f
		}
	}
	if b != nil {
		a.cut(b, n, false)
	}
	return b
}

// cut takes b, free and listed, off its index, makes it active and cuts
// it down to n bytes, its top n bytes if top (see split).
func (a *Arena[T]) cut(b *Block[T], n int64, top bool) {
	if b.Whole() {
		b.Seg.occupant = n
	}
	a.index(b).remove(b)
	a.take(b)
	a.split(b, n, top)
	a.unpark(b)
}

// GetWhole takes a wholly free oversize segment of n to n+slack bytes
// (the smallest such) and returns its block, active; nil if there is none.
func (a *Arena[T]) GetWhole(n, slack int64) *Block[T] {
	var best *Segment[T]
	for _, s := range a.empty {
		if s.Oversize && s.Size >= n && s.Size < n+slack && (best == nil || s.Size < best.Size) {
			best = s
		}
	}
	if best == nil {
		return nil
	}
	a.take(best.first)
	return best.first
}

// Add registers a new segment (its Size a multiple of the alignment, or
// Oversize), and returns a block of n bytes cut from its start, active.
func (a *Arena[T]) Add(seg *Segment[T], n int64) *Block[T] {
	b := &Block[T]{Seg: seg, Size: seg.Size}
	seg.first, seg.blocks, seg.arena, seg.idx = b, 1, a, len(a.segs)
	seg.active, seg.kind, seg.occupant = 1, kindOf(seg), n
	a.segs = append(a.segs, seg)
	a.bytes += seg.Size
	a.counts.Segments++
	a.split(b, n, false)
	a.unpark(b)
	return b
}

// Flush merges every block waiting unmerged with its free neighbours.
func (a *Arena[T]) Flush() {
	for b := a.quick.pop(); b != nil; b = a.quick.pop() {
		a.coalesce(b)
	}
}

// Waiting returns how many blocks wait unmerged.
func (a *Arena[T]) Waiting() int { return a.quick.len() }

// Put takes back an active block: it becomes free, and waits unmerged if
// there is room on the quick lists (and it does not cover its segment),
// else merges with its free neighbours. It returns the segment if the
// block now covers it (the segment is wholly free), else nil.
func (a *Arena[T]) Put(b *Block[T]) (whole *Segment[T]) {
	b.free = true
	s, size := b.Seg, b.Size
	c, k := a.counts, s.kind&1
	c.FreeBlocks++
	c.FreeBytes += size
	if s.active--; s.active > 0 {
		c.SplitBlocks[k]++
		c.SplitBytes[k] += size
		if s.tiny {
			a.tinySplit += size
		}
	} else { // idle now: its other free blocks are no longer split
		c.SplitBlocks[k] -= s.blocks - 1
		c.SplitBytes[k] -= s.Size - size
		if s.tiny {
			a.tinySplit -= s.Size - size
		}
	}
	if a.quick.admits(size) && !s.Oversize && !b.Whole() {
		a.quick.push(b)
		return nil
	}
	return a.coalesce(b)
}

// coalesce merges a free block, counted but on no list, with its free
// neighbours and lists the result; it returns the segment if the block
// now covers it.
func (a *Arena[T]) coalesce(b *Block[T]) (whole *Segment[T]) {
	// Loops, as blocks waiting unmerged can make runs of free blocks.
	for p := b.prev; p != nil && p.free; p = b.prev {
		a.unlist(p)
		a.merge(p, b)
		b = p
	}
	for n := b.next; n != nil && n.free; n = b.next {
		a.unlist(n)
		a.merge(b, n)
	}
	if !b.Seg.Oversize {
		a.index(b).push(b)
	}
	if !b.Whole() {
		return nil
	}
	a.empty = append(a.empty, b.Seg)
	return b.Seg
}

// Remove takes a wholly free segment out of the arena, for the pool to
// free. The cache of its block goes to the stale list.
func (a *Arena[T]) Remove(seg *Segment[T]) {
	b := seg.first
	if seg.arena != a || !b.free || !b.Whole() {
		panic("policy: Remove of a segment that is not wholly free in this arena")
	}
	if !seg.Oversize {
		a.index(b).remove(b)
	}
	a.take(b)
	a.dropCache(b)
	for _, pk := range seg.parked {
		a.stale = append(a.stale, pk.cache)
	}
	seg.parked = nil
	last := a.segs[len(a.segs)-1]
	a.segs[seg.idx], last.idx = last, seg.idx
	a.segs[len(a.segs)-1] = nil
	a.segs = a.segs[:len(a.segs)-1]
	a.bytes -= seg.Size
	a.counts.Segments--
	seg.arena = nil
}

// Empty returns the wholly free segments, in the order they became so.
// The slice is the arena's own: do not keep or change it.
func (a *Arena[T]) Empty() []*Segment[T] { return a.empty }

// LargestSegment returns the size of the largest segment, 0 if none.
func (a *Arena[T]) LargestSegment() int64 {
	var m int64
	for _, s := range a.segs {
		m = max(m, s.Size)
	}
	return m
}

// LargestFree returns the size of the largest free block, 0 if none: a
// block waiting unmerged counts with its free neighbours, as merging
// (which any request it does not serve as it is makes first) would make
// it.
func (a *Arena[T]) LargestFree() int64 { return a.largest(true) }

// largest is LargestFree, of the blocks of segments that are not
// oversize too unless oversize is set.
func (a *Arena[T]) largest(oversize bool) int64 {
	var m int64
	for _, s := range a.empty {
		if oversize && s.Oversize {
			m = max(m, s.Size) // oversize segments are not indexed
		}
	}
	for _, x := range a.indexes() {
		if c, ok := x.largest(); ok {
			m = max(m, x.tail(c).Size)
		}
	}
	for _, b := range a.quick.blocks {
		run := b.Size
		for p := b.prev; p != nil && p.free; p = p.prev {
			run += p.Size
		}
		for n := b.next; n != nil && n.free; n = n.next {
			run += n.Size
		}
		m = max(m, run)
	}
	return m
}

// Counts returns the sizes of the arena's free set, its split blocks
// counted by their segments' kind (small, or large), and its segments.
func (a *Arena[T]) Counts() Counts {
	c := *a.counts
	c.Segments = len(a.segs)
	return c
}

// HasStale reports whether the arena dropped caches that TakeStale has not
// taken yet.
func (a *Arena[T]) HasStale() bool { return len(a.stale) > 0 }

// TakeStale appends the caches the arena dropped since the last call to
// dst, for the pool to release, and forgets them.
func (a *Arena[T]) TakeStale(dst []T) []T {
	if len(a.stale) == 0 {
		return dst
	}
	dst = append(dst, a.stale...)
	clear(a.stale)
	a.stale = a.stale[:0]
	return dst
}

// take marks a free block, already out of the index, active: out of the
// free set, and its segment no longer idle if it was. (Put does the
// converse.)
func (a *Arena[T]) take(b *Block[T]) {
	if b.Whole() {
		a.forgetEmpty(b.Seg)
	}
	b.free = false
	s, size := b.Seg, b.Size
	c, k := a.counts, s.kind&1
	c.FreeBlocks--
	c.FreeBytes -= size
	if s.active++; s.active > 1 {
		c.SplitBlocks[k]--
		c.SplitBytes[k] -= size
		if s.tiny {
			a.tinySplit -= size
		}
	} else { // idle no more: its other free blocks are split
		c.SplitBlocks[k] += s.blocks - 1
		c.SplitBytes[k] += s.Size - size
		if s.tiny {
			a.tinySplit += s.Size - size
		}
	}
}

// forgetEmpty takes seg off the list of wholly free segments.
func (a *Arena[T]) forgetEmpty(seg *Segment[T]) {
	for i, s := range a.empty {
		if s == seg {
			a.empty = append(a.empty[:i], a.empty[i+1:]...)
			return
		}
	}
}

// split cuts an active block down to n bytes, making the rest a free block
// after it (or, if top, before it: the block keeps the top n bytes of its
// range), if the rest is at least one unit and the segment may be split.
func (a *Arena[T]) split(b *Block[T], n int64, top bool) {
	rest := b.Size - n
	if rest < a.align || b.Seg.Oversize {
		return
	}
	r := a.spare
	if r != nil {
		a.spare = r.fnext
	} else {
		r = new(Block[T])
	}
	// Field by field: a composite literal of a type with pointers is
	// built apart and copied in, at several times the cost.
	r.Seg, r.Size, r.free, r.fnext = b.Seg, rest, true, nil
	r.Uses = append(r.Uses[:0], b.Uses...)
	a.dropCache(b) // parked under b's range before it changes
	if top {
		r.Off, r.prev, r.next = b.Off, b.prev, b
		if b.prev != nil {
			b.prev.next = r
		} else {
			b.Seg.first = r
		}
		b.prev = r
		b.Off += rest
	} else {
		r.Off, r.prev, r.next = b.Off+n, b, b.next
		if b.next != nil {
			b.next.prev = r
		}
		b.next = r
	}
	b.Size = n
	b.Seg.blocks++
	a.counts.FreeBlocks++
	a.counts.FreeBytes += rest
	a.counts.SplitBlocks[b.Seg.kind&1]++ // b is active
	a.counts.SplitBytes[b.Seg.kind&1] += rest
	if b.Seg.tiny {
		a.tinySplit += rest
	}
	a.index(r).push(r)
}

// merge joins free block n into its free neighbour b before it; both are
// out of the index. b is still counted once as free, n is no more.
func (a *Arena[T]) merge(b, n *Block[T]) {
	a.dropCache(b)
	a.dropCache(n)
	b.Size += n.Size
	b.next = n.next
	if n.next != nil {
		n.next.prev = b
	}
	b.Seg.blocks--
	a.counts.FreeBlocks--
	if b.Seg.active > 0 {
		a.counts.SplitBlocks[b.Seg.kind&1]--
	}
	b.Uses = mergeUses(b.Uses, n.Uses)
	*n = Block[T]{fnext: a.spare, Uses: n.Uses[:0]}
	a.spare = n
}

// SetParking says whether the cache of a block whose range changes waits
// with its segment for a block of the same range (on, the default), or
// goes to the stale list at once. Off, no two caches of the arena ever
// overlap: the pool turns it off where the runtime crashes on partly
// overlapping sub-buffers (NVIDIA's). Turned off, it sends the caches
// parked so far to the stale list.
func (a *Arena[T]) SetParking(on bool) {
	a.noPark = !on
	if on {
		return
	}
	for _, s := range a.segs {
		for _, pk := range s.parked {
			a.stale = append(a.stale, pk.cache)
		}
		s.parked = nil
	}
}

// dropCache parks the cache of a block whose range is about to change
// (see SetParking).
func (a *Arena[T]) dropCache(b *Block[T]) {
	var zero T
	if b.Cache == zero {
		return
	}
	s := b.Seg
	switch {
	case a.noPark:
		a.stale = append(a.stale, b.Cache)
	case len(s.parked) == maxParked:
		a.stale = append(a.stale, s.parked[0].cache)
		s.parked = append(s.parked[:0], s.parked[1:]...)
		fallthrough
	default:
		s.parked = append(s.parked, parked[T]{b.Off, b.Size, b.Cache})
	}
	b.Cache = zero
}

// unpark gives an active block the cache parked for its range, if any.
func (a *Arena[T]) unpark(b *Block[T]) {
	var zero T
	if b.Cache != zero {
		return
	}
	s := b.Seg
	for i, pk := range s.parked {
		if pk.off == b.Off && pk.size == b.Size {
			b.Cache = pk.cache
			s.parked = append(s.parked[:i], s.parked[i+1:]...)
			return
		}
	}
}

// unlist takes a free block off whichever list it is on.
func (a *Arena[T]) unlist(b *Block[T]) {
	if b.quick {
		a.quick.remove(b)
		return
	}
	a.index(b).remove(b)
}

// indexes returns the arena's free indexes, every one.
func (a *Arena[T]) indexes() [4]*freeIndex[T] {
	return [4]*freeIndex[T]{&a.sized, &a.owned, &a.tiny, &a.huge}
}

// index returns the index that lists the free blocks of b's segment.
func (a *Arena[T]) index(b *Block[T]) *freeIndex[T] {
	if b.Seg.tiny {
		return &a.tiny
	}
	if b.Seg.huge {
		return &a.huge
	}
	if b.Seg.own {
		return &a.owned
	}
	return &a.sized
}

// find returns a free block of at least n bytes that n may take, or nil:
// the smallest, but for a block of an own or huge segment more than
// ownSpan times n, which it takes only if no ordinary block fits (see
// findOwned). A request of up to tinyMax bytes takes only blocks of
// tiny segments, which no other takes. A request of at least ownMin
// bytes may take any other block; a smaller one, only blocks of
// ordinary segments, or, if none fits, the smallest wholly free own
// segment that does, which becomes ordinary (not a huge one). No
// request of at most the growth step takes a block of a huge segment
// more than twice the step.
func (a *Arena[T]) find(n int64) *Block[T] {
	b := a.place(n)
	if a.huge.n > 0 && n >= a.ownMin && n > a.tinyMax && a.step != nil {
		return a.orHuge(b, n)
	}
	return b
}

// orHuge returns the smallest free block of a huge segment that n may
// take (see passOver) if it is smaller than b, else b. The growth step is
// asked only when such a block would win.
func (a *Arena[T]) orHuge(b *Block[T], n int64) *Block[T] {
	h := fitIn(&a.huge, BinNumber(n, a.lb), n)
	if h == nil || b != nil && b.Size <= h.Size {
		return b
	}
	step := a.step()
	for h != nil && passOver(h.Seg, n, step) { // the next in size order: the index is finite
		h = a.huge.next(h)
	}
	if h == nil || b != nil && (b.Size <= h.Size || !spans(h.Seg, n)) {
		return b // as findOwned: a block much smaller than its segment goes only where no ordinary one fits
	}
	return h
}

// passOver reports whether a request of n bytes passes over the free
// blocks of s, the growth step being step: a huge segment more than
// twice the step serves no request a step's segment would. A block of it
// so taken, wholly free or in the tail a smaller huge array left, would
// pin it when its array goes, and the next array of its size would take
// another (a trace of boundary sizes around three arrays of 128 MiB held
// 1.61x its plan; 1.05x so). Passed over, it serves those arrays, or
// BeforeGrow frees it when the pool needs the room.
func passOver[T comparable](s *Segment[T], n, step int64) bool {
	return s.huge && n <= step && s.Size > 2*step
}

// place is find's choice among the blocks of other than huge segments.
func (a *Arena[T]) place(n int64) *Block[T] {
	if n <= a.tinyMax {
		c := BinNumber(n, a.lb)
		if b := fitIn(&a.tiny, c, n); b != nil {
			return b
		}
		return a.hole(c, n)
	}
	if a.owned.n > 0 {
		return a.findOwned(n)
	}
	c := BinNumber(n, a.lb)
	if b := a.sized.fit(c, n); b != nil {
		return b
	}
	if c, ok := a.sized.above(c); ok {
		return a.sized.head(c)
	}
	return nil
}

// hole returns the smallest free block of an ordinary segment in use of
// at least n bytes (of class c), or nil: fitIn of the ordinary index,
// passing over wholly free segments (as many as the arena keeps, at
// most).
func (a *Arena[T]) hole(c uint32, n int64) *Block[T] {
	x := &a.sized
	b := x.fit(c, n)
	for {
		for ; b != nil; b = b.fnext {
			if !b.Whole() {
				return b
			}
		}
		next, ok := x.above(c)
		if !ok {
			return nil
		}
		c, b = next, x.head(next)
	}
}

// findOwned is find when an own segment has a free block. Of a smaller
// block of an own segment and an ordinary one that fits, it takes the own
// segment's only if that segment is at most ownSpan times n: a block
// much smaller than its segment, cut from the tail a smaller array left
// there, pins the segment when that array goes, and the next array of the
// segment's size takes another (particles remade beside a neighbour list
// of random size held 1.83x their plan, 1.39x so; random-mixed 1.157x,
// 1.145x). If no ordinary block fits, it takes the own segment's block
// whatever its size; GetOn cuts the request from the block's top if the
// segment is more than ownSpan times n (see spans), from its bottom
// otherwise (1.39x -> 1.085x on those particles).
func (a *Arena[T]) findOwned(n int64) *Block[T] {
	c := BinNumber(n, a.lb)
	b := fitIn(&a.sized, c, n)
	if b != nil && (b.Size == n || n < a.ownMin) {
		return b
	}
	if n < a.ownMin {
		return a.adopt(n)
	}
	if o := fitIn(&a.owned, c, n); o != nil && (b == nil || o.Size < b.Size && spans(o.Seg, n)) {
		return o
	}
	return b
}

// ownSpan bounds how much larger than a request an own segment may be
// for the request to take one of its blocks while an ordinary block fits
// it (see findOwned). 4 took random-mixed to 1.211x its plan; 8 is best
// of those measured.
const ownSpan = 8

// spans reports whether s is at most ownSpan times n (see findOwned).
func spans[T comparable](s *Segment[T], n int64) bool { return s.Size/ownSpan <= n }

// adopt makes the smallest wholly free own segment of at least n bytes
// an ordinary one and returns its block, still listed; nil if none.
func (a *Arena[T]) adopt(n int64) *Block[T] {
	var best *Segment[T]
	for _, s := range a.empty {
		if s.own && !s.huge && s.Size >= n && (best == nil || s.Size < best.Size) {
			best = s
		}
	}
	if best == nil {
		return nil
	}
	a.owned.remove(best.first)
	best.own = false
	a.sized.push(best.first)
	return best.first
}

// fitIn returns the smallest block of x of at least n bytes (of class
// c), or nil: the smallest that fits in n's own class (whose blocks may
// be smaller than n), else the smallest of the next class that has a
// block, all of whose blocks fit.
func fitIn[T comparable](x *freeIndex[T], c uint32, n int64) *Block[T] {
	if b := x.fit(c, n); b != nil {
		return b
	}
	if c, ok := x.above(c); ok {
		return x.head(c)
	}
	return nil
}

// Check verifies the arena's invariants, for tests: blocks tile each
// segment without gap or overlap, are aligned, no two free neighbours
// unless one waits unmerged, every free block listed under its class
// (on the quick lists if it waits, else in the index, whose lists are
// sorted), and the counts, the segments' and the inactive split's
// included, agree with the blocks counted afresh.
func (a *Arena[T]) Check() error {
	var c Counts
	var splitBytes [2]int64
	var splitBlocks [2]int
	var bytes, tinySplit int64
	sized, quick, empty := 0, 0, 0
	for i, s := range a.segs {
		bytes += s.Size
		if s.idx != i || s.arena != a {
			return fmt.Errorf("segment %d: idx %d", i, s.idx)
		}
		off, n := int64(0), 0
		active, free := 0, int64(0)
		for b := s.first; b != nil; b = b.next {
			n++
			if !b.free {
				active++
			} else {
				free += b.Size
			}
			if b.Seg != s || b.Off != off || b.Size <= 0 {
				return fmt.Errorf("segment %d: block %d at %d, want %d (size %d)", i, n, b.Off, off, b.Size)
			}
			if !s.Oversize && (b.Off%a.align != 0 || b.Size%a.align != 0) {
				return fmt.Errorf("segment %d: block [%d, +%d) not aligned to %d", i, b.Off, b.Size, a.align)
			}
			if b.next != nil && b.next.prev != b {
				return fmt.Errorf("segment %d: broken links at %d", i, b.Off)
			}
			if b.quick && !b.free {
				return fmt.Errorf("segment %d: active block at %d on a quick list", i, b.Off)
			}
			if b.free {
				c.FreeBlocks++
				c.FreeBytes += b.Size
				if b.next != nil && b.next.free && !b.quick && !b.next.quick {
					return fmt.Errorf("segment %d: free neighbours at %d and %d not merged", i, b.Off, b.next.Off)
				}
				switch {
				case b.quick:
					quick++
					if !a.quick.listed(b) {
						return fmt.Errorf("segment %d: waiting block at %d not listed under its size", i, b.Off)
					}
				case !s.Oversize:
					sized++
					if b.class != BinNumber(b.Size, a.lb) || !a.index(b).listed(b) {
						return fmt.Errorf("segment %d: free block at %d not listed under its class", i, b.Off)
					}
				}
				if b.Whole() {
					empty++
				}
			}
			off += b.Size
		}
		if off != s.Size || n != s.blocks {
			return fmt.Errorf("segment %d: blocks cover %d of %d bytes, %d blocks counted %d", i, off, s.Size, n, s.blocks)
		}
		if active != s.active {
			return fmt.Errorf("segment %d: %d active blocks, counted %d", i, active, s.active)
		}
		if active > 0 {
			splitBlocks[s.kind] += n - active
			splitBytes[s.kind] += free
			if s.tiny {
				tinySplit += free
			}
		}
	}
	if tinySplit != a.tinySplit {
		return fmt.Errorf("tiny segments' split bytes %d, counted %d", tinySplit, a.tinySplit)
	}
	if c := a.Counts(); c.SplitBlocks != splitBlocks || c.SplitBytes != splitBytes {
		return fmt.Errorf("inactive split %v blocks of %v bytes, counted %v of %v", splitBlocks, splitBytes, c.SplitBlocks, c.SplitBytes)
	}
	if bytes != a.bytes {
		return fmt.Errorf("segments of %d bytes, counted %d", bytes, a.bytes)
	}
	for _, s := range a.empty {
		if s.arena != a || !s.first.free || !s.first.Whole() {
			return fmt.Errorf("a segment listed wholly free is not")
		}
	}
	if empty != len(a.empty) {
		return fmt.Errorf("%d segments wholly free, %d listed", empty, len(a.empty))
	}
	if got := a.Counts(); c.FreeBlocks != got.FreeBlocks || c.FreeBytes != got.FreeBytes {
		return fmt.Errorf("counts %+v, counted %+v", c, got)
	}
	large := 0
	for _, b := range a.quick.blocks {
		if b.Size > a.quick.maxSize {
			large++
		}
	}
	if quick != a.quick.len() || large != a.quick.large || large > a.quick.maxLarge || quick-large > a.quick.max {
		return fmt.Errorf("%d blocks wait unmerged (%d large), %d listed (%d large), at most %d and %d large may",
			quick, large, a.quick.len(), a.quick.large, a.quick.max, a.quick.maxLarge)
	}
	total, bad := 0, false
	for _, x := range a.indexes() {
		if err := x.check(); err != nil {
			return err
		}
		x.each(func(c uint32, b *Block[T]) {
			total++
			bad = bad || b.class != c || !b.free || b.quick || a.index(b) != x
		})
	}
	n := 0
	for _, x := range a.indexes() {
		n += x.n
	}
	if bad || total != sized || n != sized {
		return fmt.Errorf("%d blocks indexed (%d counted), %d free blocks to index", total, n, sized)
	}
	return nil
}
