package mempool

import "time"

// This file is the ladder's last rung's wait (ladder.go): memory on its
// way to the pool, which may serve a request the limit or the device
// refused.

// finalRounds bounds the ladder's last rung: how many times a request
// frees every wholly free segment and tries again before it fails. Each
// round needs a change since the last refusal; two goroutines that
// allocate and free in turn under a budget, on a slow runtime (Oclgrind),
// made one of them lose four rounds in a row to the other's allocations
// in flight (TestHostileConcurrentLadderFailsWithMemoryToFree).
const finalRounds = 16

// inFlightWait bounds the waits of the ladder's last rung, all its rounds
// together: a request made by code the pool calls while memory is in
// flight for the same goroutine (a hook, the sanitizer's output, an
// allocator that calls the pool) would otherwise wait for itself. Past
// it, the request goes on as if nothing were in flight.
const inFlightWait = 500 * time.Millisecond

// waitForMemory is the wait of the ladder's last rung for req: counted in
// p.waiting from before it reads the give-backs and drains (blocks given
// back before: into the policy, where placement.Fits sees them), it waits
// (awaitInFlight) until lad.waitUntil at the latest, set at the rung's
// first round. It reports whether a block given back ended the wait with
// memory still on its way and time left to wait for it (cut).
func (p *Pool) waitForMemory(req *request, lad *ladder) (cut bool) {
	if lad.waitUntil.IsZero() {
		lad.waitUntil = time.Now().Add(p.waitInFlight)
	}
	p.waiting.Add(1) // a block given back from now on ends the wait
	defer p.waiting.Add(-1)
	p.lock()
	returned := p.l.returned
	p.mu.Unlock()
	p.drainFor(req)
	p.lock()
	p.awaitInFlight(lad, returned)
	cut = p.l.returned != returned && p.inFlightLocked() && time.Now().Before(lad.waitUntil)
	p.mu.Unlock()
	return cut
}

// awaitInFlight waits, for the ladder's last rung of lad, while memory
// that may serve its refused request is on its way (inFlightLocked) and
// nothing has changed for it since the refusal (lad's decision): no batch
// of frees ended, no segment or quarantined block arrived, no block was
// given back since the ledger's count was returned (gaveBack, for
// requests counted in p.waiting: the caller's count, taken before it read
// returned and drained), no free block fits, the pool is open, and, if
// only the limit refused it, the limit has no room for it. It waits until
// lad.waitUntil at the latest. p.mu must be held; the wait lets go of it
// (p.freed).
func (p *Pool) awaitInFlight(lad *ladder, returned int64) {
	d := time.Until(lad.waitUntil)
	if d <= 0 || !p.inFlightLocked() {
		return
	}
	expired := false
	t := time.AfterFunc(d, func() {
		p.lock()
		expired = true
		p.mu.Unlock()
		p.freed.Broadcast()
	})
	defer t.Stop()
	need, limited := lad.try().Size, lad.cause == nil
	for p.inFlightLocked() && !expired && p.l.freeBatches == lad.freesSeen && p.l.settled == lad.settledSeen &&
		p.l.returned == returned && !p.pol.Fits(need) && p.life != lifeClosed && !(limited && p.roomFor(need, lad.limitSeen)) {
		p.freed.Wait()
	}
}

// inFlightLocked reports whether memory that may serve a refused request
// is on its way: segments being freed or allocated, blocks leaving the
// quarantine. Each way ends (freeSegments, commit, unreserve,
// leaveQuarantine) with a signal of freed. p.mu must be held.
func (p *Pool) inFlightLocked() bool {
	return p.l.freeing > 0 || p.l.inflight > 0 || p.san != nil && p.san.leavingBlocks() > 0
}

// roomFor reports whether the limit has room for a segment of need bytes
// now, or changed from seen, a limit under which one was refused (0 is
// none: a refusal then was the managed bytes passing math.MaxInt64). p.mu
// must be held.
func (p *Pool) roomFor(need, seen int64) bool {
	return p.limit != seen || p.room(nil) >= need
}

// gaveBack tells the requests waiting on the ladder's last rung, if any,
// that a block was given back (to a queue cache, the policy or the
// quarantine): their wait ends, they drain, and try again if a block fits
// now. The caller holds no lock. Small enough to inline: a Close with no
// request waiting pays one atomic load.
func (p *Pool) gaveBack() {
	if p.waiting.Load() > 0 {
		p.wakeWaiters()
	}
}

// wakeWaiters is gaveBack's part for a request waiting.
func (p *Pool) wakeWaiters() {
	p.lock()
	p.l.returned++
	p.mu.Unlock()
	p.freed.Broadcast()
}
