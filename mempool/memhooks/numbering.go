package memhooks

import (
	"runtime"
	"strings"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/internal/callsite"
	"github.com/clpool/clpool/trace"
)

// This file turns a pool's events into the events of a trace, as
// TraceRecorder writes them and History keeps them.

// traced reports whether e is an event a trace records: a successful
// Allocate (malloc_after) or segment allocation (alloc_after), a block's
// free (free_before) or a segment's (segment_free).
func traced(e mempool.Event) bool {
	switch e.Kind {
	case mempool.MallocAfter, mempool.AllocAfter:
		return e.Err == nil
	case mempool.FreeBefore, mempool.SegmentFree:
		return true
	}
	return false
}

// numbering numbers what a trace names: blocks and segments 1, 2, ...
// apart, in the order they are handed out, and queues 1, 2, ... in the
// order of their first use. It is not safe for concurrent use.
type numbering struct {
	ids     map[uint64]int64 // live block ID -> trace id
	lastID  int64            // the last block id given
	segs    map[any]int64    // a live segment's *cl.Buffer or *cl.SVM -> its trace id
	lastSeg int64            // the last segment id given
	queueNo map[*cl.CommandQueue]int
	queues  []*cl.CommandQueue // queue n is queues[n-1]
}

func newNumbering() numbering {
	return numbering{ids: map[uint64]int64{}, segs: map[any]int64{}, queueNo: map[*cl.CommandQueue]int{}}
}

// event returns e, a traced event, as a trace event with site and
// without a time; ok is false for an event the trace leaves out: the
// free of a block or segment handed out before the numbering began, and
// a segment an allocator hands out nothing to know by.
func (n *numbering) event(e mempool.Event, site string) (ev trace.Event, ok bool) {
	ev.Site = site
	switch e.Kind {
	case mempool.MallocAfter:
		n.lastID++
		n.ids[e.BlockID] = n.lastID
		ev.Op, ev.ID, ev.Size, ev.Queue = trace.Alloc, n.lastID, e.Size, n.queue(e.Queue)
	case mempool.FreeBefore:
		id, ok := n.ids[e.BlockID]
		if !ok {
			return ev, false
		}
		delete(n.ids, e.BlockID)
		ev.Op, ev.ID, ev.Queue = trace.Free, id, n.queue(e.Queue)
	case mempool.AllocAfter:
		key := segmentKey(e)
		if key == nil {
			return ev, false
		}
		n.lastSeg++
		n.segs[key] = n.lastSeg
		ev.Op, ev.ID, ev.Size, ev.Queue = trace.SegmentAlloc, n.lastSeg, e.AllocSize, n.queue(e.Queue)
	case mempool.SegmentFree:
		key := segmentKey(e)
		id, ok := n.segs[key]
		if key == nil || !ok {
			return ev, false
		}
		delete(n.segs, key)
		ev.Op, ev.ID, ev.Size = trace.SegmentFree, id, e.AllocSize
	default:
		return ev, false
	}
	return ev, true
}

// queue returns q's number, numbering it if it is new; 0 for nil.
func (n *numbering) queue(q *cl.CommandQueue) int {
	if q == nil {
		return 0
	}
	no, ok := n.queueNo[q]
	if !ok {
		n.queues = append(n.queues, q)
		no = len(n.queues)
		n.queueNo[q] = no
	}
	return no
}

// segmentKey returns what a segment's alloc_after and segment_free
// events name it by: its buffer, or its SVM allocation; nil if neither.
func segmentKey(e mempool.Event) any {
	switch {
	case e.Buffer != nil:
		return e.Buffer
	case e.SVM != nil:
		return e.SVM
	}
	return nil
}

// lookupSite is callerSite; tests count the lookups through it.
var lookupSite = callerSite

// siteOf returns the site of a hook's event, depth frames of it (see
// WithSites, WithStacks); "" with no lookup for a depth of 0.
func siteOf(depth int) string {
	if depth <= 0 {
		return ""
	}
	return lookupSite(depth)
}

// callerSite returns the site of a hook's event, called from the hook's
// Handle: up to depth frames of the stack outside clpool, innermost
// first, joined by " < "; "" if there is none (the collector's reclaim).
// Its cost, about a microsecond, is why sites are asked for.
func callerSite(depth int) string {
	pcs := make([]uintptr, 64)
	pcs = pcs[:runtime.Callers(3, pcs)] // from Handle's caller
	if depth == 1 {
		return callsite.First(pcs)
	}
	frames := callsite.Frames(pcs)
	parts := make([]string, 0, min(len(frames), depth))
	for _, f := range frames[:min(len(frames), depth)] {
		parts = append(parts, f.String())
	}
	return strings.Join(parts, " < ")
}
