package mempool

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/clpool/clpool/cl"
)

// WithoutQueueCaches makes a pool whose queues cache no blocks, so that
// tests can compare the two and order reuse through the policy itself.
func WithoutQueueCaches() Option { return func(c *config) { c.noCaches = true } }

// CacheShare is the part of an arena's managed bytes that a queue's
// cache holds at most (1/CacheShare), but its big blocks.
const CacheShare = cacheShare

// CountLocks makes p count its lock's acquisitions from now on, in the
// returned counter. Call it before p is shared.
func CountLocks(p *Pool) *atomic.Int64 {
	p.locks = new(atomic.Int64)
	return p.locks
}

// CheckBlockCounts checks how many blocks each of p's segments is cut
// into, as the policy counts them (Segment.BlockCount, which the ledger
// takes idle segments out by), against its blocks now.
func CheckBlockCounts(p *Pool) error {
	p.lock()
	defer p.mu.Unlock()
	for seg, id := range p.l.segs {
		n := 0
		for range seg.Blocks() {
			n++
		}
		if seg.BlockCount() != n {
			return fmt.Errorf("segment %d: %d blocks, counted %d", id, n, seg.BlockCount())
		}
	}
	return nil
}

// SetParking turns the parking of an arena pool's sub-buffers on or off
// (policy.Arena.SetParking), as New does off on NVIDIA's driver.
func SetParking(p *Pool, on bool) {
	p.lock()
	defer p.mu.Unlock()
	p.arenas.SetParking(on)
	p.releaseStale()
}

// QueueStates returns how many queue states p keeps (forgotten ones not
// counted), and ForgetMin the fewest at which it forgets released ones.
func QueueStates(p *Pool) int {
	p.lock()
	defer p.mu.Unlock()
	return len(p.queueOf)
}

// ForgetMin is forgetMin, for the tests.
const ForgetMin = forgetMin

// SetInFlightWait sets how long p's ladder waits, in all, for memory on
// its way (inFlightWait), so that a test of what ends the wait sees the
// wait end by it and not by the time. Call it before p is shared.
func SetInFlightWait(p *Pool, d time.Duration) { p.waitInFlight = d }

// Quarantined returns how many blocks p's sanitizer holds in quarantine
// (counted held), leaving ones too until they are in the policy.
func Quarantined(p *Pool) int {
	p.lock()
	defer p.mu.Unlock()
	return p.l.quar.blocks
}

// LockCacheLate is lockCaches's blocking phase for q's cache alone, as a
// lockCaches descheduled between the cache's Lock and its frozen mark
// does it: it takes the lock, reports on locked, waits pause, marks the
// cache, takes p.mu and brings the cache's sums in, and lets go of both.
func LockCacheLate(p *Pool, q *cl.CommandQueue, locked chan<- struct{}, pause time.Duration) error {
	qs, err := p.queueState(q, false, "")
	if err != nil {
		return err
	}
	p.inspecting.Add(1)
	qs.c.mu.Lock()
	close(locked)
	time.Sleep(pause)
	qs.c.frozen.Store(true)
	p.lock()
	p.flushTurnsLocked([]*qstate{qs})
	p.unlockCaches([]*qstate{qs})
	return nil
}

// FrozenLate returns how many of frozen's waits frozenWait ended.
func FrozenLate(p *Pool) int64 {
	p.lock()
	defer p.mu.Unlock()
	return p.frozenLate
}

// LeavingBlocks returns how many blocks are on their way from p's
// sanitizer's quarantine to the policy: marked leaving, not yet in the
// policy (review s45e).
func LeavingBlocks(p *Pool) int {
	if p.san == nil {
		return 0
	}
	return p.san.leavingBlocks()
}

// SetLockCachesWaited makes lockCaches wait for each cache's lock at once
// (no tries under p.mu) and call f once it holds them, before p.mu, in
// every pool; the returned func undoes it.
func SetLockCachesWaited(f func()) (undo func()) {
	lockCachesWaited, lockCachesTries = f, 0
	return func() { lockCachesWaited, lockCachesTries = nil, lockTries }
}
