package mempool

import (
	"errors"
	"slices"

	"github.com/clpool/clpool/mempool/internal/policy"
)

// This file is a request's way into the pool: Allocate, the queue cache's
// hit (qcache.go), and, past it, serve (ladder.go) and the handover of
// what it found (handOver): a free block of the policy under the pool's
// lock, and on a miss the one out-of-memory ladder, for the limit's
// refusals and the device's alike. The core (core.go) decides each step
// under the lock; the pool carries it out, with the allocator, the hooks
// and OpenCL called outside it (but the release of stale sub-buffers:
// core.releaseStale).

// request is one Allocate, as it goes through the ladder.
type request struct {
	size     int64         // the bytes asked for
	q        *qstate       // the queue it is for (p.host: none)
	hooks    hookList      // the hooks to tell; nil if none
	pb       *PooledBuffer // newPooledBuffer's, readied by the core's handOut
	mayDrain bool          // queue caches may hold blocks that serve it
	drainQ   bool          // the sanitizer's quarantine may: a limit's refusal drains it too (see core.decide)
	counted  bool          // counted as a hit or a miss
	cacheMu  bool          // q's cache missed it and is still locked (see allocateCached)
	guard    int64         // the sanitizer's guard bytes after the block (sanitize.go); 0 when off
	panicked error         // the panics of the frees the ladder made for it (freeFor): it fails
}

// need returns the bytes the policy is asked for: the request's, and the
// sanitizer's guard after them.
func (r *request) need() int64 { return r.size + r.guard }

// Allocate returns a buffer of at least size bytes. With exact bins (the
// default) it is a held block of size's bin if there is one (of the four
// most recently given back, the newest that only the allocator's queue
// may still use, else the most recently given back: see the package doc's
// Queues), else
// a new block of the bin's AllocSize from the allocator; with WithArena, a
// block cut from a segment. Allocate(0) returns a real block
// (1 byte with bins, the arena's smallest block with it). A negative size
// is an error, and changes nothing; a size over the device's largest
// buffer (over an allocator that names no device, over 2^60 bytes) is an
// *OutOfMemoryError at once, counted and told to the hooks.
//
// Near the device's largest buffer (MaxMemAllocSize), the block a policy
// would make can pass the limit while the request does not: such a request
// gets a block of exactly its size, which is freed on Close rather than
// held, since it is too small for the rest of its bin. (PyOpenCL fails these
// requests.)
//
// The block is for use on the allocator's queue (allocator.Immediate's),
// ordered after every command that may still use it on other queues (see
// On). Over an allocator without a queue (allocator.Deferred), the pool
// knows no queue: a block last used through On waits on the host for the
// commands that may still use it, and the caller orders the rest.
func (p *Pool) Allocate(size int64) (*PooledBuffer, error) { return p.allocate(size, p.defq) }

// allocate serves a request of size bytes on queue r (p.host: none).
func (p *Pool) allocate(size int64, r *qstate) (*PooledBuffer, error) {
	if uint64(size) > uint64(p.sizeCap) { // a negative size wraps past any cap
		return nil, p.refuseSize(size, r)
	}
	hooks := p.hooks.Load()
	pb := p.newPooledBuffer()
	var cacheMu bool
	if hooks == nil {
		var got *PooledBuffer
		if got, cacheMu = p.allocateCached(size, r, pb); got != nil {
			return got, nil
		}
	}
	req := &request{size: size, q: r, hooks: hooks, pb: pb, cacheMu: cacheMu}
	if p.san != nil {
		req.guard = p.san.guardFor(size)
	}
	if hooks != nil {
		if err := p.emit(hooks, Event{Kind: MallocBefore, Size: size, AllocSize: p.blockSize(req.need()), Queue: queueOf(r)}); err != nil {
			return nil, p.mallocFailed(req, err)
		}
	}
	b, uses, err := p.serve(req)
	if err == nil && uses != nil {
		err = p.handOver(req, b, uses)
	}
	if err != nil {
		if req.panicked != nil {
			err = errors.Join(err, req.panicked)
		}
		return nil, p.mallocFailed(req, err)
	}
	pb, err = p.wrap(req, b)
	if p.san != nil && err == nil {
		p.san.track(pb) // its guard filled, its site noted
	}
	return pb, err
}

// handOver orders block b, taken for req's queue, after the commands of
// uses; in a pool over pinned memory, the host waits for them (finish),
// as it reads and writes the block's bytes directly, in no queue's order.
// If that fails, the block goes back to the pool as it was.
func (p *Pool) handOver(req *request, b *block, uses []policy.Use) error {
	r, fs, err := req.q, []fenced(nil), error(nil)
	if p.hostOwned {
		fs, err = p.finish(uses)
		if !slices.ContainsFunc(fs, func(f fenced) bool { return f.from != r }) {
			r = p.host // its own queue's use alone: a host wait, no handover
		}
	} else {
		fs, err = p.order(uses, req.q.orNil(), false)
	}
	p.lock()
	p.l.handedOver(r, fs)
	p.mu.Unlock()
	if err == nil {
		return nil
	}
	*req.pb = PooledBuffer{pool: p, blk: b, size: req.size, q: req.q}
	b.Uses = append(b.Uses[:0], uses...)
	_ = p.putBack(req.pb, true)
	return err
}
