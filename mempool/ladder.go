package mempool

import (
	"errors"
	"fmt"
	"time"

	"github.com/clpool/clpool/mempool/internal/policy"
)

// This file is a request's way past the queue caches (serve): a free
// block of the policy, and on a miss a new segment (grow), down the
// out-of-memory ladder (nextRung) as far as it must. The errors it ends
// with are in errors.go.

// ladder is where a request stands on the out-of-memory ladder. Its rungs,
// in order, after the first refusal of a segment (by the limit or the
// device):
//
//  0. with the arena, if a free block holds the request that the
//     placement rules kept from it (an own or huge segment's tail, say),
//     retry: from now on any free block that fits serves (GetAnyOn);
//  1. free the segments the arena's slack kept (see policy.Arenas), which
//     growing without the slack would have freed, and retry;
//  2. collect buffers dropped without Close (PyOpenCL's order) and, if
//     any came back, retry: one of them may serve the request;
//  3. free wholly free segments, largest first, retrying after each
//     (queue caches and the quarantine drained first: a pass that brings
//     blocks back retries and frees nothing);
//  4. try a segment of the request's own size (RMM's growth by the
//     request) instead of the policy's;
//  5. wait for memory on its way (awaitInFlight; again if a Close ended
//     the wait before it came), then, if anything changed since the
//     refusal, free every wholly free segment in the
//     same hold of the lock as the reservation, so that no concurrent
//     request takes the room first, and retry (at most finalRounds times);
//  6. fail with an *OutOfMemoryError that says where the memory is.
//
// Each retry looks for a free block first, of any segment once the ladder
// began. Termination: a rung is left for the next one and never
// revisited, except rung 3, which runs at most as many times as the pool
// had segments when it began, and rung 5, at most finalRounds times, its
// waits again after a Close ending by waitUntil (no wait is cut later).
type ladder struct {
	seg, own    *segment  // the policy's segment for the request, and the smallest that serves it
	rung        int       // the rung to take at the next refusal
	frees       int       // rung 3's remaining frees; -1 before it begins
	useOwn      bool      // rung 4 was taken: try own
	final       bool      // rung 5: decide frees every wholly free segment first
	freesSeen   int64     // the pool's batches of frees when the last decision was made
	settledSeen int64     // and the arrivals of memory (ledger.settled)
	limitSeen   int64     // and the limit
	finals      int       // rung 5's rounds so far
	waitUntil   time.Time // when rung 5's waits end (inFlightWait after its first round)
	cause       error     // the device's last refusal; nil if only the limit refused
	pressed     bool      // refused once: any free block that fits serves (placement.GetAnyOn)
	pressing    bool      // counted in p.pressing, until the request leaves the ladder (leave)
	pending     *segment  // reserved before a drain, taken back by the next decide
}

// Rungs of the ladder.
const (
	rungAny = iota
	rungKept
	rungCollect
	rungFree
	rungOwn
	rungFinal
)

// try returns the segment to try now.
func (l *ladder) try() *segment {
	if l.useOwn {
		return l.own
	}
	return l.seg
}

// serve finds req a block, going down the ladder as far as it must. It
// returns the block, handed out for req.pb, and the uses to fence before
// req's queue may use it.
func (p *Pool) serve(req *request) (*block, []policy.Use, error) {
	req.mayDrain = p.cacheState.Load() != cachesGone && (p.arena || p.blockSize(req.size) <= cacheMaxBlock)
	req.drainQ = p.san != nil
	lad := ladder{frees: -1}
	defer p.leave(&lad)
	gone := p.lockFlushed(req.q, req.cacheMu, p.givesBack(req))
	d := p.decide(req, &lad)
	p.mu.Unlock()
	d.free = append(d.free, gone...)
	for {
		if len(d.free) > 0 {
			p.freeFor(req, d.free)
			p.lock()
			lad.freesSeen = p.l.freeBatches // the request's own frees are no change for it
			p.mu.Unlock()
		}
		switch {
		case d.err != nil:
			return nil, nil, d.err
		case d.b != nil:
			return d.b, d.uses, nil
		case d.drain && (p.drainFor(req) || d.never):
			// Blocks came back from the caches (or no segment fits
			// under the limit, and any block that fits is to be tried):
			// decide again, as at the first miss (the reservation is
			// taken back there), with no drain (so this happens once).
			lad.seg, lad.own, req.mayDrain, req.drainQ = nil, nil, false, false
		case d.never:
			return nil, nil, p.outOfMemory(req, lad.own.Size, nil)
		case d.seg != nil:
			lad.pending = nil
			b, err := p.grow(req, d.seg)
			if err == nil {
				return b, nil, nil
			}
			if !isOutOfMemory(err) || errors.Is(err, ErrPanicked) {
				p.lock()
				p.countMiss(req) // not yet, if a drain was asked for
				p.mu.Unlock()
				return nil, nil, err // a panic fails the request, as the doc says
			}
			lad.cause = err
			if !p.nextRung(req, &lad) {
				return nil, nil, p.outOfMemory(req, lad.try().Size, lad.cause)
			}
		default: // the limit refused the segment
			if !p.nextRung(req, &lad) {
				return nil, nil, p.outOfMemory(req, lad.try().Size, lad.cause)
			}
		}
		p.lock()
		d = p.decide(req, &lad)
		p.mu.Unlock()
		p.freed.Broadcast() // it may have taken a reservation back: see inFlightLocked
	}
}

// grow asks the allocator for seg, reserved, and cuts req's block from
// it. If the allocation fails, the reservation is taken back and the
// allocator's error returned: the ladder goes on after an out-of-memory.
func (p *Pool) grow(req *request, seg *segment) (*block, error) {
	hooks := req.hooks
	if hooks != nil {
		if err := p.emit(hooks, Event{Kind: AllocBefore, Size: seg.Size, AllocSize: seg.Size, Queue: queueOf(req.q)}); err != nil {
			p.unreserve(seg)
			return nil, err
		}
	}
	m, err := p.allocateSegment(seg.Size)
	allocAfter := func() error { // of a segment allocated, told once the pool counts it: see SegmentFree
		if hooks == nil {
			return nil
		}
		return p.emit(hooks, Event{Kind: AllocAfter, Size: seg.Size, AllocSize: seg.Size, Buffer: m.buf, SVM: m.svm, Queue: queueOf(req.q), Err: err})
	}
	if err != nil {
		p.unreserve(seg)
		switch hookErr := allocAfter(); {
		case hookErr != nil:
			return nil, errors.Join(err, hookErr)
		case errors.Is(err, ErrPanicked), isOutOfMemory(err):
			return nil, err
		}
		return nil, fmt.Errorf("mempool: allocating %d bytes for a %d-byte request: %w", seg.Size, req.size, err)
	}
	seg.Data = m
	p.lock()
	b := p.commit(req, seg)
	p.mu.Unlock()
	p.freed.Broadcast() // see inFlightLocked
	if hookErr := allocAfter(); hookErr != nil {
		*req.pb = PooledBuffer{pool: p, blk: b, size: req.size, q: req.q} // the segment stays, held; the request fails
		_ = p.putBack(req.pb, false)
		return nil, hookErr
	}
	return b, nil
}

// nextRung takes the ladder's next rung after a refusal, and reports
// whether the request is to be tried again (counted in OOMRetries);
// false: nothing is left.
func (p *Pool) nextRung(req *request, lad *ladder) bool {
	p.lock()
	p.countMiss(req)
	p.mu.Unlock()
	lad.pressed = true
	if !lad.pressing {
		// While a request is on the ladder, the sanitizer's quarantine
		// lets closed blocks through at once (sanitizer.enter): else the
		// other requests' Closes refill it, counted held, while the
		// ladder's rounds go by, and the request fails with every block
		// of the others closed.
		lad.pressing = true
		p.pressing.Add(1)
	}
	for {
		switch lad.rung {
		case rungAny:
			lad.rung = rungKept
			p.lock()
			fits := p.pol.AnyFits(req.need()) // exact bins: never
			p.mu.Unlock()
			if fits {
				return p.retried()
			}
		case rungKept:
			lad.rung = rungCollect
			p.lock()
			kept := p.pol.TakeKept(lad.seg.Size)
			p.forget(kept...)
			p.mu.Unlock()
			p.freeFor(req, kept)
			if len(kept) > 0 {
				return p.retried()
			}
		case rungCollect:
			lad.rung = rungFree
			if !p.dropSafety {
				continue // nothing dropped comes back
			}
			p.flushAll() // a cache's hits count as active too
			p.lock()
			active, before := p.l.s.Allocation.current(), p.l.s.Reclaimed
			p.mu.Unlock()
			if active == 0 {
				continue
			}
			p.collectDropped()
			p.lock()
			back := p.l.s.Reclaimed > before
			p.mu.Unlock()
			if back {
				return p.retried() // a block came back: it may serve the request
			}
		case rungFree:
			// Blocks back from the caches or the quarantine, or given
			// back since the refusal, may serve the request: such a
			// pass retries and frees nothing (the block that fits could
			// be the largest wholly free one).
			moved := p.drainFor(req)
			p.lock()
			if lad.frees < 0 {
				lad.frees = p.pol.Counts().Segments
			}
			var s *segment
			retry := lad.frees > 0
			if retry {
				lad.frees--
				if !moved && !p.pol.Fits(req.need()) {
					s = p.pol.TakeLargest()
					retry = s != nil
				}
			}
			p.forget(s)
			p.mu.Unlock()
			p.freeFor(req, segmentsOf(s))
			if retry {
				return p.retried()
			}
			lad.rung = rungOwn
		case rungOwn:
			lad.rung = rungFinal
			if lad.own != lad.seg {
				lad.useOwn = true
				return p.retried()
			}
		case rungFinal:
			// Other requests may have taken the room each freed
			// segment made, or given memory back since: a last try
			// frees every wholly free segment in the same hold of the
			// lock as its reservation (see core.decide).
			if lad.finals == finalRounds {
				return false
			}
			// A Close that ends the wait before the memory on its way
			// came changes nothing yet: wait again (the waits end by
			// lad.waitUntil, after which no wait is cut).
			for {
				cut := p.waitForMemory(req, lad)
				p.drainFor(req) // after the wait: blocks given back meanwhile count
				p.lock()
				changed := p.changedLocked(req, lad)
				p.mu.Unlock()
				if changed {
					break
				}
				if !cut {
					return false // nothing has changed since the refusal
				}
			}
			lad.finals++
			lad.final = true
			return p.retried()
		}
	}
}

// changedLocked reports whether anything changed for req's refused
// request since lad's last decision: the last rung's test for another
// round. p.mu must be held.
func (p *Pool) changedLocked(req *request, lad *ladder) bool {
	c := p.pol.Counts()
	return c.FreeBlocks > c.SplitBlocks[0]+c.SplitBlocks[1] || // a wholly free segment
		p.l.freeBatches > lad.freesSeen || // memory went back to the device since the decision
		p.l.settled > lad.settledSeen || // a segment came, or blocks left the quarantine
		p.pol.Fits(req.need()) || // a block that fits went back to the policy
		lad.cause == nil && p.roomFor(lad.try().Size, lad.limitSeen) || // the limit has room now, or changed
		p.life == lifeClosed // the retry fails with ErrPoolClosed
}

// leave ends a request's climb of the ladder lad.
func (p *Pool) leave(lad *ladder) {
	if lad.pressing {
		p.pressing.Add(-1)
	}
}

// retried counts a retry of the ladder and returns true.
func (p *Pool) retried() bool {
	p.lock()
	p.l.oomRetried()
	p.mu.Unlock()
	return true
}

// segmentsOf returns s as a list: none if s is nil.
func segmentsOf(s *segment) []*segment {
	if s == nil {
		return nil
	}
	return []*segment{s}
}

// maxRequest is the largest size the pool serves when it does not know
// its device: any block size a policy rounds it to still fits an int64.
const maxRequest = 1 << 60

// blockSize returns the bytes of the block a request of size gets (see
// core.newSegment for requests near the device's limit). It reads
// nothing that changes: no lock needed.
func (p *Pool) blockSize(size int64) int64 { return p.core.blockSize(size) }

// wrap fills in req.pb to hand out block b. If a malloc_after hook
// panics, the request fails with the panic and the block goes back to the
// pool as a Close gives it back: every hook, each told of the block's
// allocation, is told of its free (free_before, free_after), so that no
// hook is left with a block allocated and never freed.
func (p *Pool) wrap(req *request, b *block) (*PooledBuffer, error) {
	pb := req.pb
	*pb = PooledBuffer{pool: p, blk: b, size: req.size, q: req.q}
	if req.hooks != nil {
		if err := p.emit(req.hooks, pb.event(MallocAfter, b)); err != nil {
			return nil, errors.Join(err, req.panicked, p.give(pb, req.hooks, true))
		}
	}
	if req.panicked != nil { // as a hook's panic: the block goes back
		return nil, errors.Join(req.panicked, p.give(pb, req.hooks, true))
	}
	return pb, nil
}

// drainFor is drainCaches for req: the panics of its frees are req's,
// as freeFor's are.
func (p *Pool) drainFor(req *request) (moved bool) {
	moved, err := p.drain()
	if errors.Is(err, ErrPanicked) {
		req.panicked = errors.Join(req.panicked, err)
	}
	return moved
}

// freeFor frees segments the ladder gave up for req (freeSegments). The
// allocator's errors there are not req's, but its panics, and its hooks',
// are: req fails with them (see the package doc's Misuse), once served,
// so that its block goes back as any other.
func (p *Pool) freeFor(req *request, segs []*segment) {
	if err := p.freeSegments(segs); errors.Is(err, ErrPanicked) {
		req.panicked = errors.Join(req.panicked, err)
	}
}

// allocateSegment asks the allocator for n bytes, recovering a panic into
// a *PanicError.
func (p *Pool) allocateSegment(n int64) (m mem, err error) {
	defer func() {
		if v := recover(); v != nil {
			m, err = mem{}, recovered(v, "allocator's Allocate")
		}
	}()
	return p.src.allocate(n)
}

// unreserve takes back a reservation whose allocation failed.
func (p *Pool) unreserve(seg *segment) {
	p.lock()
	p.l.unreserve(seg)
	p.mu.Unlock()
	p.freed.Broadcast() // see inFlightLocked
}
