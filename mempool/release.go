package mempool

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/clpool/clpool/mempool/internal/policy"
)

// This file is a block's way back: a Close (or a finalizer) gives it to
// its queue's cache (qcache.go) or to the core, and the segments the core
// gives up are freed here, outside the lock (stale sub-buffers are
// released under it: releaseStale).

// put takes back the block of a PooledBuffer, marking it closed (a negative
// pb.size): the block is held for reuse, or, after StopHolding (or for an
// exact-size block), its segment is freed once wholly free. A PooledBuffer
// already closed returns ErrClosed and changes nothing. The closed mark is
// set under the lock of pb's queue's cache, so that of two racing Closes
// one wins.
//
// The block records the queues whose commands may still use it: pb's own
// and those of RecordQueue, each with its count of markers now (see
// queue.go). A hook that panics does not stop the block from going back:
// put returns the panic, joined with the allocator's error if any.
func (p *Pool) put(pb *PooledBuffer) error { return p.give(pb, p.hooks.Load(), true) }

// putBack takes back a block that was never handed out after all (a
// failed handover, a segment whose hook panicked): no hook is told, since
// none was told of its allocation (malloc_after). With keepUses,
// the block keeps the uses it has; otherwise it records pb's queue's, as
// put does.
func (p *Pool) putBack(pb *PooledBuffer, keepUses bool) error { return p.give(pb, nil, !keepUses) }

// give is put, with the hooks to tell and whether to record pb's uses.
// It is kept small for the hot path, a Close whose block waits in its
// queue's cache; giveBack does the rest.
func (p *Pool) give(pb *PooledBuffer, hooks hookList, record bool) error {
	r := pb.q
	// Every Close of pb takes r's cache's lock before anything else:
	// under it, pb's closed mark is set once, so that of two racing
	// Closes one wins.
	r.c.mu.Lock()
	size := pb.size
	if size < 0 {
		r.c.mu.Unlock()
		return ErrClosed
	}
	pb.size = ^size
	if hooks == nil && record && p.putCached(pb, size) {
		r.c.mu.Unlock()
		p.gaveBack()
		return nil
	}
	if hooks == nil && p.san == nil {
		// Nothing to call before the core: one hold of p.mu, taken
		// before r's cache's lock is let go, brings in r's sums and
		// takes the block back.
		p.lockUnder(r)
		p.flushCaches(r) // the ledger sees the operations in order
		r.c.mu.Unlock()
		return p.takeBackThenUnlock(pb, size, record)
	}
	if r.c.d.ops() > 0 {
		p.flushCache(r)
	}
	r.c.mu.Unlock()
	return p.giveBack(pb, size, hooks, record)
}

// giveBack is give's work once pb is marked closed: it tells the hooks,
// gives the block to the core, and frees what the core gives up.
func (p *Pool) giveBack(pb *PooledBuffer, size int64, hooks hookList, record bool) error {
	if p.san != nil {
		if sb := p.san.closing(pb); sb != nil {
			return p.giveBackSanitized(pb, sb, size, hooks) // checked, poisoned, quarantined
		}
	}
	b := pb.blk
	var hookErr error
	var after Event
	if hooks != nil {
		hookErr = p.emit(hooks, pb.event(FreeBefore, b))
		after = pb.event(FreeAfter, b) // before the core: an arena may merge b away
	}
	p.lock()
	p.flushCaches(nil)
	err := p.takeBackThenUnlock(pb, size, record)
	if hooks != nil {
		after.Err = err
		if herr := p.emit(hooks, after); hookErr == nil {
			hookErr = herr
		}
	}
	return errors.Join(err, hookErr)
}

// takeBackThenUnlock gives pb's block, of a request of size, to the core
// under p.mu, which must be held, lets go of it, and frees what the core
// gave up.
func (p *Pool) takeBackThenUnlock(pb *PooledBuffer, size int64, record bool) error {
	if p.dropSafety {
		runtime.SetFinalizer(pb, nil) // under p.mu: see core.handOut
	}
	gone := p.takeBack(pb.blk, size, pb.q, record)
	p.forget()
	p.mu.Unlock()
	p.gaveBack()
	return p.freeSegments(gone)
}

// releaseStale releases the sub-buffers the policy dropped because their
// block's range changed (a split or a merge), in the hold of the lock that
// changed it: before any block of a new range over theirs is handed out,
// so that no sub-buffer outlives its range beside one partly overlapping
// it. NVIDIA's driver (580.159) dereferences a null pointer in
// clReleaseMemObject of a sub-buffer partly overlapping another live one,
// both used by commands (cl's TestSubBufferPatterns; BENCHMARKS.md, "On a
// real GPU, second visit"). It is the one OpenCL call under the lock; a
// hit makes it only if the hit split or merged blocks that had
// sub-buffers (GetOn merges the blocks waiting unmerged).
func (c *core) releaseStale() {
	c.stale = c.pol.TakeStale(c.stale[:0])
	for i, sub := range c.stale {
		_ = sub.buf.Release() // a sub-buffer of ours: its release can fail only if its context is gone
		c.stale[i] = mem{}
	}
	c.stale = c.stale[:0]
}

// freeSegments gives the segments, already out of the pool's accounts
// (forget), back to the allocator. It returns the allocator's errors,
// joined: one that fails (or panics) does not keep the others from being
// freed.
func (p *Pool) freeSegments(segs []*segment) error {
	if len(segs) == 0 {
		return nil
	}
	var errs []error
	freed, failed := 0, 0
	hooks := p.hooks.Load()
	for _, s := range segs {
		if s.Data.svm != nil || p.hostOwned {
			// clSVMFree frees at once, where clReleaseMemObject waits
			// for the commands that use the buffer; so does the unmap
			// of pinned memory for those of queues other than its
			// allocator's. Memory that may be in use is better leaked
			// than freed.
			if err := p.waitForUses(s); err != nil {
				errs = append(errs, err, p.segmentFreed(hooks, s, err))
				continue
			}
		}
		// Told before the Free: a segment that another goroutine
		// allocates in this one's room is then told after it.
		errs = append(errs, p.segmentFreed(hooks, s, nil))
		freed++
		if err := p.freeSegment(s.Data); err != nil {
			failed++
			errs = append(errs, err)
		}
	}
	var bytes int64
	for _, s := range segs {
		bytes += s.Size
	}
	p.lock()
	p.l.deviceFreed(freed, failed, bytes)
	p.mu.Unlock()
	p.freed.Broadcast()
	return errors.Join(errs...)
}

// freeSegment gives m back to the allocator, recovering a panic into a
// *PanicError.
func (p *Pool) freeSegment(m mem) (err error) {
	defer func() {
		if err == nil {
			err = recovered(recover(), "allocator's Free")
		}
	}()
	return p.src.free(m)
}

// waitForUses waits on the host for the commands that may still use
// seg's memory (SVM, or pinned): those enqueued before its blocks were given back, on the
// queues their uses record (see core.recordUses; a merged block has the
// uses of its parts). seg is out of the pool: nothing else reads it.
func (p *Pool) waitForUses(seg *segment) error {
	var uses []policy.Use
	for b := range seg.Blocks() {
		uses = append(uses, b.Uses...)
	}
	if len(uses) == 0 {
		return nil
	}
	fs, err := p.order(uses, nil, false)
	p.lock()
	p.l.handedOver(p.host, fs)
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%w; the %d-byte segment that they may still use is left allocated (leaked), not freed under them", err, seg.Size)
	}
	return nil
}
