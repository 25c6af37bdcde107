package mempool

// WithoutQueueCaches makes a pool whose queues cache no blocks, so that
// tests can compare the two and order reuse through the policy itself.
func WithoutQueueCaches() Option { return func(c *config) { c.noCaches = true } }
