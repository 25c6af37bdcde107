package policy

import "fmt"

// Sizes of the arena policy's segments, as torch's caching allocator has
// them for its small pool.
const (
	SmallRequest = 1 << 20 // requests up to this come from small segments
	SmallSegment = 2 << 20 // the size of a small segment
	LargeUnit    = 2 << 20 // large segments grown with the pool are multiples of this
	// OwnUnit rounds a large segment made to the size of its request (a
	// request larger than the pool's growth step, or oversize): finer
	// than LargeUnit, since the tail past the request serves only what
	// fits it, and a 2 MiB unit wasted up to a third of a 4-6 MiB array.
	OwnUnit = 256 << 10
	// OversizeSlack is how much larger than an oversize request a free
	// oversize segment that serves it may be (torch's kLargeBuffer).
	OversizeSlack = 20 << 20
)

// DefaultQuick is how many blocks given back to the small arena may wait
// unmerged (see Arena), so that a program that allocates and frees the
// same sizes over and over neither splits nor merges. A few suffice: more
// change where other requests go, and gave higher peaks on mixed sizes
// (see BENCHMARKS.md).
const DefaultQuick = 4

// DefaultPreferredSegment is the largest size a large segment grows to:
// a request over half of it gets a segment of its own.
const DefaultPreferredSegment = 256 << 20

// GrowthDivisor sets how a large segment grows with the pool: it is
// 1/GrowthDivisor of the bytes the pool already holds (between the request
// rounded to OwnUnit and the preferred size), so that the unused tail of
// the newest segment stays a small part of the whole. VMA's fixed steps
// (1/8, 1/4, 1/2 of 256 MiB) manage more than twice the live peak of a
// real trace; see BENCHMARKS.md.
const GrowthDivisor = 16

// GrowSlack is how far past the most bytes its blocks ever took (a
// 1/GrowSlack part of them) the arena grows before it frees wholly free
// segments to make room (see BeforeGrow).
const GrowSlack = 16

// Arenas is the splitting-arena policy: two arenas, small and large, as
// torch keeps a small and a large pool, so that long-lived small blocks do
// not pin large segments.
//
// Wholly free segments are kept for reuse until the pool is about to grow
// past the most it has ever held and a slack over the most its blocks
// ever took: then they go first (BeforeGrow), as they cannot serve the
// request that grows it. FreeHeld and the out-of-memory
// ladder free them too (TakeLargest).
type Arenas[T comparable] struct {
	small, large *Arena[T]
	maxSplit     int64 // requests over it are oversize; 0: none are
	preferred    int64
	exact        int   // exact-size segments, never in an arena
	reserved     int64 // the bytes of every segment
	highWater    int64 // the most reserved has been
	activePeak   int64 // the most bytes of active blocks yet
	counts       Counts
}

// NewArenas returns the policy with blocks aligned to align, size classes
// of leadingBits bits, requests over maxSplit (if positive) served whole by
// oversize segments, and large segments up to preferred bytes.
func NewArenas[T comparable](align int64, leadingBits int, maxSplit, preferred int64) *Arenas[T] {
	p := &Arenas[T]{
		small: NewArena[T](align, leadingBits), large: NewArena[T](align, leadingBits),
		maxSplit: maxSplit, preferred: preferred,
	}
	p.small.shared, p.large.shared, p.large.kind = &p.counts, &p.counts, 1
	p.small.SetQuick(DefaultQuick, SmallRequest)
	return p
}

// SetQuickMax sets how many blocks given back to the small arena may wait
// unmerged (DefaultQuick unless set); 0 merges every block at once.
func (p *Arenas[T]) SetQuickMax(n int) { p.small.SetQuick(n, SmallRequest) }

// Waiting returns how many blocks given back wait unmerged.
func (p *Arenas[T]) Waiting() int { return p.small.Waiting() }

// Round returns the bytes of the block that serves a request of size.
func (p *Arenas[T]) Round(size int64) int64 { return p.small.Round(size) }

// BlockSize returns the bytes of the block that serves a request of size.
func (p *Arenas[T]) BlockSize(size int64) int64 { return p.Round(size) }

// Oversize reports whether a request of size is served whole by an
// oversize segment, never split.
func (p *Arenas[T]) Oversize(size int64) bool {
	return p.maxSplit > 0 && p.Round(size) > p.maxSplit
}

func (p *Arenas[T]) arenaFor(n int64) *Arena[T] {
	if n <= SmallRequest {
		return p.small
	}
	return p.large
}

// Get returns a free block for a request of size, now active; nil if none
// fits.
func (p *Arenas[T]) Get(size int64) *Block[T] { return p.GetOn(size, 0) }

// GetOn is Get for a request on queue q (0: none): of the blocks waiting
// unmerged, it prefers one that only q may still use.
func (p *Arenas[T]) GetOn(size int64, q int32) *Block[T] {
	n := p.Round(size)
	var b *Block[T]
	if p.Oversize(size) {
		b = p.large.GetWhole(n, OversizeSlack)
	} else {
		b = p.arenaFor(n).GetOn(n, q)
	}
	if b != nil {
		p.noteActive()
	}
	return b
}

// noteActive brings activePeak up to date after a block was handed out.
func (p *Arenas[T]) noteActive() {
	p.activePeak = max(p.activePeak, p.reserved-p.counts.FreeBytes)
}

// SegmentSize returns the bytes of a new segment for a request of size.
// A small request gets a SmallSegment. A large one gets 1/GrowthDivisor of
// what the pool holds rounded to LargeUnit, at most the preferred size,
// and at least the request rounded to OwnUnit; a request over half the preferred size, or
// oversize, gets a segment of its own, rounded to OwnUnit.
func (p *Arenas[T]) SegmentSize(size int64) int64 {
	n := p.Round(size)
	if n <= SmallRequest {
		return SmallSegment
	}
	own := roundUp(n, OwnUnit)
	if p.Oversize(size) || n > p.preferred/2 {
		return own
	}
	grown := min(p.preferred, roundUp(p.reserved/GrowthDivisor, LargeUnit))
	return max(grown, own)
}

// NewSegment returns a segment, not yet allocated, for a request of size:
// SegmentSize bytes, marked small or oversize as Add will place it.
func (p *Arenas[T]) NewSegment(size int64) *Segment[T] {
	return &Segment[T]{Size: p.SegmentSize(size), Small: p.Round(size) <= SmallRequest, Oversize: p.Oversize(size)}
}

// BeforeGrow is called on a miss, before a new segment is made for a
// request of size. If that segment would take the pool past both the
// most it has held and a 1/GrowSlack part past the most its blocks ever
// took, it removes every wholly free segment (none can serve the
// request) and returns them for the pool to free. The slack keeps a
// program whose phases take turns at the peak (a sort of large arrays,
// then one of small ones) from freeing one phase's segments to make the
// next one's, and allocating them again each turn.
func (p *Arenas[T]) BeforeGrow(size int64) []*Segment[T] {
	n := p.SegmentSize(size)
	if p.reserved+n <= p.activePeak+p.activePeak/GrowSlack {
		return nil
	}
	return p.TakeKept(n)
}

// TakeKept removes every wholly free segment, and returns them for the
// pool to free, if a new segment of n bytes would take the pool past the
// most it has held: the segments BeforeGrow's slack kept. The pool calls
// it when the device refused a new segment, before dearer steps (a
// garbage collection), so that on a full device the slack costs one
// refused allocation and nothing else.
func (p *Arenas[T]) TakeKept(n int64) []*Segment[T] {
	if p.reserved+n <= p.highWater {
		return nil
	}
	var out []*Segment[T]
	for s := p.TakeLargest(); s != nil; s = p.TakeLargest() {
		out = append(out, s)
	}
	return out
}

// Add registers a new segment and returns the block for a request of size
// cut from it, active.
func (p *Arenas[T]) Add(seg *Segment[T], size int64) *Block[T] {
	p.reserved += seg.Size
	p.highWater = max(p.highWater, p.reserved)
	if seg.Exact {
		// Its one block is in no arena's index, but is its segment's, as
		// every block is: Blocks walks it.
		p.exact++
		p.counts.Segments++
		b := &Block[T]{Seg: seg, Size: seg.Size}
		seg.first, seg.blocks, seg.active = b, 1, 1
		p.noteActive()
		return b
	}
	n := p.Round(size)
	seg.Oversize = p.Oversize(size)
	a := p.arenaFor(n)
	seg.Small = a == p.small
	b := a.Add(seg, n)
	p.noteActive()
	return b
}

// Put takes back an active block. It returns its segment, removed, if the
// pool is to free it now (an exact-size block); else nil.
func (p *Arenas[T]) Put(b *Block[T]) (release *Segment[T]) {
	if b.Seg.Exact {
		p.exact--
		p.counts.Segments--
		p.reserved -= b.Seg.Size
		return b.Seg
	}
	b.Seg.arena.Put(b)
	return nil
}

// TakeLargest removes the largest wholly free segment and returns it for
// the pool to free; nil if there is none.
func (p *Arenas[T]) TakeLargest() *Segment[T] {
	p.small.Flush()
	var best *Segment[T]
	for _, a := range []*Arena[T]{p.large, p.small} {
		for _, s := range a.empty {
			if best == nil || s.Size > best.Size {
				best = s
			}
		}
	}
	if best != nil {
		best.arena.Remove(best)
		p.reserved -= best.Size
	}
	return best
}

// TakeFreeIf removes a wholly free segment whose block pred accepts and
// returns it for the pool to free; nil if there is none.
func (p *Arenas[T]) TakeFreeIf(pred func(*Block[T]) bool) *Segment[T] {
	p.small.Flush()
	for _, a := range []*Arena[T]{p.large, p.small} {
		for _, s := range a.empty {
			if pred(s.first) {
				a.Remove(s)
				p.reserved -= s.Size
				return s
			}
		}
	}
	return nil
}

// LargestFree returns the size of the largest free block.
func (p *Arenas[T]) LargestFree() int64 {
	return max(p.small.LargestFree(), p.large.LargestFree())
}

// Counts returns the sizes of the free set of both arenas, kept up to
// date: read it, do not change it.
func (p *Arenas[T]) Counts() *Counts { return &p.counts }

// TakeStale appends the caches both arenas dropped to dst.
func (p *Arenas[T]) TakeStale(dst []T) []T {
	return p.large.TakeStale(p.small.TakeStale(dst))
}

// Check verifies both arenas' invariants, for tests.
func (p *Arenas[T]) Check() error {
	if err := p.small.Check(); err != nil {
		return err
	}
	if err := p.large.Check(); err != nil {
		return err
	}
	s, l := p.small.Counts(), p.large.Counts()
	want := Counts{
		FreeBlocks: s.FreeBlocks + l.FreeBlocks, FreeBytes: s.FreeBytes + l.FreeBytes,
		SplitBlocks: [2]int{s.SplitBlocks[0], l.SplitBlocks[1]},
		SplitBytes:  [2]int64{s.SplitBytes[0], l.SplitBytes[1]},
		Segments:    s.Segments + l.Segments + p.exact,
	}
	if want != p.counts {
		return fmt.Errorf("policy counts %+v, arenas count %+v", p.counts, want)
	}
	return nil
}

func roundUp(n, unit int64) int64 { return (n + unit - 1) / unit * unit }
