package mempool

import (
	"errors"
	"runtime"
	"slices"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool/internal/callsite"
	"github.com/clpool/clpool/mempool/internal/policy"
)

// This file is the sanitizer's part of a block's life: its guard at
// Allocate, its check at Close, and a dropped buffer (sanitize.go has the
// API and the state).

// guardFor returns the guard bytes a request of size asks the policy for
// past it: SanitizerGuard, or what the device's largest buffer leaves.
func (s *sanitizer) guardFor(size int64) int64 {
	g := int64(SanitizerGuard)
	if m := s.p.maxAlloc; m > 0 && size+g > m {
		g = max(m-size, 0)
	}
	return g
}

// track notes pb, just handed out, with its caller's stack, and fills its
// bytes past the request with guardByte on its queue.
func (s *sanitizer) track(pb *PooledBuffer) {
	var pcs [sanDepth]uintptr
	n := runtime.Callers(3, pcs[:]) // from allocate's caller
	sb := &sanBlock{id: pb.ID(), blk: pb.blk, size: pb.size, q: pb.q, alloc: slices.Clone(pcs[:n])}
	s.mu.Lock()
	s.seq++
	sb.seq = s.seq
	s.live[sb.id] = sb
	if s.closed {
		// Handed out by a request under way when Close began: open when
		// its pool was closed.
		s.report(Finding{Kind: LeakedAtClose, BlockID: sb.id, Size: sb.size, AllocSite: callsite.First(sb.alloc)})
	}
	own := s.guard(sb)
	s.unlock()
	if own != nil {
		// The pool cannot order the user's queue after the fill: the
		// host waits for it.
		_ = own.Finish()
	}
}

// guard fills sb's bytes past its request with guardByte and notes it
// guarded; it returns the sanitizer's queue if the fill is there. s.mu
// must be held.
func (s *sanitizer) guard(sb *sanBlock) (own *cl.CommandQueue) {
	if sb.blk.Size <= sb.size {
		return nil // no room for a guard
	}
	res, err := s.resources(sb.blk)
	if err != nil {
		return nil
	}
	cq, held, ok := s.tryQueueOf(sb, res)
	if !ok {
		return nil // its queue is being released, under the request: no guard
	}
	if held {
		defer cq.q.Unhold()
	}
	ev, err := fill(cq, sb.blk, sb.size, sb.blk.Size, guardByte)
	if err != nil {
		s.warn(sb, err)
		return nil
	}
	if cq.ooo { // the user's commands come after the fill
		err = cq.q.EnqueueBarrier(ev)
	}
	_ = ev.Release()
	sb.guarded = err == nil
	if cq == res.own {
		return cq.q
	}
	return nil
}

// closing returns the sanitizer's record of pb, which a Close (or the
// finalizer) is giving back, and takes it out of the active blocks; nil if
// the sanitizer does not track pb (a block that was never handed out).
func (s *sanitizer) closing(pb *PooledBuffer) *sanBlock {
	var pcs [sanDepth]uintptr
	n := runtime.Callers(3, pcs[:])
	s.mu.Lock()
	defer s.unlock()
	sb := s.live[pb.ID()]
	if sb == nil {
		return nil
	}
	delete(s.live, sb.id)
	s.inflight++
	if !sb.dropped {
		sb.close = slices.Clone(pcs[:n])
	}
	return sb
}

// dropped notes that pb, which the garbage collector found unreachable,
// was never closed: the finalizer's giving it back reports it
// (giveBackSanitized), once the block is out of the active ones.
func (s *sanitizer) dropped(pb *PooledBuffer) {
	s.mu.Lock()
	defer s.unlock()
	if sb := s.live[pb.ID()]; sb != nil {
		sb.dropped = true
	}
}

// giveBackSanitized is giveBack for a block the sanitizer tracks: it tells
// the hooks, checks the block's guard after the commands that may still
// use it, poisons it, and puts it in quarantine (counted held) instead of
// the policy; the blocks it pushes out of the quarantine go to the policy.
func (p *Pool) giveBackSanitized(pb *PooledBuffer, sb *sanBlock, size int64, hooks hookList) error {
	s, b := p.san, pb.blk
	var hookErr error
	var after Event
	if hooks != nil {
		hookErr = p.emit(hooks, pb.event(FreeBefore, b))
		after = pb.event(FreeAfter, b)
	}
	// The commands that may still use b: its queue's, and those of the
	// queues RecordQueue added, as a handover would wait for them.
	p.lock()
	p.recordUses(b, pb.q)
	uses := slices.Clone(b.Uses)
	b.Uses = b.Uses[:0]
	p.mu.Unlock()
	p.checkAtClose(sb, uses)
	p.lock()
	if p.dropSafety {
		runtime.SetFinalizer(pb, nil) // under p.mu: see core.handOut
	}
	p.l.deactivate(b, size)
	leaving := s.enter(sb, p.pressing.Load() > 0)
	var gone []*segment
	if i := slices.Index(leaving, sb); i >= 0 && sb.poison == nil {
		// Nothing to check (the pool is closed, or no longer holds): b goes back at once,
		// never counted as held in the quarantine.
		leaving = slices.Delete(leaving, i, i+1)
		s.mu.Lock()
		s.quar = slices.DeleteFunc(s.quar, func(o *sanBlock) bool { return o == sb })
		s.checked()
		s.mu.Unlock() // nothing printed: p.mu is held
		gone = p.putFree(nil, b, pb.q, true)
	} else {
		p.l.quarantine(b, 1)
	}
	p.forget()
	p.mu.Unlock()
	// The blocks leaving first: a hook told of a segment's free may call
	// Findings, which waits for their checks.
	lerr := p.leaveQuarantine(leaving)
	err := errors.Join(p.freeSegments(gone), lerr)
	if sb.dropped {
		s.mu.Lock()
		s.report(Finding{Kind: Dropped, BlockID: sb.id, Size: sb.size, AllocSite: callsite.First(sb.alloc)})
		s.unlock()
	}
	s.done()
	if hooks != nil {
		after.Err = err
		if herr := p.emit(hooks, after); hookErr == nil {
			hookErr = herr
		}
	}
	p.gaveBack()
	return errors.Join(err, hookErr)
}

// checkAtClose orders sb's queue (the sanitizer's own for none) after the
// commands of uses, then enqueues there the check of sb's guard and the
// fill of its poison (none once the pool is closed: the block is freed).
func (p *Pool) checkAtClose(sb *sanBlock, uses []policy.Use) {
	defer p.san.flushQueued() // last: after the queue held below is let go
	s := p.san
	s.mu.Lock()
	res, err := s.resources(sb.blk)
	s.unlock()
	if err != nil {
		return
	}
	cq := s.queueOf(sb, res)
	if len(uses) > 0 {
		fs, err := p.order(uses, cq, cq != res.own)
		if errors.Is(err, errQueueReleased) { // released since: it finished its commands
			cq = res.own
			var more []fenced
			more, err = p.order(uses, cq, false)
			fs = append(fs, more...)
		}
		p.lock()
		p.l.marked(fs)
		if err != nil {
			// Unchecked: a check could see the user's own writes. The
			// block keeps its uses, for the next user to wait for.
			sb.blk.Uses = append(sb.blk.Uses[:0], uses...)
		}
		p.mu.Unlock()
		if err != nil {
			s.mu.Lock()
			s.warn(sb, err)
			s.unlock()
			return
		}
	}
	// sb's queue is held while its check and poison are enqueued and sent
	// (see queueOf), after the barrier: the pool holds one queue at a
	// time. Released since, it finished its commands, the barrier too.
	if cq != res.own {
		if !cq.q.Hold() {
			cq = res.own
		} else {
			defer cq.q.Unhold()
		}
	}
	s.mu.Lock()
	s.poison(sb, cq)
	s.unlockQueued() // written once cq is let go (flushQueued, deferred above)
	// A write after Close on another queue is seen only once the poison
	// is there: the poison is sent at once, and the host waits for it
	// where the block has no queue of its own.
	if cq == res.own {
		_ = cq.q.Finish()
	} else {
		_ = cq.q.Flush()
	}
}
