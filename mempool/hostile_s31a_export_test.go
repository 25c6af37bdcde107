package mempool

import "github.com/clpool/clpool/cl"

// S31aHoldCacheLock takes the lock of q's cache in p, as an operation on
// q in progress on another goroutine does, and returns what lets go of
// it. A cache hit on another queue never waits for it.
func S31aHoldCacheLock(p *Pool, q *cl.CommandQueue) (release func()) {
	qs, err := p.queueState(q, false, "")
	if err != nil {
		panic(err)
	}
	qs.c.mu.Lock()
	return qs.c.mu.Unlock
}

// S31aJoined returns, for q's cache in p, whether it joined its turns
// (qdelta.joined), and its turns pending.
func S31aJoined(p *Pool, q *cl.CommandQueue) (joined bool, turns int) {
	qs, err := p.queueState(q, false, "")
	if err != nil {
		panic(err)
	}
	qs.c.mu.Lock()
	defer qs.c.mu.Unlock()
	return qs.c.d.joined, qs.c.d.count()
}
