package mempool

import "github.com/clpool/clpool/cl"

// S31cHoldPoolLock takes p.mu, as a pool operation on another goroutine
// (Limit, SetLimit) does, and returns what lets go of it.
func S31cHoldPoolLock(p *Pool) (release func()) {
	p.lock()
	return p.mu.Unlock
}

// S31cCacheLocked returns what reports whether q's cache's lock is held
// (it only tries it; it takes no other lock).
func S31cCacheLocked(p *Pool, q *cl.CommandQueue) func() bool {
	qs, err := p.queueState(q, false, "")
	if err != nil {
		panic(err)
	}
	return func() bool {
		if qs.c.mu.TryLock() {
			qs.c.mu.Unlock()
			return false
		}
		return true
	}
}
