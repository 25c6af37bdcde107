package mempool

// This file brings the queue caches' sums into the ledger (see
// qcache.go): each cache every flushOps operations, before any
// operation that takes p.mu on its queue, the other caches not in use
// then (flushIdleCaches), and all of them before Stats.

// flushIfDue brings r's cache's sums into the ledger once they cover
// flushOps operations. r.c.mu must be held. It is small enough to be
// inlined, so that the hot path pays a comparison, not a call.
func (p *Pool) flushIfDue(r *qstate) {
	if r.c.d.ops() >= flushOps {
		p.flushCache(r)
	}
}

// flushCache brings r's cache's sums into the ledger: it takes p.mu for
// flushCacheLocked. r.c.mu must be held.
func (p *Pool) flushCache(r *qstate) {
	p.lock()
	p.flushCacheLocked(r)
	p.mu.Unlock()
}

// flushCacheLocked brings r's cache's sums into the ledger. p.mu must be
// held, and r.c.mu too (taken before p.mu: see the lock order above).
func (p *Pool) flushCacheLocked(r *qstate) {
	if r.c.d.ops() == 0 {
		return
	}
	p.l.flush(&r.c.d, r)
	r.c.d.reset()
}

// lockFlushed takes p.mu for an operation on queue r (p.host: none),
// with r's cache's sums in the ledger first, so that the ledger sees the
// queue's operations in order, and lets go of r's cache's lock. If
// locked, the caller holds that lock already (allocateCached's miss);
// else lockFlushed takes it. Once caching is off, the caches were
// drained (see StopHolding) and there is nothing to bring in (a cache's
// lock held keeps caching from going off: StopHolding drains that cache
// first).
func (p *Pool) lockFlushed(r *qstate, locked bool) {
	if !locked {
		if p.cacheState.Load() == cachesGone {
			p.lock()
			return
		}
		r.c.mu.Lock()
	}
	p.lock()
	p.flushCacheLocked(r)
	r.c.mu.Unlock()
	p.flushIdleCaches(r)
}

// flushIdleCaches brings in the sums of every queue cache but r's
// whose lock is free: their operations came before the one p.mu is
// taken for (a cache whose lock is held is in the middle of one, which
// runs concurrently with it). So a goroutine that closes a buffer on one
// queue, then allocates on another, finds the peaks as if counted in
// that order. p.mu must be held. It only tries each cache's lock, which
// never waits: the lock order (c.mu, then p.mu) cannot deadlock.
func (p *Pool) flushIdleCaches(r *qstate) {
	if p.cacheState.Load() == cachesGone {
		return
	}
	for _, qs := range p.cacheList() {
		if qs != r && qs.c.ever.Load() && qs.c.mu.TryLock() {
			p.flushCacheLocked(qs)
			qs.c.mu.Unlock()
		}
	}
}

// cacheList returns every queue cache: p.host's and each queue's. It
// takes no lock: the list is replaced, never changed.
func (p *Pool) cacheList() []*qstate { return *p.caches.Load() }

// flushAll brings every queue's cache's sums into the ledger.
func (p *Pool) flushAll() {
	for _, qs := range p.cacheList() {
		p.lockFlushed(qs, false)
		p.mu.Unlock()
	}
}
