package policy

import (
	"fmt"
	"math"
)

// SmallRequest splits small requests from large ones: a segment made for
// a request of up to this many bytes is a small segment (torch's small
// pool, for the pool's statistics), and blocks of up to this many bytes
// given back may wait unmerged (see DefaultQuick). The arena itself
// serves every request from any segment.
const SmallRequest = 1 << 20

// Sizes of the arena policy's segments. The first segment is
// FirstSegment bytes; each one after grows the pool by 1/GrowthDivisor of
// what it holds less the free bytes of its segments in use, and at least
// 1/MinGrowthDivisor of it, in multiples of GrowthUnit and at least one;
// a request larger than that gets a segment of its own size, rounded to
// OwnUnit. So a pool of up to 512 KiB takes one segment, a larger one
// grows a twelfth at a time, and a pool whose free bytes are scattered
// in holes too small for a request grows by little more than that
// request: the holes are the growth it would have made. The floor keeps
// a pool that fills with arrays that never quite fill its segments
// (their tails scattered free bytes) from growing by one request at a
// time. TestArenaHoldsCloseToTheLivePeak replays the traces these were
// chosen on.
const (
	FirstSegment     = 512 << 10
	GrowthDivisor    = 12
	MinGrowthDivisor = 48
	GrowthUnit       = 64 << 10
	OwnUnit          = 4 << 10
	// A request of over 1/BigDivisor of the pool that outgrew a wholly
	// free segment (one of at least 3/4 of its size, and less) gets a
	// segment 1/HeadroomDivisor larger than itself: arrays that grow a
	// little every round (a sort of a growing set) then take a segment
	// every few rounds, not one per array per round.
	BigDivisor      = 16
	HeadroomDivisor = 8
	// A request of any size past the growth step that outgrew a wholly
	// free segment by less than 1/GrowthWindow of itself gets the
	// headroom too, as does one that grew by less than that from the
	// last occupant of a segment given up in the last round (see
	// regrown), though other segments were made since: an array remade a
	// little larger each step (a state that grows), which random sizes
	// seldom match so closely. Each segment given up serves one such
	// request. A state of five arrays growing 0.2% a step, each array
	// alternating between two segments, took 916 device allocations in
	// 3,005; 295 when only the first request after the segments were
	// given up saw them; 110 now (at 1/128, the recorded particles held
	// 1.159x their plan behind the pool's cache, not 1.131x).
	GrowthWindow = 192
	// RegrowthWindow is GrowthWindow for regrown: an array alternating
	// between two segments meets, when it is remade, the occupant of
	// the one given up, the array of two steps before: its growth over
	// two steps. At 1/GrowthWindow, a state growing 0.3% a step (0.6%
	// in two) took a device allocation for 1,001 of its 3,005 requests;
	// 160 now (BENCHMARKS.md, session 46).
	RegrowthWindow = GrowthWindow / 2
	// OversizeSlack is how much larger than an oversize request a free
	// oversize segment that serves it may be (torch's kLargeBuffer).
	OversizeSlack = 20 << 20
	// A segment sized for one request over SmallRequest (past the growth
	// step) serves only requests of at least 1/OwnShareDivisor of the
	// pool, until it is wholly free and a smaller request fits nowhere
	// else (see Arena.find). Segments made for small requests are not
	// kept apart: on small pools, where they are most of the pool, that
	// cost more than it saved.
	OwnShareDivisor = 192
	// A pool whose active bytes fall to at most 1/IdleDivisor of what it
	// holds, with all but that part in wholly free segments, is idle. If
	// the busy period before grew it, by at most 1/CreepDivisor of what
	// it held when the period began, the first request after replaces
	// the wholly free segments with one of the period's peak and
	// 1/HeadroomDivisor more (see Arenas.consolidating): a program whose
	// every round needs a little more (a sort of a growing set) then
	// takes one segment every few rounds, not one per array.
	IdleDivisor  = 8
	CreepDivisor = 2
	// A pool that fills (no block given back since its last new segment: a
	// program that allocates its arrays before it frees any) grows faster:
	// each segment added in a row while it fills, for requests no larger than
	// the one that began the run, holds twice the blocks of the request that
	// makes it as the one before (1, 2, 4, ...), up to 1/FillDivisor of the
	// pool. (Arrays each larger than the one before would leave the spare half
	// of every segment to none: 100 arrays each 3% larger than the last held
	// 1.45x their plan that way, not 1.06x.) A program that allocates 100
	// arrays of 700 KB first took 89 segments, and 53 with this (its peak
	// 1.226x -> 1.071x its plan, the tails of step-sized segments being gone);
	// the traces that free as they go are unchanged (at 1/8 or 1/12 of the
	// pool, particles went to 1.32-1.36x its plan).
	FillDivisor = 16
)

// Tiny requests, of up to TinyBlock bytes (one block of the arena's
// alignment, if larger), take blocks of tiny segments first, then the
// smallest free block of a segment in use, and never cut a wholly free
// segment (but to take back a block of their size waiting unmerged in one:
// keeping those for tiny segments cost particles 1.130x -> 1.182x its
// plan); no other request takes a tiny segment's blocks (but through
// GetAnyOn, on the pool's out-of-memory ladder). A tiny block cut from a
// segment the pool's larger requests need would keep them from it, and a
// pool exactly as large as its live peak (a program of arrays of one size
// and a few scalars) then missed on every array that followed a scalar. The
// first tiny segment holds TinySegmentBlocks tiny blocks, at least
// TinySegment bytes; each one after adds half the tiny segments' bytes, and
// at least the first one's (a program of many scalars takes few segments,
// and at most half of what they hold is not yet used), up to half the
// preferred size. A tiny segment frees nothing to grow (see BeforeGrow),
// and one wholly free one stays when the pool grows (see takeAll).
const (
	TinyBlock         = MinBlock
	TinySegment       = 4 << 10
	TinySegmentBlocks = 8
)

// DefaultQuick is how many blocks of up to SmallRequest bytes given back
// may wait unmerged (see Arena), so that a program that allocates and
// frees the same sizes over and over neither splits nor merges. A few
// suffice: more change where other requests go, and gave higher peaks on
// mixed sizes (see BENCHMARKS.md).
const DefaultQuick = 4

// DefaultQuickLarge is how many larger blocks given back may wait
// unmerged, apart from the small ones: a sort that takes and gives back
// arrays of one size in each of its passes then neither splits nor
// merges them (radix-grow replayed 1.27x faster). Two, not more: four let
// a multilayer perceptron's large blocks wait where merging placed its
// next layers better (mlp 1.133x -> 1.197x its plan; with two, 1.100x).
const DefaultQuickLarge = 2

// DefaultPreferredSegment is the largest size a segment grows to: a
// request over half of it gets a segment of its own.
const DefaultPreferredSegment = 256 << 20

// GrowSlack is how far past the most bytes its blocks ever took (a
// 1/GrowSlack part of them) the arena grows before it frees wholly free
// segments to make room (see BeforeGrow).
const GrowSlack = 16

// Arenas is the splitting-arena policy: one arena whose segments grow
// with the pool (see SegmentSize). Torch keeps small and large requests
// in pools of their own, so that long-lived small blocks do not pin
// large segments; measured on recorded and synthetic traces, keeping
// them apart cost up to 7 times the device allocations for a few
// percent of peak memory on the largest pools, and more memory on small
// ones, so they share one arena here, and Segment.Small only marks the
// segments made for small requests, for the statistics and the pool's
// queue caches (which hold blocks of small segments only).
//
// Wholly free segments are kept for reuse until the pool is about to grow
// past the most it has ever held and a slack over the most its blocks
// ever took: then they go first (BeforeGrow), as they cannot serve the
// request that grows it. FreeHeld and the out-of-memory ladder free them
// too (TakeLargest).
type Arenas[T comparable] struct {
	a          *Arena[T]
	maxSplit   int64 // requests over it are oversize; 0: none are
	preferred  int64
	unit, own  int64 // GrowthUnit and OwnUnit, at least the alignment
	exact      int   // exact-size segments, never in the arena
	tinyMax    int64 // the largest tiny request's block (see TinyBlock)
	tinyBytes  int64 // the bytes of the tiny segments
	reserved   int64 // the bytes of every segment
	highWater  int64 // the most reserved has been
	activePeak int64 // the most bytes of active blocks yet
	counts     Counts
	// What takeAll gave up in its last round (a round begins at its
	// first give-up after a new segment): the segments' occupants (see
	// Segment.occupant), less those a new segment replaced (regrown,
	// forget), and until the next new segment their sizes (outgrew).
	gone      []int64
	goneSizes []int64
	goneUsed  bool // a segment was added since the round began

	// The busy periods, between idle moments (see IdleDivisor).
	busy        bool  // active bytes passed the idle share since the pool was last idle
	periodPeak  int64 // the most active bytes of this period
	periodAdded int64 // the bytes of the segments added while busy
	periodGrew  bool  // a segment was added while busy
	idleHeld    int64 // the bytes held when this period began
	lastPeak    int64 // periodPeak of the period before
	lastGrew    bool  // the period before grew the pool by a little: replace its segments
	// pending is the size of the segment that is to replace the wholly
	// free ones, decided when GetOn declined a block for a request of
	// pendingFor bytes (its block); 0 if none. It holds until Add, a
	// block handed out, or another request GetOn does not decline, so
	// that the pool sizes the segment again after draining its queue
	// caches (and BeforeGrow freed what it replaces) as it did the first
	// time, and for that request only.
	pending, pendingFor int64

	filling   bool  // no block given back since the last Add (see FillDivisor)
	fillRun   int   // segments added in a row while filling, for requests of at most fillBlock bytes
	fillBlock int64 // the block of the request whose segment began the run
}

// NewArenas returns the policy with blocks aligned to align, size classes
// of leadingBits bits, requests over maxSplit (if positive) served whole by
// oversize segments, and segments up to preferred bytes (rounded down to
// the alignment, and at least one block: a segment's size is a multiple
// of it).
func NewArenas[T comparable](align int64, leadingBits int, maxSplit, preferred int64) *Arenas[T] {
	p := &Arenas[T]{a: NewArena[T](align, leadingBits), maxSplit: maxSplit}
	p.unit, p.own = max(GrowthUnit, p.a.align), max(OwnUnit, p.a.align)
	p.preferred = max(p.a.align, preferred/p.a.align*p.a.align)
	p.tinyMax = max(TinyBlock, p.a.align)
	p.a.SetTinyMax(p.tinyMax)
	p.a.counts = &p.counts
	p.a.step = p.step
	p.a.SetQuick(DefaultQuick, SmallRequest)
	p.setOwnMin()
	return p
}

// SetQuickMax sets how many blocks given back may wait unmerged
// (DefaultQuick unless set); 0 merges every block at once.
func (p *Arenas[T]) SetQuickMax(n int) { p.a.SetQuick(n, SmallRequest) }

// HasStale is Arena.HasStale.
func (p *Arenas[T]) HasStale() bool { return p.a.HasStale() }

// SetParking is Arena.SetParking.
func (p *Arenas[T]) SetParking(on bool) { p.a.SetParking(on) }

// Waiting returns how many blocks given back wait unmerged.
func (p *Arenas[T]) Waiting() int { return p.a.Waiting() }

// Round returns the bytes of the block that serves a request of size.
func (p *Arenas[T]) Round(size int64) int64 { return p.a.Round(size) }

// BlockSize returns the bytes of the block that serves a request of size.
func (p *Arenas[T]) BlockSize(size int64) int64 { return p.Round(size) }

// Oversize reports whether a request of size is served whole by an
// oversize segment, never split.
func (p *Arenas[T]) Oversize(size int64) bool {
	return p.maxSplit > 0 && p.Round(size) > p.maxSplit
}

// Tiny reports whether a request of size is tiny (see TinyBlock). It
// reads nothing that changes.
func (p *Arenas[T]) Tiny(size int64) bool { return p.tiny(size) }

// tiny reports whether a request of size is tiny (see TinyBlock): its
// block is at most tinyMax bytes, and it is not oversize (a max split
// under the alignment makes every request oversize).
func (p *Arenas[T]) tiny(size int64) bool {
	return p.Round(size) <= p.tinyMax && !p.Oversize(size)
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
		p.undecline(n)
		b = p.a.GetWhole(n, OversizeSlack)
	} else if n <= p.tinyMax { // tiny (see tiny): tiny segments are not consolidated
		b = p.a.GetOn(n, q)
	} else if c, ok := p.consolidation(n); ok {
		p.pending, p.pendingFor = c, n // declined: the new segment replaces the free ones
		return nil
	} else {
		p.undecline(n)
		b = p.a.GetOn(n, q)
	}
	if b != nil {
		p.pending = 0
		p.noteActive()
	}
	return b
}

// undecline forgets the pending replacement if a request of n bytes (its
// block) is not the one declined for it: that one went without its
// segment (the pool's limit refused it), and this one is no reason to
// give up the wholly free segments.
func (p *Arenas[T]) undecline(n int64) {
	if n != p.pendingFor {
		p.pending = 0
	}
}

// GetAnyOn is GetOn when nothing else is left (the pool's out-of-memory
// ladder): if GetOn finds nothing (or declines for a consolidation), it
// takes the smallest free block that fits of any segment but an oversize
// one, whatever the placement rules (see Arena.GetAny). An oversize
// request gets only what GetOn gives it, a wholly free oversize segment:
// it never takes a block cut from another.
func (p *Arenas[T]) GetAnyOn(size int64, q int32) *Block[T] {
	if b := p.GetOn(size, q); b != nil || p.Oversize(size) {
		return b
	}
	b := p.a.GetAny(p.Round(size))
	if b != nil {
		p.pending = 0 // as GetOn does for a block it hands out
		p.noteActive()
	}
	return b
}

// AnyFits reports whether GetAnyOn could serve a request of size where
// GetOn found nothing: a free block of a segment not oversize holds it.
// An oversize request gets only what GetOn gives it.
func (p *Arenas[T]) AnyFits(size int64) bool {
	return !p.Oversize(size) && p.a.largest(false) >= p.Round(size)
}

// Fits reports whether GetAnyOn would find a block for size now (a
// wholly free oversize segment aside).
func (p *Arenas[T]) Fits(size int64) bool { return p.AnyFits(size) }

// consolidation returns the size of the segment that is to replace the
// pool's wholly free segments, and true, if the pool is consolidating
// (see replacement) and that segment serves a block of n bytes: at least
// n, and larger than the growth step. GetOn declines a request only then.
func (p *Arenas[T]) consolidation(n int64) (int64, bool) {
	c, ok := p.replacement()
	return c, ok && c >= n && c > p.step() && n <= p.preferred/2
}

// noteActive brings activePeak up to date after a block was handed out.
func (p *Arenas[T]) noteActive() {
	active := p.reserved - p.counts.FreeBytes
	p.activePeak = max(p.activePeak, active)
	p.periodPeak = max(p.periodPeak, active)
	if !p.busy && active > p.reserved/IdleDivisor {
		p.busy = true
	}
}

// idle reports whether the pool's active bytes are at most
// 1/IdleDivisor of what it holds.
func (p *Arenas[T]) idle() bool {
	return p.reserved-p.counts.FreeBytes <= p.reserved/IdleDivisor
}

// replacement returns the size of the segment that is to replace the
// pool's wholly free segments (the busy period's peak and
// 1/HeadroomDivisor more), and true, if the next request is to replace
// them: the pool is idle, all but 1/IdleDivisor of it in wholly free
// segments, and the busy period before grew it by a little (see
// IdleDivisor). Not if a wholly free segment is oversize (an ordinary
// segment serves none of its requests) or larger than the replacement:
// then the segments are not a growing program's many small ones, but
// another phase's, which BeforeGrow's slack keeps for its next turn. Get
// then declines a request the replacement serves (see consolidation),
// even if a free block fits it.
func (p *Arenas[T]) replacement() (int64, bool) {
	if !p.lastGrew || p.busy || !p.idle() || len(p.a.segs) == 0 {
		return 0, false
	}
	p.a.Flush()
	c := min(p.preferred, roundUp(p.lastPeak+p.lastPeak/HeadroomDivisor, p.unit))
	var empty int64
	for _, s := range p.a.empty {
		if s.Oversize || s.Size > c {
			return 0, false
		}
		empty += s.Size
	}
	return c, empty >= p.reserved-p.reserved/IdleDivisor
}

// Consolidating reports whether the pool is to replace its wholly free
// segments with one (see IdleDivisor): a request that segment serves is
// declined by Get though a free block may fit it.
func (p *Arenas[T]) Consolidating() bool {
	_, ok := p.replacement()
	return ok
}

// Replacing reports whether Get declined the last request for a segment
// that replaces the wholly free ones: NewSegment sizes it, and
// BeforeGrow gives up every wholly free segment, until Add.
func (p *Arenas[T]) Replacing() bool { return p.pending > 0 }

// SegmentSize returns the bytes of a new segment for a request of size
// (see the constants above): the first is FirstSegment; one after grows
// the pool by 1/GrowthDivisor of what the arena holds less the free bytes
// of its segments in use, at least 1/MinGrowthDivisor of it (rounded up
// to GrowthUnit, at least one unit, at most the preferred size), or, if
// the request's block is larger, is
// that block rounded to OwnUnit, with 1/HeadroomDivisor more if it is a
// large request that outgrew a wholly free segment, or any that outgrew
// one by a little, or grew by a little from a given-up segment's last
// occupant (RegrowthWindow). A request over half
// the preferred size, or oversize, gets a segment of its own, rounded to
// OwnUnit.
func (p *Arenas[T]) SegmentSize(size int64) int64 {
	n, _ := p.segmentSize(size)
	return n
}

// segmentSize is SegmentSize, and whether the segment is sized for the
// request alone (past the growth step; not oversize).
func (p *Arenas[T]) segmentSize(size int64) (int64, bool) {
	n := p.Round(size)
	if p.tiny(size) {
		first := max(TinySegment, TinySegmentBlocks*p.tinyMax)
		return roundUp(min(p.preferred/2, max(first, p.tinyBytes/2)), p.own), false
	}
	own := roundUp(n, p.own)
	if p.Oversize(size) {
		return own, false
	}
	if p.huge(size) {
		return own, true
	}
	if p.pending >= n {
		return p.pending, false
	}
	held, step := p.a.Bytes(), p.step()
	if n <= step {
		return max(step, p.fillSize(n, n, held)), false
	}
	if n > held/BigDivisor && p.outgrew(n, 4) || p.outgrew(n, GrowthWindow) || p.regrown(n) >= 0 {
		own = roundUp(n+n/HeadroomDivisor, p.own)
	}
	return max(own, p.fillSize(n, own, held)), true
}

// fillSize returns the size of a new segment for blocks of n bytes, for a
// request whose block is req bytes, while the pool fills (see
// FillDivisor): 2^k of them after k segments added in a row, up to
// 1/FillDivisor of the held bytes and the preferred size, in whole
// blocks; 0 if the pool is not filling, or req is larger than the block
// of the request that began the run (Add ends the run at it).
func (p *Arenas[T]) fillSize(req, n, held int64) int64 {
	if !p.filling || p.fillRun == 0 || req > p.fillBlock {
		return 0
	}
	n = roundUp(n, p.own)
	k := int64(1) << min(p.fillRun, 20)
	return min(n*k, min(held/FillDivisor, p.preferred)/n*n)
}

// step returns the growth step: the size of a new segment for a request
// that fits it (see SegmentSize).
func (p *Arenas[T]) step() int64 {
	held := p.a.Bytes() - p.tinyBytes // tiny segments serve no other request
	if held == 0 {
		return min(p.preferred, roundUp(FirstSegment, p.unit))
	}
	// The free bytes of the segments in use: the idle ones are as good
	// as gone, as BeforeGrow frees them first.
	scattered := p.a.SplitBytes() - p.a.TinySplitBytes()
	grow := max(held/GrowthDivisor-scattered, held/MinGrowthDivisor)
	return min(p.preferred, max(p.unit, roundUp(grow, p.unit)))
}

// outgrew reports whether a request's block of n bytes is larger than a
// wholly free segment of at least n less n/within, or one that TakeKept
// (or BeforeGrow) gave up since the last new segment: the pool may call
// BeforeGrow, drain its queue caches into the policy, and size the
// segment again, and the segments BeforeGrow freed the first time count.
func (p *Arenas[T]) outgrew(n, within int64) bool {
	for _, s := range p.a.empty {
		if !s.Oversize && s.Size < n && s.Size >= n-n/within {
			return true
		}
	}
	for _, size := range p.goneSizes {
		if size < n && size >= n-n/within {
			return true
		}
	}
	return false
}

// regrown returns the index in p.gone of the occupant a block of n
// bytes grew from by less than 1/RegrowthWindow of itself (the largest
// such), or -1: an array remade a little larger after its segment was
// given up, though other segments were made since (the step's other
// arrays). An array remade at its size, or smaller, grew from none.
func (p *Arenas[T]) regrown(n int64) int {
	best := -1
	for i, occ := range p.gone {
		if occ < n && occ >= n-n/RegrowthWindow && (best < 0 || occ > p.gone[best]) {
			best = i
		}
	}
	return best
}

// forget takes off p.gone the occupant that a new segment for a block
// of n bytes replaces (see regrown), if any: each given-up segment gives
// the headroom to one array.
func (p *Arenas[T]) forget(n int64) {
	if i := p.regrown(n); i >= 0 {
		p.gone = append(p.gone[:i], p.gone[i+1:]...)
	}
}

// NewSegment returns a segment, not yet allocated, for a request of size:
// SegmentSize bytes, marked small or oversize as Add will mark it.
func (p *Arenas[T]) NewSegment(size int64) *Segment[T] {
	n, own := p.segmentSize(size)
	small := p.small(size)
	return &Segment[T]{Size: n, Small: small, Oversize: p.Oversize(size), own: own && !small, tiny: p.tiny(size), huge: p.huge(size)}
}

// huge reports whether a segment made for a request of size is huge: its
// block is over half the preferred size, and it is not oversize.
func (p *Arenas[T]) huge(size int64) bool {
	return p.Round(size) > p.preferred/2 && !p.Oversize(size)
}

// small reports whether a segment made for a request of size is small.
func (p *Arenas[T]) small(size int64) bool {
	return p.Round(size) <= SmallRequest && !p.Oversize(size)
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
	if p.tiny(size) {
		return nil // a tiny segment is small, and none is wholly free (one would serve size)
	}
	if p.pending > 0 { // the new segment replaces every wholly free one
		return p.takeAll()
	}
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
	return p.takeAll()
}

// takeAll removes every wholly free segment but one tiny one, and
// returns them for the pool to free; outgrew remembers their sizes until
// the next new segment, regrown their occupants until one replaces each,
// or the next round of give-ups. The tiny one kept spares a program
// whose scalars come and go between its arrays a new segment each time
// (TakeLargest frees it).
func (p *Arenas[T]) takeAll() []*Segment[T] {
	p.a.Flush()
	var out []*Segment[T]
	kept := false
	for i := 0; i < len(p.a.empty); {
		s := p.a.empty[i]
		if s.tiny && !kept {
			kept = true
			i++
			continue
		}
		p.removed(s) // takes s off p.a.empty
		out = append(out, s)
		if !s.Oversize && !s.tiny {
			if p.goneUsed { // the list of an earlier give-up
				p.gone, p.goneUsed = p.gone[:0], false
			}
			p.gone = append(p.gone, s.occupant)
			p.goneSizes = append(p.goneSizes, s.Size)
		}
	}
	return out
}

// Add registers a new segment and returns the block for a request of size
// cut from it, active. It marks the segment small or oversize by the
// request.
func (p *Arenas[T]) Add(seg *Segment[T], size int64) *Block[T] {
	p.pending = 0
	switch {
	case p.tiny(size): // not the growth consolidation is for
	case p.busy:
		p.periodGrew = true
		p.periodAdded += seg.Size
	default:
		p.lastGrew = false // consolidated
	}
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
	seg.Oversize, seg.Small = p.Oversize(size), p.small(size)
	seg.own = seg.own && !seg.Oversize && !seg.Small
	if seg.tiny = p.tiny(size); seg.tiny {
		p.tinyBytes += seg.Size
	}
	p.forget(p.Round(size))
	p.goneSizes, p.goneUsed = p.goneSizes[:0], true
	if n := p.Round(size); p.filling && n <= p.fillBlock {
		p.fillRun++
	} else {
		p.fillRun, p.fillBlock = 0, n
	}
	p.filling = true
	b := p.a.Add(seg, p.Round(size))
	p.setOwnMin()
	p.noteActive()
	return b
}

// Put takes back an active block. It returns its segment, removed, if the
// pool is to free it now (an exact-size block); else nil.
func (p *Arenas[T]) Put(b *Block[T]) (release *Segment[T]) {
	p.filling, p.fillRun = false, 0
	if b.Seg.Exact {
		p.exact--
		p.counts.Segments--
		p.reserved -= b.Seg.Size
		return b.Seg
	}
	p.a.Put(b)
	if p.busy && p.idle() { // a busy period ends
		p.busy = false
		p.lastPeak = p.periodPeak
		p.lastGrew = p.periodGrew && p.periodAdded <= p.idleHeld/CreepDivisor
		p.periodPeak, p.periodGrew, p.periodAdded, p.idleHeld = 0, false, 0, p.reserved
	}
	return nil
}

// TakeLargest removes the largest wholly free segment and returns it for
// the pool to free; nil if there is none.
func (p *Arenas[T]) TakeLargest() *Segment[T] {
	p.a.Flush()
	var best *Segment[T]
	for _, s := range p.a.empty {
		if best == nil || s.Size > best.Size {
			best = s
		}
	}
	if best != nil {
		p.removed(best)
	}
	return best
}

// TakeFreeIf removes a wholly free segment whose block pred accepts and
// returns it for the pool to free; nil if there is none.
func (p *Arenas[T]) TakeFreeIf(pred func(*Block[T]) bool) *Segment[T] {
	p.a.Flush()
	for _, s := range p.a.empty {
		if pred(s.first) {
			p.removed(s)
			return s
		}
	}
	return nil
}

// removed takes a wholly free segment out of the arena and the pool's
// size: what the pool held when its busy period began is at most what it
// holds now (FreeHeld and the ladder take segments out).
func (p *Arenas[T]) removed(s *Segment[T]) {
	if s.tiny {
		p.tinyBytes -= s.Size
	}
	p.a.Remove(s)
	p.reserved -= s.Size
	p.idleHeld = min(p.idleHeld, p.reserved)
	p.setOwnMin()
}

// LargestFree returns the size of the largest free block.
func (p *Arenas[T]) LargestFree() int64 { return p.a.LargestFree() }

// Counts returns the sizes of the free set, kept up to date: read it, do
// not change it.
func (p *Arenas[T]) Counts() *Counts { return &p.counts }

// TakeStale appends the caches the arena dropped to dst.
func (p *Arenas[T]) TakeStale(dst []T) []T { return p.a.TakeStale(dst) }

// Check verifies the arena's invariants and the policy's counts, for
// tests.
func (p *Arenas[T]) Check() error {
	if err := p.a.Check(); err != nil {
		return err
	}
	want := p.a.Counts()
	want.Segments += p.exact
	if want != p.counts {
		return fmt.Errorf("policy counts %+v, arena counts %+v", p.counts, want)
	}
	return nil
}

// PassesOver reports whether a request of size passes over the free
// blocks of s (see Arena.find): s is huge, and more than twice the growth
// step, which the request's block is at most.
func (p *Arenas[T]) PassesOver(s *Segment[T], size int64) bool {
	return passOver(s, p.Round(size), p.step())
}

// OwnMin returns the least request that takes blocks of a segment sized
// for one request (Segment.Own) that is not wholly free.
func (p *Arenas[T]) OwnMin() int64 { return p.a.ownMin }

// setOwnMin sets the least request that takes blocks of own segments,
// after the pool's size changed.
func (p *Arenas[T]) setOwnMin() { p.a.SetOwnMin(p.a.Bytes() / OwnShareDivisor) }

// roundUp returns n rounded up to a multiple of unit; math.MaxInt64 if
// that is past it.
func roundUp(n, unit int64) int64 {
	if n > math.MaxInt64-(unit-1) {
		return math.MaxInt64
	}
	return (n + unit - 1) / unit * unit
}
