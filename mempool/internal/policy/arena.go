package policy

import (
	"errors"
	"fmt"
	"math/bits"
)

// MinBlock is the smallest block an arena hands out, and the unit its
// blocks are rounded to when the device asks for less alignment.
const MinBlock = 512

// indexLeadingBits caps the leading bits of an arena's size classes: more
// would make its bitmaps large for no gain (1/1024 of a block's size).
const indexLeadingBits = 10

// Arena cuts segments into blocks: a request takes a free block of a good
// fit and splits off what it does not need; a block given back merges
// with its free neighbours. Free blocks are indexed by size class (the
// bins of BinNumber) in TLSF's two-level index: a bitmap of exponents
// with a free block, and per exponent a bitmap of its classes, so the
// first class that fits every request of a size is found in O(1).
type Arena[T comparable] struct {
	align int64 // block sizes and offsets are multiples of it
	lb    int   // leading bits of the size classes

	heads classTable[*Block[T]] // the first free block of each class
	top   uint64                // bit e: exponent e has a free block
	marks [64][]uint64          // marks[e], bit m: class e<<lb|m has a free block

	segs       []*Segment[T] // every segment
	empty      []*Segment[T] // the wholly free ones, in the order they became so
	emptyBytes int64
	counts     Counts  // its own free set
	shared     *Counts // the policy's, where this arena's splits go in SplitBlocks[kind]
	kind       int
	stale      []T
	spare      *Block[T] // blocks merged away, for split to reuse (linked by fnext)
}

// NewArena returns an empty arena whose blocks are multiples of align (a
// power of two, at least MinBlock) and whose size classes have
// leadingBits bits of mantissa (at most 10 are used).
func NewArena[T comparable](align int64, leadingBits int) *Arena[T] {
	if align < MinBlock || align&(align-1) != 0 {
		panic(fmt.Sprintf("policy: arena alignment %d is not a power of two of at least %d", align, MinBlock))
	}
	lb := min(leadingBits, indexLeadingBits)
	return &Arena[T]{align: align, lb: lb, heads: newClassTable[*Block[T]](lb), shared: new(Counts)}
}

// free counts a change of the free set in the arena's counts and the
// policy's.
func (a *Arena[T]) free(blocks int, bytes int64) {
	a.counts.FreeBlocks += blocks
	a.counts.FreeBytes += bytes
	a.shared.FreeBlocks += blocks
	a.shared.FreeBytes += bytes
}

// publish writes the arena's split blocks into the policy's counts.
func (a *Arena[T]) publish() {
	a.shared.SplitBlocks[a.kind] = a.counts.FreeBlocks - len(a.empty)
	a.shared.SplitBytes[a.kind] = a.counts.FreeBytes - a.emptyBytes
}

// Round returns the bytes of the block that serves a request of size: a
// multiple of the alignment, at least one unit.
func (a *Arena[T]) Round(size int64) int64 {
	if size <= a.align {
		return a.align
	}
	return (size + a.align - 1) &^ (a.align - 1)
}

// Get takes a free block of at least n bytes (n from Round), splits off
// the bytes it does not need, and returns it active; nil if no free block
// fits. It looks first in n's own class, then takes the first block of the
// next class that has one, all of whose blocks fit.
func (a *Arena[T]) Get(n int64) *Block[T] {
	b := a.find(n)
	if b == nil {
		return nil
	}
	a.unindex(b)
	a.take(b)
	a.split(b, n)
	a.unpark(b)
	a.publish()
	return b
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
	a.publish()
	return best.first
}

// Add registers a new segment (its Size a multiple of the alignment, or
// Oversize), and returns a block of n bytes cut from its start, active.
func (a *Arena[T]) Add(seg *Segment[T], n int64) *Block[T] {
	b := &Block[T]{Seg: seg, Size: seg.Size}
	seg.first, seg.blocks, seg.arena, seg.idx = b, 1, a, len(a.segs)
	a.segs = append(a.segs, seg)
	a.counts.Segments++
	a.shared.Segments++
	a.split(b, n)
	a.unpark(b)
	a.publish()
	return b
}

// Put takes back an active block: it merges with its free neighbours and
// becomes free. It returns the segment if the block now covers it (the
// segment is wholly free), else nil.
func (a *Arena[T]) Put(b *Block[T]) (whole *Segment[T]) {
	b.free = true
	a.free(1, b.Size)
	if p := b.prev; p != nil && p.free {
		a.unindex(p)
		a.merge(p, b)
		b = p
	}
	if n := b.next; n != nil && n.free {
		a.unindex(n)
		a.merge(b, n)
	}
	if !b.Seg.Oversize {
		a.index(b)
	}
	if !b.Whole() {
		a.publish()
		return nil
	}
	a.empty = append(a.empty, b.Seg)
	a.emptyBytes += b.Size
	a.publish()
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
		a.unindex(b)
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
	a.counts.Segments--
	a.shared.Segments--
	a.publish()
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

// LargestFree returns the size of the largest free block, 0 if none.
func (a *Arena[T]) LargestFree() int64 {
	var m int64
	for _, s := range a.empty {
		m = max(m, s.Size) // oversize segments are not indexed
	}
	if a.top == 0 {
		return m
	}
	e := 63 - bits.LeadingZeros64(a.top)
	row := a.marks[e]
	for w := len(row) - 1; w >= 0; w-- {
		if row[w] != 0 {
			c := uint32(e)<<a.lb | uint32(w*64+63-bits.LeadingZeros64(row[w]))
			for b := a.heads.get(c); b != nil; b = b.fnext {
				m = max(m, b.Size)
			}
			break
		}
	}
	return m
}

// Counts returns the sizes of the arena's free set, its split blocks
// counted under its kind (0 unless the Arenas policy made it large).
func (a *Arena[T]) Counts() Counts {
	c := a.counts
	c.SplitBlocks[a.kind] = c.FreeBlocks - len(a.empty)
	c.SplitBytes[a.kind] = c.FreeBytes - a.emptyBytes
	return c
}

// TakeStale appends the caches the arena dropped since the last call to
// dst, for the pool to release, and forgets them.
func (a *Arena[T]) TakeStale(dst []T) []T {
	dst = append(dst, a.stale...)
	clear(a.stale)
	a.stale = a.stale[:0]
	return dst
}

// take marks a free block, already out of the index, active.
func (a *Arena[T]) take(b *Block[T]) {
	if b.Whole() {
		a.forgetEmpty(b.Seg)
	}
	b.free = false
	a.free(-1, -b.Size)
}

// forgetEmpty takes seg off the list of wholly free segments.
func (a *Arena[T]) forgetEmpty(seg *Segment[T]) {
	for i, s := range a.empty {
		if s == seg {
			a.empty = append(a.empty[:i], a.empty[i+1:]...)
			a.emptyBytes -= seg.Size
			return
		}
	}
}

// split cuts an active block down to n bytes, making the rest a free block
// after it, if the rest is at least one unit and the segment may be split.
func (a *Arena[T]) split(b *Block[T], n int64) {
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
	*r = Block[T]{Seg: b.Seg, Off: b.Off + n, Size: rest, free: true, prev: b, next: b.next}
	if b.next != nil {
		b.next.prev = r
	}
	b.next = r
	a.dropCache(b)
	b.Size = n
	b.Seg.blocks++
	a.free(1, rest)
	a.index(r)
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
	a.free(-1, 0)
	*n = Block[T]{fnext: a.spare}
	a.spare = n
}

// dropCache parks the cache of a block whose range is about to change.
func (a *Arena[T]) dropCache(b *Block[T]) {
	var zero T
	if b.Cache == zero {
		return
	}
	s := b.Seg
	if len(s.parked) == maxParked {
		a.stale = append(a.stale, s.parked[0].cache)
		s.parked = append(s.parked[:0], s.parked[1:]...)
	}
	s.parked = append(s.parked, parked[T]{b.Off, b.Size, b.Cache})
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

// index puts a free block at the head of its class's list.
func (a *Arena[T]) index(b *Block[T]) {
	c := BinNumber(b.Size, a.lb)
	b.class = c
	head := a.heads.get(c)
	b.fprev, b.fnext = nil, head
	if head != nil {
		head.fprev = b
	}
	a.heads.set(c, b)
	e, m := c>>a.lb, c&(1<<a.lb-1)
	if a.marks[e] == nil {
		a.marks[e] = make([]uint64, (1<<a.lb+63)/64)
	}
	a.marks[e][m/64] |= 1 << (m % 64)
	a.top |= 1 << e
}

// unindex takes a free block out of its class's list.
func (a *Arena[T]) unindex(b *Block[T]) {
	c := b.class
	if b.fprev != nil {
		b.fprev.fnext = b.fnext
	} else {
		a.heads.set(c, b.fnext)
	}
	if b.fnext != nil {
		b.fnext.fprev = b.fprev
	}
	b.fprev, b.fnext = nil, nil
	if a.heads.get(c) != nil {
		return
	}
	e, m := c>>a.lb, c&(1<<a.lb-1)
	a.marks[e][m/64] &^= 1 << (m % 64)
	for _, w := range a.marks[e] {
		if w != 0 {
			return
		}
	}
	a.top &^= 1 << e
}

// scanLimit bounds the look at n's own class, whose blocks may be smaller
// than n.
const scanLimit = 8

// find returns a free block of at least n bytes, or nil.
func (a *Arena[T]) find(n int64) *Block[T] {
	c := BinNumber(n, a.lb)
	var best *Block[T]
	i := 0
	for b := a.heads.get(c); b != nil && i < scanLimit; b, i = b.fnext, i+1 {
		if b.Size >= n && (best == nil || b.Size < best.Size) {
			best = b
			if b.Size == n {
				break
			}
		}
	}
	if best != nil {
		return best
	}
	if c, ok := a.classAbove(c); ok {
		return a.heads.get(c)
	}
	return nil
}

// classAbove returns the smallest class above c that has a free block.
func (a *Arena[T]) classAbove(c uint32) (uint32, bool) {
	e, m := int(c>>a.lb), int(c&(1<<a.lb-1))
	if row := a.marks[e]; row != nil {
		for w := (m + 1) / 64; w < len(row); w++ {
			word := row[w]
			if w == (m+1)/64 {
				word &= ^uint64(0) << ((m + 1) % 64)
			}
			if word != 0 {
				return uint32(e)<<a.lb | uint32(w*64+bits.TrailingZeros64(word)), true
			}
		}
	}
	if e == 63 {
		return 0, false
	}
	above := a.top &^ (1<<(e+1) - 1)
	if above == 0 {
		return 0, false
	}
	e = bits.TrailingZeros64(above)
	for w, word := range a.marks[e] {
		if word != 0 {
			return uint32(e)<<a.lb | uint32(w*64+bits.TrailingZeros64(word)), true
		}
	}
	return 0, false
}

// Check verifies the arena's invariants, for tests: blocks tile each
// segment without gap or overlap, are aligned, no two free neighbours,
// every free block indexed under its class, and the counts agree.
func (a *Arena[T]) Check() error {
	var c Counts
	var emptyBytes int64
	indexed := 0
	for i, s := range a.segs {
		if s.idx != i || s.arena != a {
			return fmt.Errorf("segment %d: idx %d", i, s.idx)
		}
		off, n := int64(0), 0
		for b := s.first; b != nil; b = b.next {
			n++
			if b.Seg != s || b.Off != off || b.Size <= 0 {
				return fmt.Errorf("segment %d: block %d at %d, want %d (size %d)", i, n, b.Off, off, b.Size)
			}
			if !s.Oversize && (b.Off%a.align != 0 || b.Size%a.align != 0) {
				return fmt.Errorf("segment %d: block [%d, +%d) not aligned to %d", i, b.Off, b.Size, a.align)
			}
			if b.next != nil && b.next.prev != b {
				return fmt.Errorf("segment %d: broken links at %d", i, b.Off)
			}
			if b.free {
				c.FreeBlocks++
				c.FreeBytes += b.Size
				if b.next != nil && b.next.free {
					return fmt.Errorf("segment %d: free neighbours at %d and %d not merged", i, b.Off, b.next.Off)
				}
				if !s.Oversize {
					if b.class != BinNumber(b.Size, a.lb) || !a.listed(b) {
						return fmt.Errorf("segment %d: free block at %d not indexed under its class", i, b.Off)
					}
					indexed++
				}
				if b.Whole() {
					emptyBytes += b.Size
				}
			}
			off += b.Size
		}
		if off != s.Size || n != s.blocks {
			return fmt.Errorf("segment %d: blocks cover %d of %d bytes, %d blocks counted %d", i, off, s.Size, n, s.blocks)
		}
	}
	if emptyBytes != a.emptyBytes {
		return fmt.Errorf("wholly free bytes %d, counted %d", emptyBytes, a.emptyBytes)
	}
	if c.FreeBlocks != a.counts.FreeBlocks || c.FreeBytes != a.counts.FreeBytes || len(a.segs) != a.counts.Segments {
		return fmt.Errorf("counts %+v, counted %+v", c, a.counts)
	}
	total := 0
	for e := range a.marks {
		for w, word := range a.marks[e] {
			for ; word != 0; word &= word - 1 {
				cl := uint32(e)<<a.lb | uint32(w*64+bits.TrailingZeros64(word))
				if a.heads.get(cl) == nil {
					return errors.New("a marked class has no free block")
				}
				for b := a.heads.get(cl); b != nil; b = b.fnext {
					total++
				}
			}
		}
	}
	if total != indexed {
		return fmt.Errorf("%d blocks indexed, %d free blocks to index", total, indexed)
	}
	return nil
}

// listed reports whether b is on its class's list.
func (a *Arena[T]) listed(b *Block[T]) bool {
	for x := a.heads.get(b.class); x != nil; x = x.fnext {
		if x == b {
			return true
		}
	}
	return false
}
