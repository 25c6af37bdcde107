package mempool

import (
	"cmp"
	"errors"
	"slices"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool/internal/callsite"
)

// This file is the sanitizer's quarantine: closed blocks poisoned and
// kept first in, first out, checked when they leave, and the pool's Close.

// poison enqueues on cq the check of sb's guard, then the fill of its
// poison (none once the pool is closed: the block is freed). s.mu must be
// held.
func (s *sanitizer) poison(sb *sanBlock, cq *qstate) {
	var checked *cl.Event
	if sb.guarded {
		checked = s.check(sb, OutOfBounds, cq, sb.size, sb.blk.Size, guardByte, nil)
	}
	if s.closed || s.stopped {
		return // the block goes back at once: nothing to poison
	}
	var wait []*cl.Event
	if checked != nil {
		wait = append(wait, checked) // the poison waits for the check to read the guard
	}
	ev, err := fill(cq, sb.blk, 0, sb.blk.Size, poisonByte, wait...)
	if err != nil {
		s.warn(sb, err)
		return
	}
	sb.poison = ev
}

// enter puts sb, closed and poisoned, in quarantine, and returns the
// blocks that leave it to make room, oldest first, marked leaving; sb
// itself leaves at once once the pool is closed, or no longer holds
// (StopHolding), or while a request is on the out-of-memory ladder
// (pass; its poison is still checked as it leaves), or if it is larger
// than SanitizerQuarantineBytes (alone: it pushes no other out). p.mu
// must be held.
func (s *sanitizer) enter(sb *sanBlock, pass bool) []*sanBlock {
	s.mu.Lock()
	defer s.mu.Unlock() // nothing printed: the pool's lock may be held
	s.quar = append(s.quar, sb)
	if s.closed || s.stopped || pass || sb.blk.Size > SanitizerQuarantineBytes {
		sb.leaving = true
		s.unchecked++
		return []*sanBlock{sb}
	}
	s.quarN++
	s.quarSize += sb.blk.Size
	var out []*sanBlock
	for _, o := range s.quar {
		if s.quarN <= SanitizerQuarantineBlocks && s.quarSize <= SanitizerQuarantineBytes {
			break
		}
		if !o.leaving {
			o.leaving = true
			s.quarN--
			s.quarSize -= o.blk.Size
			out = append(out, o)
		}
	}
	s.unchecked += len(out)
	return out
}

// drain marks every block in quarantine (of qs only, if not nil)
// leaving, and returns them, for leaveQuarantine.
func (s *sanitizer) drain(qs *qstate) []*sanBlock {
	s.mu.Lock()
	defer s.mu.Unlock() // nothing printed: the pool's lock may be held
	var out []*sanBlock
	for _, o := range s.quar {
		if !o.leaving && (qs == nil || o.q == qs) {
			o.leaving = true
			s.quarN--
			s.quarSize -= o.blk.Size
			out = append(out, o)
		}
	}
	s.unchecked += len(out)
	return out
}

// drainQuarantine takes every block out of the sanitizer's quarantine (of
// qs only, if not nil) through leaveQuarantine, and reports whether any
// left, with the allocator's errors of the frees that made.
func (p *Pool) drainQuarantine(qs *qstate) (moved bool, err error) {
	if p.san == nil {
		return false, nil
	}
	bs := p.san.drain(qs)
	return len(bs) > 0, p.leaveQuarantine(bs)
}

// checked notes that the check of a block marked leaving is enqueued, or
// that it needs none, and wakes a Findings waiting for the last. s.mu
// must be held.
func (s *sanitizer) checked() {
	if s.unchecked--; s.unchecked == 0 {
		s.allChecked.Broadcast()
	}
}

// leaveQuarantine checks the poison of the blocks bs, marked leaving, on
// their queues and gives them to the policy, each recording that its
// queue may still use it (the check); blocks of no queue wait for their
// check on the host instead. It frees what the policy gives up, and
// returns the allocator's errors.
func (p *Pool) leaveQuarantine(bs []*sanBlock) error {
	if len(bs) == 0 {
		return nil
	}
	s := p.san
	var own *cl.CommandQueue
	for _, sb := range bs {
		// Its queue is held while its check is enqueued (see queueOf),
		// taken before s.mu: a Release under way is waited for outside.
		held := sb.q.q != nil && sb.q.q.Hold()
		s.mu.Lock()
		if sb.poison != nil {
			if !sb.reported && s.res != nil {
				cq := s.res.own // no queue, or released: it finished its commands
				if held {
					cq = sb.q
				}
				s.check(sb, WriteAfterClose, cq, 0, sb.blk.Size, poisonByte, sb.poison)
				if cq == s.res.own {
					own = cq.q
				}
			}
			_ = sb.poison.Release()
			sb.poison = nil
		}
		s.checked()
		s.unlockQueued() // written once the queue is let go (sanitize_output.go)
		if held {
			sb.q.q.Unhold()
		}
	}
	if own != nil {
		_ = own.Finish() // the next user, on any queue, comes after the checks
	}
	p.lock()
	var gone []*segment
	for _, sb := range bs {
		p.l.quarantine(sb.blk, -1)
		gone = p.putFree(gone, sb.blk, sb.q, true)
	}
	s.mu.Lock()
	s.quar = slices.DeleteFunc(s.quar, func(o *sanBlock) bool { return slices.Contains(bs, o) })
	s.mu.Unlock() // nothing printed: p.mu is held
	p.forget()
	p.mu.Unlock()
	p.freed.Broadcast() // see Pool.inFlightLocked
	err := p.freeSegments(gone)
	// Last: an output that allocates would wait on the ladder's last
	// rung for the blocks and frees of this call (inFlightLocked).
	s.flushQueued()
	return err
}

// leavingBlocks returns how many blocks are on their way from the
// quarantine to the policy (marked leaving, not yet in leaveQuarantine's
// hold of p.mu).
func (s *sanitizer) leavingBlocks() int {
	s.mu.Lock()
	defer s.mu.Unlock() // nothing printed: the pool's lock may be held
	return len(s.quar) - s.quarN
}

// done ends a Close of a tracked block: it reads the results of full
// batches, every result once the pool is closed (and then releases what
// the sanitizer holds if no block is left).
func (s *sanitizer) done() {
	s.mu.Lock()
	s.inflight--
	closed := s.closed
	s.unlock()
	switch {
	case closed:
		s.harvest(true)
		s.releaseIfIdle()
	case s.due.Load():
		s.harvest(false)
	}
}

// checkQuarantine enqueues the check of the poison of every block in
// quarantine (those of only, if not nil), for Findings. It returns the
// blocks whose queue's Release is under way, not checked: that is not
// waited for under s.mu.
func (s *sanitizer) checkQuarantine(only map[*sanBlock]bool) (waiting []*sanBlock) {
	s.mu.Lock()
	defer s.unlock()
	for _, sb := range s.quar {
		if only != nil && !only[sb] || sb.leaving || sb.poison == nil || sb.reported || s.res == nil {
			continue
		}
		cq, held, ok := s.tryQueueOf(sb, s.res)
		if !ok {
			waiting = append(waiting, sb)
			continue
		}
		s.check(sb, WriteAfterClose, cq, 0, sb.blk.Size, poisonByte, sb.poison)
		if held {
			cq.q.Unhold()
		}
	}
	return waiting
}

// quarantined adds the blocks in quarantine to cached, the blocks that
// are held although the policy sees them in use (see cachedLocked). p.mu
// must be held.
func (s *sanitizer) quarantined(cached map[*block]bool) {
	s.mu.Lock()
	defer s.mu.Unlock() // nothing printed: the pool's lock may be held
	for _, sb := range s.quar {
		cached[sb.blk] = true
	}
}

// stopHolding is the start of the pool's StopHolding: from now on a
// closed block is checked (its guard) and goes back at once, without
// poison or quarantine; FreeHeld drains those waiting.
func (s *sanitizer) stopHolding() {
	s.mu.Lock()
	s.stopped = true
	s.unlock()
}

// poolClosing is the start of the pool's Close, once it refuses
// Allocates: it records a LeakedAtClose finding for each block still open
// (track records one for a block handed out by a request that was under
// way), gives the quarantine's blocks to the policy (checked) for Close to
// free, and reads every result. It returns the allocator's errors of
// freeing segments on the way. A second call does nothing.
func (s *sanitizer) poolClosing() error {
	s.harvest(true) // the findings of blocks closed before come first
	s.mu.Lock()
	if s.closed {
		s.unlock()
		return nil
	}
	s.closed = true
	open := make([]*sanBlock, 0, len(s.live))
	for _, sb := range s.live {
		open = append(open, sb)
	}
	slices.SortFunc(open, func(a, b *sanBlock) int { return cmp.Compare(a.seq, b.seq) })
	for _, sb := range open {
		s.report(Finding{Kind: LeakedAtClose, BlockID: sb.id, Size: sb.size, AllocSite: callsite.First(sb.alloc)})
	}
	s.unlock()
	err := s.p.leaveQuarantine(s.drain(nil))
	s.harvest(true)
	return err
}

// releaseIfIdle releases the sanitizer's kernel, queue and result buffers
// once the pool is closed and no block it tracks is open, closing or in
// the quarantine (whose blocks are checked as they leave it). A block
// closed later is checked without them: never, as none is left.
func (s *sanitizer) releaseIfIdle() {
	s.harvestMu.Lock()
	defer s.harvestMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock() // nothing printed here
	if !s.closed || len(s.live) > 0 || s.inflight > 0 || len(s.quar) > 0 || s.res == nil || len(s.full) > 0 || s.cur != nil && len(s.cur.checks) > 0 {
		return
	}
	res := s.res
	s.res, s.resErr = nil, errors.New("mempool: the sanitizer's resources are released")
	_ = res.own.q.Finish()
	for _, b := range s.spare {
		_ = b.Release()
	}
	if s.cur != nil {
		_ = s.cur.buf.Release()
	}
	s.spare, s.cur = nil, nil
	_ = res.k.Release()
	_ = res.own.q.Release()
	releaseSanProgram(res.ctx)
}

// report records f and prints it. s.mu must be held.
func (s *sanitizer) report(f Finding) {
	s.findings = append(s.findings, f)
	s.print("%s\n", f.String())
}

// warn prints, once per pool, that a block could not be checked. s.mu
// must be held.
func (s *sanitizer) warn(sb *sanBlock, err error) {
	if !s.warned {
		s.print("clpool sanitizer: cannot check block %#x allocated at %s (further failures are not printed): %v\n",
			sb.id, callsite.First(sb.alloc), err)
	}
	s.warned = true
}
