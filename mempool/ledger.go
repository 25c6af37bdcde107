package mempool

import (
	"sync/atomic"

	"github.com/clpool/clpool/mempool/internal/policy"
)

// ledger is the pool's counters and the one place that changes them. The
// core calls every method, with p.mu held; the policies count nothing.
type ledger struct {
	s Stats

	inflight int64 // bytes reserved for segments being allocated (see reserve)
	freeing  int64 // bytes of segments out of the accounts, not yet given back
	// cacheCap is the most bytes one queue cache of an arena holds: a
	// cacheShare part of the managed bytes. Written under p.mu, read
	// without it (qcache.go).
	cacheCap    atomic.Int64
	freeBatches int64              // calls of deviceFreed: each ends a batch of frees
	settled     int64              // memory that arrived: segments allocated (segmentAdded), blocks back from the quarantine
	returned    int64              // blocks given back while requests waited on the ladder (Pool.gaveBack)
	segs        map[*segment]int64 // every segment the pool owns, with its ID (for Snapshot)
	lastSeg     int64              // the last ID given
	idle        []*segment         // the segments whose only blocks not free are held (splits.go)
	heldLarge   bool               // blocks of large segments may be held (the quarantine); the caches hold small ones only

	// The blocks in queue caches (qcache.go; all small), and those of
	// them that are inactive splits: held blocks the policy does not see.
	cached, cachedSplit           int
	cachedBytes, cachedSplitBytes int64

	quar quarCounts // the blocks in the sanitizer's quarantine (sanitize.go), held as cached ones are
}

// hit counts a request served by a free block, now active.
func (l *ledger) hit(b *block, size int64) {
	l.s.Hits++
	l.activate(b, size)
}

// request counts a request on queue r (nil: none) and whether a held
// block served it.
func (l *ledger) request(r *qstate, hit bool) {
	if r.id == 0 {
		return
	}
	q := &l.s.Queues[r.id-1]
	q.Requests++
	if hit {
		q.Hits++
	}
}

// handedOver counts a block handed to queue r (id 0: none) after the
// fences fs.
func (l *ledger) handedOver(r *qstate, fs []fenced) {
	if r.id != 0 {
		l.s.Queues[r.id-1].Handovers++
	}
	for _, f := range fs {
		l.s.Queues[f.from.id-1].Markers += f.marked
		switch {
		case f.failed:
		case f.host:
			l.s.Queues[f.from.id-1].HostWaits++
		case f.ready && r.id != 0:
			l.s.Queues[r.id-1].Ready++
		case f.ready:
		case r.id != 0:
			l.s.Queues[r.id-1].Barriers++
		default:
			l.s.Queues[f.from.id-1].HostWaits++
		}
	}
}

// miss counts a request that found no free block.
func (l *ledger) miss() { l.s.Misses++ }

// activate counts a block handed out from the policy for a request of
// size bytes, and notes on it whether it is a split.
func (l *ledger) activate(b *block, size int64) {
	b.Split = b.Seg.Split()
	l.moveOut(b, 1)
	large := !b.Seg.Small
	l.s.Allocation.add(large, 1)
	l.s.AllocatedBytes.add(large, b.Size)
	l.s.RequestedBytes.add(large, size)
	if b.Seg.Oversize {
		l.s.OversizeAllocations.add(1)
	}
}

// deactivate counts a block given back, to the policy or the
// quarantine.
func (l *ledger) deactivate(b *block, size int64) {
	l.moveOut(b, -1)
	large := !b.Seg.Small
	l.s.Allocation.sub(large, 1)
	l.s.AllocatedBytes.sub(large, b.Size)
	l.s.RequestedBytes.sub(large, size)
	if b.Seg.Oversize {
		l.s.OversizeAllocations.sub(1)
	}
}

// reserve counts a segment's bytes as in flight before it is allocated,
// so that concurrent misses cannot pass the limit together; unreserve
// takes the reservation back when the allocation fails, or when the pool
// decides again. Bytes in flight are not managed yet: no statistic shows
// them until segmentAdded.
func (l *ledger) reserve(seg *segment)   { l.inflight += seg.Size }
func (l *ledger) unreserve(seg *segment) { l.inflight -= seg.Size }

// reserved returns the managed bytes, allocations in flight included.
func (l *ledger) reserved() int64 { return l.s.ReservedBytes.current() + l.inflight }

// segmentAdded counts a device allocation, reserved before: its bytes
// are managed now.
func (l *ledger) segmentAdded(seg *segment) {
	l.inflight -= seg.Size
	l.settled++
	l.s.ReservedBytes.add(!seg.Small, seg.Size)
	l.cacheCap.Store(l.s.ReservedBytes.current() / cacheShare)
	if l.segs == nil {
		l.segs = map[*segment]int64{}
	}
	l.lastSeg++
	l.segs[seg] = l.lastSeg
	l.s.DeviceAllocs++
	l.s.Segment.add(!seg.Small, 1)
	if seg.Oversize {
		l.s.OversizeSegments.add(1)
	}
}

// segmentRemoved counts a segment leaving the pool, to be freed.
func (l *ledger) segmentRemoved(seg *segment) {
	l.freeing += seg.Size
	delete(l.segs, seg)
	l.s.Segment.sub(!seg.Small, 1)
	l.s.ReservedBytes.sub(!seg.Small, seg.Size)
	l.cacheCap.Store(l.s.ReservedBytes.current() / cacheShare)
	if seg.Oversize {
		l.s.OversizeSegments.sub(1)
	}
}

// deviceFreed counts buffers given back to the allocator, and those of
// them whose Free failed, once segments of bytes in all are out of the
// pool's hands.
func (l *ledger) deviceFreed(freed, failed int, bytes int64) {
	l.freeing -= bytes
	l.freeBatches++
	l.s.DeviceFrees += int64(freed)
	l.s.FreeErrors += int64(failed)
}

func (l *ledger) reclaimed()  { l.s.Reclaimed++ }
func (l *ledger) oomRetried() { l.s.OOMRetries++ }
func (l *ledger) oomRefused() { l.s.OOMs++ }

func (l *ledger) setHolding(on bool) { l.s.Holding = on }

// sync brings the held blocks and the inactive splits (splits.go) up to
// the policy's free set, c, the queue caches' and the quarantine's. The
// pool calls it after every change of the policy, before it lets go of
// p.mu (flush counts on it).
func (l *ledger) sync(c *policy.Counts) {
	l.s.HeldBlocks = c.FreeBlocks + l.cached + l.quar.blocks
	l.s.HeldBytes = c.FreeBytes + l.cachedBytes + l.quar.bytes
	small, large, smallBytes, largeBytes := l.splits(c)
	l.s.InactiveSplit.set(small, large)
	l.s.InactiveSplitBytes.set(smallBytes, largeBytes)
}

// uncache counts b leaving queue r's cache for the policy.
func (l *ledger) uncache(b *block, r *qstate) {
	l.cached--
	l.cachedBytes -= b.Size
	if b.Split {
		l.cachedSplit--
		l.cachedSplitBytes -= b.Size
		l.moveHeld(b, -1)
	}
	if r.id != 0 {
		l.s.Queues[r.id-1].Cached--
	}
}

// quarantine counts n blocks like b, given back (deactivate), into the
// sanitizer's quarantine (n < 0: out of it, to the policy).
func (l *ledger) quarantine(b *block, n int) {
	l.quar.add(b, n)
	l.moveHeld(b, int32(n))
	if n < 0 {
		l.settled++ // back in the policy: see inFlightLocked
	}
}

// resetPeak sets every peak to its current value, as
// torch.cuda.reset_peak_memory_stats does.
func (l *ledger) resetPeak() {
	for _, gr := range l.s.groups() {
		gr.g.sumAll()
		gr.g.each(func(s *Stat) { s.Peak = s.Current })
	}
	for _, s := range []*Stat{&l.s.OversizeAllocations, &l.s.OversizeSegments} {
		s.Peak = s.Current
	}
}

// resetAccumulated zeroes the totals, as
// torch.cuda.reset_accumulated_memory_stats does.
func (l *ledger) resetAccumulated() {
	for _, gr := range l.s.groups() {
		gr.g.each(func(s *Stat) { s.Allocated, s.Freed = 0, 0 })
	}
	for _, s := range []*Stat{&l.s.OversizeAllocations, &l.s.OversizeSegments} {
		s.Allocated, s.Freed = 0, 0
	}
	s := &l.s
	s.Hits, s.Misses, s.DeviceAllocs, s.DeviceFrees = 0, 0, 0, 0
	s.FreeErrors, s.Reclaimed, s.OOMRetries, s.OOMs = 0, 0, 0, 0
	for i := range s.Queues { // their totals; the blocks cached stay
		q := &s.Queues[i]
		q.Requests, q.Hits, q.Handovers, q.Ready, q.Barriers, q.Markers, q.HostWaits = 0, 0, 0, 0, 0, 0, 0
	}
}
