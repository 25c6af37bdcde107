package mempool

import (
	"math"
	"runtime"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool/internal/policy"
)

// This file is the pool's core: the state that changes, under the pool's
// mutex, and the decisions made on it. The core never calls the
// allocator or a hook: it decides, and returns what the pool is to do
// outside the lock (a decision, or segments to free). allocate.go and
// release.go carry its decisions out. Its one OpenCL call is the release
// of stale sub-buffers, which must happen under the lock (releaseStale).

// core is the state the pool's mutex protects. Every method of core is
// called with p.mu held, and returns with it held.
type core struct {
	queues   []*qstate                    // every queue allocated for, by id-1; nil once forgotten (forgetReleased)
	queueOf  map[*cl.CommandQueue]*qstate // the states of queues[], by queue
	forgetAt int                          // how many states there are when forgetReleased runs next
	pol      placement                    // where blocks go
	slab     []PooledBuffer               // handed out one by one without drop safety (see handOut)
	life     lifecycle                    // lifeOpen, then lifeStopped, lifeClosed
	limit    int64                        // 0: no limit
	l        ledger
	stale    []mem               // releaseStale's scratch list, empty between calls
	arenas   *policy.Arenas[mem] // pol, if an arena: the hit path asks it for stale sub-buffers directly

	// Set at New, never changed: read without the lock too.
	maxAlloc  int64 // the device's largest buffer; 0 if unknown
	align     int64 // the arena's block unit; 0 with exact bins
	hostOwned bool  // a pool over pinned host memory: the host takes every block handed out (see handover)

	frozenLate int64 // frozen's waits that frozenWait ended (snapshot.go), under p.mu; last: it moves no field the hot paths read
}

// lifecycle is a pool's stage: each Pool method that moves it moves it
// forward only.
type lifecycle uint8

const (
	lifeOpen    lifecycle = iota // holds given-back blocks for reuse
	lifeStopped                  // StopHolding: frees segments once wholly free
	lifeClosed                   // Close: refuses Allocate, and holds nothing
)

// decision is what the core decided for a request, for the pool to carry
// out outside its lock: free what it gave up, then exactly one of a hit
// (b, its uses fenced first), a segment to allocate (after a drain of the
// queue caches, if drain says so), an error, or, none of them, a refusal
// by the limit.
type decision struct {
	b     *block       // a free block, handed out for the request
	uses  []policy.Use // the commands b waits for first
	seg   *segment     // a segment reserved for the request, to allocate
	drain bool         // drain the queue caches first: if blocks moved, decide again
	never bool         // no limit could ever serve the request: it fails (after the drain, if drain)
	err   error        // the request fails
	free  []*segment   // segments out of the pool's accounts, to free
}

// decide is the ladder's step under the lock for req: a free block that
// fits, else a segment of the ladder's size reserved under the limit (and,
// at the first miss, a drain of the queue caches before it is allocated:
// blocks waiting there may serve the request, or, given back to an arena,
// merge into a block that does).
func (c *core) decide(req *request, lad *ladder) (d decision) {
	if lad.pending != nil { // reserved before a drain that moved blocks
		c.l.unreserve(lad.pending)
		lad.pending = nil
	}
	if c.life == lifeClosed {
		return decision{err: ErrPoolClosed}
	}
	b := c.pol.GetOn(req.need(), req.q.id)
	if b == nil && lad.pressed {
		b = c.pol.GetAnyOn(req.need(), req.q.id)
	}
	if b != nil {
		return c.serveBlock(req, b)
	}
	if lad.seg == nil {
		// The first miss: free what the policy gives up before it
		// grows. It counts as a miss unless a drain brings a block that
		// serves it.
		lad.seg, lad.own = c.newSegment(req.need()), c.ownSegment(req.need())
		if lad.own.Size >= lad.seg.Size {
			lad.own = lad.seg
		}
		if c.limit > 0 && lad.own.Size > c.limit {
			// No segment fits under the limit: the blocks waiting in
			// the queue caches or the quarantine may serve the request
			// (drain, then decide again), else any free block that fits.
			c.l.sync(c.pol.Counts()) // GetOn may have merged blocks
			c.releaseStale()
			if req.mayDrain || req.drainQ {
				return decision{never: true, drain: true}
			}
			lad.pressed = true
			if b = c.pol.GetAnyOn(req.need(), req.q.id); b != nil {
				return c.serveBlock(req, b)
			}
			c.releaseStale() // GetAnyOn may have merged blocks too
			c.countMiss(req)
			return decision{never: true}
		}
		d.free = c.pol.BeforeGrow(req.need())
		d.drain = req.mayDrain
	}
	if !d.drain {
		c.countMiss(req)
	}
	c.forget(d.free...) // first: the room counts the segments freed
	if lad.final {
		// The ladder's last rung: every wholly free segment goes in this
		// hold of the lock, so that the room it makes is this request's.
		need := lad.try().Size
		d.free = c.takeFree(d.free, func() bool {
			room := c.room(d.free)
			return lad.cause != nil || room >= 0 && room < need
		})
		c.forget()
	}
	d.seg = c.reserve(lad.try(), lad.own.Size, d.free)
	lad.freesSeen, lad.settledSeen, lad.limitSeen = c.l.freeBatches, c.l.settled, c.limit
	if d.drain {
		lad.pending = d.seg
	}
	return d
}

// serveBlock hands b, taken from the policy, out for req.
func (c *core) serveBlock(req *request, b *block) decision {
	if req.counted { // a miss, served after the ladder freed or collected
		c.l.activate(b, req.size)
	} else {
		req.counted = true
		c.l.request(req.q, true)
		c.l.hit(b, req.size)
	}
	c.l.sync(c.pol.Counts())
	if c.arenas != nil && c.arenas.HasStale() { // the hit's split or merges dropped sub-buffers
		c.releaseStale()
	}
	req.pb = c.handOut(req.pb)
	c.note(b, req)
	return decision{b: b, uses: handover(b, req.q, c.hostOwned)}
}

// reserve counts seg's bytes as managed before they are allocated, so
// that concurrent misses cannot pass the limit together, and returns it;
// nil if the limit refuses it, or, with no limit, if the managed bytes
// would pass math.MaxInt64 (an allocator that names no device may hand
// out that much). An arena's segment too large for the room the limit
// leaves shrinks to the room, if need (the request's own block) still
// fits (a limit's room is within math.MaxInt64 too). freed are the
// segments the decision gives up, which the pool frees before it
// allocates seg.
func (c *core) reserve(seg *segment, need int64, freed []*segment) *segment {
	room := c.room(freed)
	if room < 0 && seg.Size > math.MaxInt64-c.l.reserved() {
		return nil // the pool's sums cannot count it
	}
	if room >= 0 && seg.Size > room {
		fit := room
		if c.align > 0 {
			fit &^= c.align - 1
		}
		if c.align == 0 || seg.Oversize || seg.Exact || fit < need {
			return nil
		}
		seg = &segment{Size: fit, Small: seg.Small}
	}
	c.l.reserve(seg)
	return seg
}

// countMiss counts req as a request no free block served, once.
func (c *core) countMiss(req *request) {
	if !req.counted {
		req.counted = true
		c.l.miss()
		c.l.request(req.q, false)
	}
}

// room returns the bytes the limit leaves for a new segment; -1 if there
// is no limit. Segments being given back count until they are: they are
// still on the device, and a new segment beside them would take the
// pool's device memory past the limit for a while (a reviewer's four
// goroutines under a 6 MiB limit, with FreeHeld, reached 6.3 MiB). Those
// of freed do not: the decision that gives them up frees them before it
// allocates (see Pool.serve).
func (c *core) room(freed []*segment) int64 {
	if c.limit == 0 {
		return -1
	}
	freeing := c.l.freeing
	for _, s := range freed {
		freeing -= s.Size
	}
	return max(c.limit-c.l.reserved()-freeing, 0)
}

// newSegment returns the segment, not yet allocated, that a miss of size
// makes: the policy's, or one of exactly size bytes where only that fits
// the device's largest buffer.
func (c *core) newSegment(size int64) *segment {
	seg := c.pol.NewSegment(size)
	c.fitDevice(seg, size)
	return seg
}

// ownSegment returns the smallest segment that serves a request of size:
// its block's own size (RMM's growth by the request), the ladder's last rung.
func (c *core) ownSegment(size int64) *segment {
	seg := c.pol.NewSegment(size)
	seg.Size = c.pol.BlockSize(size)
	c.fitDevice(seg, size)
	return seg
}

// fitDevice makes seg, for a request of size, a block of exactly size
// bytes where seg passes the device's largest buffer and size does not.
func (c *core) fitDevice(seg *segment, size int64) {
	if c.maxAlloc > 0 && seg.Size > c.maxAlloc && size <= c.maxAlloc {
		seg.Size, seg.Exact, seg.Oversize = max(size, 1), true, false
	}
}

// blockSize returns the bytes of the block a request of size gets.
func (c *core) blockSize(size int64) int64 {
	n := c.pol.BlockSize(size)
	if c.maxAlloc > 0 && n > c.maxAlloc && size <= c.maxAlloc {
		return max(size, 1)
	}
	return n
}

// commit adds seg, now allocated, to the pool and hands out req's block,
// cut from it.
func (c *core) commit(req *request, seg *segment) *block {
	c.countMiss(req)
	c.l.segmentAdded(seg)
	b := c.pol.Add(seg, req.need())
	c.l.activate(b, req.size)
	c.l.sync(c.pol.Counts())
	req.pb = c.handOut(req.pb)
	c.note(b, req)
	return b
}

// handOut readies pb, from newPooledBuffer, to be handed out. With drop
// safety, it sets pb's finalizer. It does so under p.mu on purpose: the
// runtime keeps finalizer records under one global lock of its own, which
// costs far more when goroutines contend for it than when p.mu lines them
// up (give clears the finalizer under p.mu too; see BENCHMARKS.md).
//
// Without drop safety, it returns a PooledBuffer from the pool's slab, so
// that Allocate allocates once per slabSize requests. Each one is handed
// out once, never reused: a stale pointer still sees its own Close. A slab
// stays in memory while any of its PooledBuffers is reachable (1 KiB).
func (c *core) handOut(pb *PooledBuffer) *PooledBuffer {
	if pb != nil {
		runtime.SetFinalizer(pb, (*PooledBuffer).reclaim)
		return pb
	}
	if len(c.slab) == 0 {
		c.slab = make([]PooledBuffer, slabSize)
	}
	pb = &c.slab[0]
	c.slab = c.slab[1:]
	return pb
}

// note notes, on block b handed out for req, what a snapshot shows of it.
func (c *core) note(b *block, req *request) {
	noteBlock(b, req.size, req.q, req.pb)
}

// takeBack takes back block b, given back for a request of size on queue r;
// with record, it records the queues that may still use it. It returns
// the segments to free, out of the pool's accounts: b's, if the policy
// gives it up, and every wholly free one after StopHolding.
func (c *core) takeBack(b *block, size int64, r *qstate, record bool) []*segment {
	c.l.deactivate(b, size)
	return c.putFree(nil, b, r, record)
}

// putFree gives block b, no longer counted active, to the policy (with
// record, recording the queues that may still use it, as takeBack does),
// and appends to gone the segments to free. The sanitizer's quarantine
// (sanitize.go) gives its blocks back through it.
func (c *core) putFree(gone []*segment, b *block, r *qstate, record bool) []*segment {
	if record {
		c.recordUses(b, r)
	}
	if s := c.pol.Put(b); s != nil {
		c.l.segmentRemoved(s)
		gone = append(gone, s)
	}
	if c.life != lifeOpen { // stopped holding: free what is wholly free
		gone = c.takeFree(gone, func() bool { return true })
	}
	return gone
}

// takeFree appends to segs the wholly free segments, largest first, while
// more() says so, taking each out of the pool's accounts at once (more
// may read them).
func (c *core) takeFree(segs []*segment, more func() bool) []*segment {
	for more() {
		s := c.pol.TakeLargest()
		if s == nil {
			break
		}
		c.l.segmentRemoved(s)
		segs = append(segs, s)
	}
	return segs
}

// forget takes segments the policy gave up (nil ones are skipped) out of
// the pool's accounts (the pool frees them), brings the held counts up to
// date, and releases the sub-buffers that went stale meanwhile.
func (c *core) forget(segs ...*segment) {
	for _, s := range segs {
		if s != nil {
			c.l.segmentRemoved(s)
		}
	}
	c.l.sync(c.pol.Counts())
	c.releaseStale()
}

// recordUses records, on a block given back, that its queue r and the
// queues RecordQueue added (with no count yet) may still use it, each
// with its count of markers now, but those the pool forgot (released).
func (c *core) recordUses(b *block, r *qstate) {
	kept := b.Uses[:0]
	for _, u := range b.Uses {
		if qs := c.queues[u.Queue-1]; qs != nil {
			u.Seq = qs.seq.Load()
			kept = append(kept, u)
		}
	}
	if b.Uses = kept; r.id != 0 && !r.c.gone {
		b.Uses = append(b.Uses, policy.Use{Queue: r.id, Seq: r.seq.Load()})
	}
}

// init readies the core of a new pool with config c: a policy of blocks
// aligned to align (arena), on a device whose largest buffer is maxAlloc
// (0: unknown), under limit (0: none); park says whether the arena parks
// the sub-buffers of ranges that change (policy.Arena.SetParking).
func (k *core) init(c config, align, maxAlloc, limit int64, park bool) {
	k.limit, k.maxAlloc = limit, maxAlloc
	k.queueOf, k.forgetAt = map[*cl.CommandQueue]*qstate{}, forgetMin
	k.l.s = Stats{Policy: "bins", LeadingBits: c.leadingBits, MaxSplitSize: c.maxSplit, Limit: limit, Holding: true}
	if c.arena {
		k.align = align
		a := policy.NewArenas[mem](align, c.leadingBits, c.maxSplit, policy.DefaultPreferredSegment)
		a.SetParking(park)
		k.pol, k.arenas = a, a
		k.l.s.Policy = "arena"
	} else {
		k.pol = policy.NewBins[mem](c.leadingBits)
	}
}

// newQstate returns the state of queue q, of id id; q nil and id 0 for
// the pool's host, which stands for no queue. With splits (an arena's
// pool), its cache lists the moves of split blocks (splitMoves); a pool
// of exact bins has none, and its caches stay small.
func newQstate(q *cl.CommandQueue, id int32, splits bool) *qstate {
	qs := &qstate{q: q, id: id}
	if splits {
		qs.c.d.moves = new(splitMoves)
	}
	if q != nil {
		qs.ooo = q.Properties()&cl.QueueOutOfOrder != 0
	}
	// The cache's array has its full size at once: 128 bytes, a size
	// class whose objects fill two cache lines of their own, so that no
	// other queue's cache writes its lines (a small array grown by append
	// can share a line with another queue's).
	qs.c.blocks = make([]cachedBlock, 0, cacheBlocks)
	return qs
}

// orNil returns qs, or nil for the pool's host (no queue): order's argument.
func (qs *qstate) orNil() *qstate {
	if qs.id == 0 {
		return nil
	}
	return qs
}
