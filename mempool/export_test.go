package mempool

import "sync/atomic"

// WithoutQueueCaches makes a pool whose queues cache no blocks, so that
// tests can compare the two and order reuse through the policy itself.
func WithoutQueueCaches() Option { return func(c *config) { c.noCaches = true } }

// CountLocks makes p count its lock's acquisitions from now on, in the
// returned counter. Call it before p is shared.
func CountLocks(p *Pool) *atomic.Int64 {
	p.locks = new(atomic.Int64)
	return p.locks
}
