package policy

import "math/bits"

// MaxLeadingBits is the most leading bits a bin number may use: the bin
// (exponent << bits | mantissa) must fit 32 bits.
const MaxLeadingBits = 20

// BinNumber returns the bin of a request of size bytes, exactly as
// PyOpenCL's memory_pool::bin_number computes it: with l = floor(log2 size),
// the bin is l << leadingBits | (the leadingBits bits after the leading one
// of size). Sizes 0 and 1 are bin 0. Sizes below 0 are binned as 0.
func BinNumber(size int64, leadingBits int) uint32 {
	if size <= 1 {
		return 0
	}
	l := bits.Len64(uint64(size)) - 1
	var shifted uint64
	if l >= leadingBits {
		shifted = uint64(size) >> (l - leadingBits)
	} else {
		shifted = uint64(size) << (leadingBits - l)
	}
	mantissa := uint32(shifted) & (1<<leadingBits - 1)
	return uint32(l)<<leadingBits | mantissa
}

// AllocSize returns the largest size of a bin, exactly as PyOpenCL's
// memory_pool::alloc_size computes it, so that every size of the bin fits.
// Bin 0 is 1 byte. It is defined for the bins BinNumber returns.
func AllocSize(bin uint32, leadingBits int) int64 {
	exponent := int(bin >> leadingBits)
	mantissa := uint64(bin) & (1<<leadingBits - 1)
	head := uint64(1)<<leadingBits | mantissa
	shift := exponent - leadingBits
	if shift < 0 {
		return int64(head >> -shift)
	}
	ones := uint64(1)<<shift - 1
	return int64(head<<shift | ones)
}

// classTable maps size classes (bin numbers) to values of type V, by two
// array lookups (exponent, then mantissa) for up to arrayLeadingBits
// leading bits, so the hot path hashes nothing; above, by a map.
type classTable[V any] struct {
	lb    int
	rows  [64][]V // rows[exponent][mantissa], made when first used
	byNum map[uint32]V
}

// arrayLeadingBits is the most leading bits for which a classTable uses
// arrays (1<<lb entries per exponent in use: 8 KiB of pointers at 10 bits).
const arrayLeadingBits = 10

func newClassTable[V any](lb int) classTable[V] {
	t := classTable[V]{lb: lb}
	if lb > arrayLeadingBits {
		t.byNum = make(map[uint32]V)
	}
	return t
}

// get returns the value of class c, or V's zero value.
func (t *classTable[V]) get(c uint32) V {
	if t.byNum != nil {
		return t.byNum[c]
	}
	row := t.rows[c>>t.lb]
	if row == nil {
		var zero V
		return zero
	}
	return row[c&(1<<t.lb-1)]
}

// set sets the value of class c.
func (t *classTable[V]) set(c uint32, v V) {
	if t.byNum != nil {
		t.byNum[c] = v
		return
	}
	exp := c >> t.lb
	if t.rows[exp] == nil {
		t.rows[exp] = make([]V, 1<<t.lb)
	}
	t.rows[exp][c&(1<<t.lb-1)] = v
}

// Bins is PyOpenCL's exact-bin policy: every segment is one block of its
// bin's AllocSize; a block given back goes on its bin's stack, and a
// request takes the most recently given back block of its own bin (LIFO),
// never one of another bin.
type Bins[T comparable] struct {
	lb     int
	stacks classTable[*[]*Block[T]]
	used   []uint32 // the bins with a stack, for Largest and TakeAll
	counts Counts
}

// NewBins returns an empty exact-bin policy with leadingBits bits of
// mantissa in a bin number.
func NewBins[T comparable](leadingBits int) *Bins[T] {
	return &Bins[T]{lb: leadingBits, stacks: newClassTable[*[]*Block[T]](leadingBits)}
}

// SegmentSize returns the bytes of a new segment for a request of size:
// its bin's AllocSize.
func (p *Bins[T]) SegmentSize(size int64) int64 {
	return AllocSize(BinNumber(size, p.lb), p.lb)
}

// NewSegment returns a segment, not yet allocated, for a request of size.
func (p *Bins[T]) NewSegment(size int64) *Segment[T] {
	n := p.SegmentSize(size)
	return &Segment[T]{Size: n, Small: n < SmallRequest}
}

// BlockSize returns the bytes of the block that serves a request of size:
// its bin's AllocSize.
func (p *Bins[T]) BlockSize(size int64) int64 { return p.SegmentSize(size) }

// Get takes the most recently given back block of size's bin, or returns
// nil if the bin holds none.
func (p *Bins[T]) Get(size int64) *Block[T] { return p.GetOn(size, 0) }

// preferScan is how deep into a stack GetOn looks for a block of its queue.
const preferScan = 4

// GetAnyOn is GetOn: exact bins have no placement rule to relax.
func (p *Bins[T]) GetAnyOn(size int64, q int32) *Block[T] { return p.GetOn(size, q) }

// AnyFits reports false: GetAnyOn finds nothing GetOn did not.
func (p *Bins[T]) AnyFits(size int64) bool { return false }

// Fits reports whether GetAnyOn would find a block for size now.
func (p *Bins[T]) Fits(size int64) bool {
	s := p.stacks.get(BinNumber(size, p.lb))
	return s != nil && len(*s) > 0
}

// GetOn is Get for a request on queue q (0: none): among the few most
// recently given back blocks of the bin, it takes the newest that only q
// may still use, else the newest.
func (p *Bins[T]) GetOn(size int64, q int32) *Block[T] {
	s := p.stacks.get(BinNumber(size, p.lb))
	if s == nil || len(*s) == 0 {
		return nil
	}
	st := *s
	last := len(st) - 1
	if q != 0 && !st[last].Only(q) {
		for i := last - 1; i >= max(0, last-preferScan); i-- {
			if st[i].Only(q) {
				st[i], st[last] = st[last], st[i]
				break
			}
		}
	}
	return p.pop(s)
}

func (p *Bins[T]) pop(s *[]*Block[T]) *Block[T] {
	last := len(*s) - 1
	b := (*s)[last]
	(*s)[last] = nil
	*s = (*s)[:last]
	b.free = false
	p.counts.FreeBlocks--
	p.counts.FreeBytes -= b.Size
	return b
}

// Add registers a new segment and returns its one block, active.
func (p *Bins[T]) Add(seg *Segment[T], size int64) *Block[T] {
	p.counts.Segments++
	seg.blocks = 1
	seg.Small = seg.Size < SmallRequest
	seg.first = &Block[T]{Seg: seg, Size: seg.Size}
	return seg.first
}

// Put takes back an active block. It returns the block's segment when it
// is to be freed now (an exact-size block), and removes it; otherwise nil.
func (p *Bins[T]) Put(b *Block[T]) (release *Segment[T]) {
	if b.Seg.Exact {
		p.counts.Segments--
		return b.Seg
	}
	c := BinNumber(b.Size, p.lb)
	s := p.stacks.get(c)
	if s == nil {
		s = new([]*Block[T])
		p.stacks.set(c, s)
		p.used = append(p.used, c)
	}
	*s = append(*s, b)
	b.free = true
	p.counts.FreeBlocks++
	p.counts.FreeBytes += b.Size
	return nil
}

// TakeLargest removes the most recently given back block of the largest
// bin that holds one and returns its segment, for the pool to free; nil if
// nothing is held.
func (p *Bins[T]) TakeLargest() *Segment[T] {
	c, ok := p.largest()
	if !ok {
		return nil
	}
	b := p.pop(p.stacks.get(c))
	p.counts.Segments--
	return b.Seg
}

// TakeFreeIf removes a held block that pred accepts and returns its
// segment, for the pool to free; nil if there is none.
func (p *Bins[T]) TakeFreeIf(pred func(*Block[T]) bool) *Segment[T] {
	for _, c := range p.used {
		s := p.stacks.get(c)
		for i, b := range *s {
			if pred(b) {
				*s = append((*s)[:i], (*s)[i+1:]...)
				b.free = false
				p.counts.FreeBlocks--
				p.counts.FreeBytes -= b.Size
				p.counts.Segments--
				return b.Seg
			}
		}
	}
	return nil
}

// largest returns the largest bin that holds a block.
func (p *Bins[T]) largest() (uint32, bool) {
	var best uint32
	found := false
	for _, c := range p.used {
		if s := p.stacks.get(c); len(*s) > 0 && (!found || c > best) {
			best, found = c, true
		}
	}
	return best, found
}

// LargestFree returns the size of the largest free block, 0 if none.
func (p *Bins[T]) LargestFree() int64 {
	if c, ok := p.largest(); ok {
		return AllocSize(c, p.lb)
	}
	return 0
}

// Counts returns the sizes of the free set, kept up to date: read it, do
// not change it. Bins never split, so SplitBlocks and SplitBytes are 0.
func (p *Bins[T]) Counts() *Counts { return &p.counts }

// TakeStale returns dst: bins never change a block's range.
func (p *Bins[T]) TakeStale(dst []T) []T { return dst }

// BeforeGrow returns nil: bins free held blocks only under memory
// pressure or when asked.
func (p *Bins[T]) BeforeGrow(size int64) []*Segment[T] { return nil }

// TakeKept returns nil: BeforeGrow keeps nothing back.
func (p *Bins[T]) TakeKept(n int64) []*Segment[T] { return nil }
