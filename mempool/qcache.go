package mempool

import (
	"errors"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/clpool/clpool/mempool/internal/policy"
)

// This file is each queue's own cache, so that goroutines allocating on
// different queues do not contend for the pool's lock. A small block
// given back on an in-order queue waits in that queue's cache; a request
// on the queue for a block of exactly its size takes it back under the
// queue's lock alone: reuse on one in-order queue needs no ordering, and
// the block's sub-buffer stays with it.
//
// The ledger still sees every operation, in order: the cache sums what
// it did in turns (qflush.go) and brings them into the ledger under p.mu
// every flushOps operations, before any operation of the queue that
// takes p.mu, and before Stats, with the turns of every other cache not
// in use at that moment, in the order they were made: one goroutine's
// operations on several queues count in its order, peaks included. Only
// the turns of a cache in use by another goroutine at that moment (whose
// operations run concurrently, in no order) come in later. Blocks in a
// cache count as held: inactive splits if a block of their segment is in
// use, which the ledger learns at the flush too (splits.go). A request the pool
// cannot serve from what the policy holds first drains every cache back
// into the policy, and so do FreeHeld and the out-of-memory ladder, so
// cached memory is reused across queues and freed like any held block.
//
// The cache works where a hit costs nothing else: no hook, the pool
// holding, no sanitizer, not over pinned memory. With drop safety, a hit sets
// its buffer's finalizer and a Close clears it under the cache's lock,
// which lines up the finalizers of the queue's goroutines as p.mu does
// on the pool's own path (see core.handOut).
//
// Lock order: a queue's c.mu, then p.mu; never the other way, but for a
// try that does not wait (flushCaches). A request on no queue uses
// p.host's cache, as a queue's.

// States of the queue caches, in Pool.cacheState: one word, moved
// forward only.
const (
	cachesOn       = iota // caches take blocks
	cachesStopping        // they take no more; those they hold are being drained
	cachesGone            // off for good, and empty: nothing to lock or flush
)

// stopCaching makes the caches take no more blocks (unless they are gone
// already).
func (p *Pool) stopCaching() { p.cacheState.CompareAndSwap(cachesOn, cachesStopping) }

// Limits of a queue's cache.
const (
	cacheBlocks   = 16                  // blocks a queue's cache holds
	cacheMaxBlock = policy.SmallRequest // the largest block it holds
	flushOps      = 128                 // operations summed before they go to the ledger
	maxTurns      = 8                   // turns summed before they go to the ledger (qflush.go)
	lockTries     = 64                  // tries of every cache's lock under p.mu before lockCaches waits for them
	cacheShare    = 128                 // an arena's queue cache holds at most 1/cacheShare of the managed bytes
	bigSegment    = 8                   // and, apart, blocks that cover segments of at least 1/bigSegment of them,
	bigShare      = 2                   // up to 1/bigShare of them
	// smallArena: in an arena managing fewer bytes, a miss of a queue first
	// gives its cache's stale blocks back to the policy (givesBack), as each
	// block waiting splits the free space of a pool of a few segments. A block
	// is stale once its cache was asked more than staleRequests requests since
	// it came in: a queue asking for up to staleRequests+1 sizes in turn keeps
	// hitting (BENCHMARKS.md, session 37, has the rules measured).
	smallArena    = 4 << 20
	staleRequests = 4
)

// qcache is a queue's cache. The padding keeps its lock and fields off the
// cache lines of other queues', which other cores write.
type qcache struct {
	_      [64]byte
	mu     sync.Mutex              // protects the fields below
	blocks []cachedBlock           // given back on the queue, newest last
	slab   *[slabSize]PooledBuffer // handed out from slab[used:], each once
	used   int
	bytes  int64 // the sizes of the blocks, but the big ones
	big    int64 // the sizes of the big ones (see cachedBlock)

	lastSize, lastN int64  // the last request's size and its block size
	requests        uint32 // the requests it was asked, hits and misses (see giveBackStaleLocked)
	d               qdelta // operations not yet in the ledger
	gone            bool   // the pool forgot the queue (forgetReleased): no block comes in again; set under p.mu too

	// ever is set at the first block put here, and never cleared:
	// flushCaches tries the locks of those caches only. frozen is set
	// by lockCaches's blocking phase once it holds mu, and cleared under
	// p.mu when it lets go (releaseCaches); waiting, while a queue's
	// operation holds mu and waits for p.mu (lockUnder). See frozen.
	ever, frozen, waiting atomic.Bool
	_                     [64]byte
}

// cachedBlock is a block in an arena's queue cache. It is big if it
// covers a segment of at least 1/bigSegment of the managed bytes when it
// went in: big blocks count against a share of their own (1/bigShare),
// not the cache's (1/cacheShare). Waiting, such a block keeps no free
// neighbour from merging, and a pool of a few such segments, each one
// array (a CG solver's), would otherwise miss on every request.
type cachedBlock struct {
	*block
	big   bool
	stamp uint32 // the cache's requests when it came in (see giveBackStaleLocked)
}

// cacheSet is a set of a cache's blocks by index: bit i, index i (a bit
// for each: the next line fails to compile if not).
type cacheSet uint32

var _ [32 - cacheBlocks]struct{}

// sum returns the bytes of the cache's big blocks (big), or of the
// others.
func (c *qcache) sum(big bool) int64 {
	if big {
		return c.big
	}
	return c.bytes
}

// count adds n bytes to the sum of cb's kind (see sum).
func (c *qcache) count(cb cachedBlock, n int64) {
	if cb.big {
		c.big += n
	} else {
		c.bytes += n
	}
}

// allocateCached serves a request of size on r from r's cache, or
// returns nil. pb is newPooledBuffer's: with drop safety, the buffer to
// hand out, whose finalizer it sets under the cache's lock (which lines
// up the finalizers of one queue's goroutines, as p.mu does elsewhere:
// see core.handOut); without, nil, and the cache carves one from its
// slab. The caller checked that hooks are off.
//
// On a miss under the cache's lock it returns locked true and leaves the
// lock held, for the pool's path to take p.mu under it (lockFlushed) and
// let it go: a miss then takes the cache's lock once, not twice.
func (p *Pool) allocateCached(size int64, r *qstate, pb *PooledBuffer) (got *PooledBuffer, locked bool) {
	if p.cacheState.Load() != cachesOn || r.ooo {
		return nil, false // checked again under the lock; this spares pools without caches the lock
	}
	if size > cacheMaxBlock {
		return nil, false // its block is larger still
	}
	c := &r.c
	c.mu.Lock()
	if p.cacheState.Load() != cachesOn {
		c.mu.Unlock()
		return nil, false
	}
	c.requests++ // see giveBackStaleLocked
	// A queue asks for the same sizes over and over: the last one's
	// block size is kept.
	n := c.lastN
	if size != c.lastSize || n == 0 { // 0: none yet
		n = p.blockSizeOf(size)
		c.lastSize, c.lastN = size, n
	}
	if n > cacheMaxBlock {
		return nil, true
	}
	i := len(c.blocks) - 1
	for i >= 0 && c.blocks[i].Size != n {
		i--
	}
	if i < 0 {
		return nil, true
	}
	cb := c.blocks[i]
	b := cb.block
	last := len(c.blocks) - 1
	if i < last {
		copy(c.blocks[i:], c.blocks[i+1:])
	}
	c.blocks[last] = cachedBlock{} // no stale pointer past the end
	c.blocks = c.blocks[:last]     // b.Uses is empty: see putCached
	c.count(cb, -cb.Size)
	if pb != nil {
		runtime.SetFinalizer(pb, (*PooledBuffer).reclaim)
	} else {
		if c.slab == nil || c.used == slabSize {
			c.slab, c.used = new([slabSize]PooledBuffer), 0
		}
		pb = &c.slab[c.used]
		c.used++
	}
	*pb = PooledBuffer{pool: p, blk: b, size: size, q: r}
	b.Requested, b.Owner = size, uint64(uintptr(unsafe.Pointer(pb))) // b.Queue is r already
	if c.d.due(&p.clock) {
		p.beginTurn(r)
	}
	c.d.hit(b, size)
	if b.Split && !c.d.moves.trip(b.Seg, -b.Size) {
		c.d.moves.list(b.Seg, -b.Size)
	}
	p.flushIfDue(r)
	c.mu.Unlock()
	return pb, false
}

// putCached gives pb's block, of a request of size, back into the
// cache of pb's queue, and reports whether it did; with drop safety, it
// clears pb's finalizer. The caller holds the cache's lock, marked pb
// closed and checked that hooks are off.
func (p *Pool) putCached(pb *PooledBuffer, size int64) bool {
	r, b := pb.q, pb.blk
	c := &r.c
	if p.cacheState.Load() != cachesOn || r.ooo || c.gone || !b.Seg.Small || b.Size > cacheMaxBlock || b.Seg.Oversize || b.Seg.Exact ||
		len(b.Uses) != 0 || p.hooks.Load() != nil {
		return false // len(b.Uses): RecordQueue adds to it under c.mu
	}
	cb := cachedBlock{block: b, stamp: c.requests}
	if !p.arena {
		if len(c.blocks) == cacheBlocks {
			return false
		}
	} else {
		// An arena's cache keeps recent sizes, and at most a share of
		// what the pool manages: blocks of sizes no longer asked for
		// would stay unmerged until a miss, and make the pool grow
		// (BENCHMARKS.md, arena v2). The oldest go back to the pool.
		// Big blocks count apart (see cachedBlock).
		limit := p.l.cacheCap.Load()
		cb.big = !b.Split && b.Size >= limit*(cacheShare/bigSegment) // not split: whole
		if cb.big {
			limit *= cacheShare / bigShare
		}
		if b.Size > limit {
			return false
		}
		if share := c.sum(cb.big) + b.Size; len(c.blocks) == cacheBlocks || share > limit {
			p.makeRoom(r, cb.big, share, limit)
		}
	}
	if p.dropSafety {
		runtime.SetFinalizer(pb, nil)
	}
	// b.Uses stays empty while b waits: only r may still use it, and r
	// reuses it in order. drainCaches records r's use when b leaves.
	if !c.ever.Load() {
		c.ever.Store(true)
	}
	c.blocks = append(c.blocks, cb)
	c.count(cb, b.Size)
	if c.d.due(&p.clock) {
		p.beginTurn(r)
	}
	c.d.put(b, size)
	if b.Split && !c.d.moves.trip(b.Seg, b.Size) {
		c.d.moves.list(b.Seg, b.Size)
	}
	p.flushIfDue(r)
	return true
}

// makeRoom evicts the oldest blocks of r's cache, for a block of kind
// big to come in: of any kind while the cache is full, then of that kind
// while share, the bytes of that kind with the new block, is over limit
// (the new block is at most limit: evicting every block of its kind
// would do, so the loop ends). It is apart from putCached so that a put
// that evicts nothing pays no more than a comparison. r.c.mu must be held.
func (p *Pool) makeRoom(r *qstate, big bool, share, limit int64) {
	c := &r.c
	var evict cacheSet
	k := 0
	for i := 0; i < len(c.blocks) && (len(c.blocks)-k == cacheBlocks || share > limit); i++ {
		if old := c.blocks[i]; old.big == big {
			share -= old.Size
		} else if len(c.blocks)-k < cacheBlocks {
			continue // not the kind over its share
		}
		evict |= 1 << i
		k++
	}
	if k > 0 {
		p.evict(r, evict)
	}
}

// drainCaches gives every block in a queue's cache (and the sanitizer's
// quarantine) back to the policy, and frees the segments the policy gives
// up at once. It reports whether any block moved; drain also returns the
// allocator's errors of those frees (a pool that no longer holds frees
// each segment that becomes wholly free).
func (p *Pool) drainCaches() (moved bool) {
	moved, _ = p.drain()
	return moved
}

// drain is drainCaches, with the allocator's errors.
func (p *Pool) drain() (moved bool, err error) { return p.drainOf(nil) }

// drainOf is drain, taking only only's blocks out of the quarantine if
// only is not nil (every queue cache is drained).
func (p *Pool) drainOf(only *qstate) (moved bool, err error) {
	moved, err = p.drainQuarantine(only) // the sanitizer's (its pools have no caches)
	if p.cacheState.Load() == cachesGone {
		return moved, err // caching is off for good and the caches are empty: nothing to lock
	}
	if !p.anyCached() {
		return moved, err // no p.mu: a miss takes it at most twice (TestMissTakesThePoolsLockAtMostTwice)
	}
	// Every cache's lock at once (lockCaches), its sums in, in turn: a
	// cache emptied alone would bring its turns in before a busy one's
	// older ones (review s41g: FreeHeld split one goroutine's turns).
	qs := p.lockCaches()
	var gone []*segment
	for _, q := range qs {
		moved = moved || len(q.c.blocks) > 0
		gone = append(gone, p.emptyCacheLocked(q)...)
	}
	p.unlockCaches(qs)
	return moved, errors.Join(err, p.freeSegments(gone))
}

// emptyCacheLocked gives every block of qs's cache back to the policy,
// as uncacheIfLocked. p.mu must be held, and qs.c.mu, with qs's sums
// flushed (lockCaches).
func (p *Pool) emptyCacheLocked(qs *qstate) (gone []*segment) {
	return p.uncacheIfLocked(qs, 1<<len(qs.c.blocks)-1)
}

// giveBackStaleLocked gives the policy the blocks of qs's cache that
// came in more than staleRequests requests ago (see smallArena), as
// uncacheIfLocked. p.mu must be held, and qs.c.mu, with qs's sums flushed.
func (p *Pool) giveBackStaleLocked(qs *qstate) (gone []*segment) {
	var stale cacheSet
	for i, cb := range qs.c.blocks {
		if qs.c.requests-cb.stamp > staleRequests { // unsigned: right across a wrap
			stale |= 1 << i
		}
	}
	return p.uncacheIfLocked(qs, stale)
}

// uncacheIfLocked gives the policy the blocks of qs's cache in drop,
// keeping the others in their order, and returns the segments the policy
// gave up, out of the pool's accounts (none today: see uncacheLocked),
// for the caller to free once it lets go of the locks. p.mu must be held,
// and qs.c.mu, with qs's sums flushed.
func (p *Pool) uncacheIfLocked(qs *qstate, drop cacheSet) (gone []*segment) {
	if drop == 0 {
		return nil
	}
	c := &qs.c
	first := bits.TrailingZeros32(uint32(drop)) // the blocks before it stay where they are
	kept := c.blocks[:first]
	for i := first; i < len(c.blocks); i++ {
		cb := c.blocks[i]
		if drop&(1<<i) == 0 {
			kept = append(kept, cb)
			continue
		}
		c.count(cb, -cb.Size) // before the policy merges it
		gone = p.uncacheLocked(gone, qs, cb.block)
	}
	clear(c.blocks[len(kept):]) // no stale pointer past the end
	c.blocks = kept
	p.forget(gone...)
	return gone
}

// uncacheLocked gives b, taken out of qs's cache, back to the policy,
// and appends to gone the segment the policy gives up, if any (none
// today: cached blocks are never exact-size). b records qs's use now, not
// at its Close: a marker started after now follows the Close too, so
// ordering stays right, at the price, at most, of a newer marker (none
// for a queue the pool forgets: it finished). p.mu must be held, and
// qs.c.mu, with qs's sums flushed.
func (p *Pool) uncacheLocked(gone []*segment, qs *qstate, b *block) []*segment {
	if qs.id != 0 && !qs.c.gone {
		b.Uses = append(b.Uses, policy.Use{Queue: qs.id, Seq: qs.seq.Load()})
	}
	p.l.uncache(b, qs)
	if s := p.pol.Put(b); s != nil {
		gone = append(gone, s)
	}
	return gone
}

// evict gives the blocks of r's cache at the indices in at (one at
// least) back to the pool, in one hold of p.mu. r.c.mu must be held.
func (p *Pool) evict(r *qstate, at cacheSet) {
	p.lockUnder(r)
	p.flushCaches(r)
	gone := p.uncacheIfLocked(r, at)
	p.mu.Unlock()
	_ = p.freeSegments(gone)
}
