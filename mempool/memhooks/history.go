package memhooks

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/trace"
)

// History keeps a pool's last n events in a ring, as
// torch.cuda.memory._record_memory_history(max_entries=n) does, so that a
// program can look back at what led up to a moment (an out-of-memory
// error, a snapshot) at little cost while it runs.
//
// It records what TraceRecorder records, numbered the same way: a
// successful Allocate as an Alloc of the bytes asked for, and the free of
// a block it saw handed out (Close, or the collector's reclaim) as a
// Free; the pool's segments as SegmentAlloc and SegmentFree, numbered
// apart; each with its time since the History was made and its queue,
// numbered 1, 2, ... in the order of their first use (Queues says which
// is which; 0 for none). Frees of blocks and segments handed out before
// the History was registered are not recorded. With WithSites (or
// WithStacks) each event has its site too, where in the program it was
// asked for, as TraceRecorder's; without, no event pays for one.
//
// Each event costs O(1) and, once the ring is full, a block's event
// allocates nothing without sites; the History's memory is the ring of n
// entries, grown as it fills, the ids of the blocks and segments live now
// (with their sites, with WithSites), and the allocation events of the
// segments live at the ring's start that have left it. It is safe for
// concurrent use.
//
// A pool's Snapshot includes its events (History), with their queues
// numbered as the snapshot's blocks are, and, with sites, names the site
// of each active block the History saw allocated (Site).
type History struct {
	start time.Time // for the events' times; it holds a monotonic reading
	size  int       // the ring's capacity, n
	depth int       // the frames of a site; 0: no sites

	mu    sync.Mutex // protects the fields below
	ring  []HistoryEntry
	next  int               // where the next entry goes, once the ring is full
	num   numbering         // the blocks', segments' and queues' numbers
	sites map[uint64]string // live block ID -> its allocation's site; nil without sites

	// lostSegs holds the SegmentAlloc events the ring has overwritten of
	// the segments live at its oldest entry: those not freed yet, and
	// those whose SegmentFree is still in the ring. WriteTrace writes
	// them at the trace's start.
	lostSegs map[int64]trace.Event
}

// HistoryEntry is one event of a History: the trace event, and the size
// of the block the pool used for it, which can be larger than the bytes
// asked for (trace.Event's Size); a segment's size for a segment's event.
type HistoryEntry struct {
	trace.Event
	AllocSize int64 `json:"alloc_size"`
}

// NewHistory returns a History of the last n events. Register it with
// pool.AddHook. Of the options, WithSites and WithStacks give each event
// its site; WithFlushEvery means nothing to a History. It panics if n is
// less than 1, or on a nil option.
func NewHistory(n int, opts ...TraceOption) *History {
	if n < 1 {
		panic(fmt.Sprintf("memhooks: NewHistory: n is %d, want at least 1", n))
	}
	var c traceConfig
	applyOptions("NewHistory", &c, opts)
	h := &History{start: time.Now(), size: n, depth: c.depth, num: newNumbering(), lostSegs: map[int64]trace.Event{}}
	if c.depth > 0 {
		h.sites = map[uint64]string{}
	}
	return h
}

// Handle records successful Allocates and the frees of their blocks, and
// the segments the pool allocates and frees.
func (h *History) Handle(e mempool.Event) {
	if !traced(e) {
		return
	}
	site := siteOf(h.depth) // outside the lock: it is the slow part
	h.mu.Lock()
	defer h.mu.Unlock()
	ev, ok := h.num.event(e, site)
	if !ok {
		return
	}
	if h.sites != nil {
		switch ev.Op {
		case trace.Alloc:
			h.sites[e.BlockID] = site
		case trace.Free:
			delete(h.sites, e.BlockID)
		}
	}
	h.add(ev, e.AllocSize)
}

// add puts ev in the ring, with its time, over the oldest entry once the
// ring is full. h.mu must be held; taking the time under it keeps the
// ring's times in order.
func (h *History) add(ev trace.Event, allocSize int64) {
	ev.Time = time.Since(h.start)
	entry := HistoryEntry{Event: ev, AllocSize: allocSize}
	if len(h.ring) < h.size {
		if len(h.ring) == cap(h.ring) { // grow, but never past n
			grown := make([]HistoryEntry, len(h.ring), min(max(2*cap(h.ring), 64), h.size))
			copy(grown, h.ring)
			h.ring = grown
		}
		h.ring = append(h.ring, entry)
		return
	}
	switch old := h.ring[h.next].Event; old.Op {
	case trace.SegmentAlloc: // its segment is live at the ring's new start
		h.lostSegs[old.ID] = old
	case trace.SegmentFree: // its segment is no longer live at the ring's start
		delete(h.lostSegs, old.ID)
	}
	h.ring[h.next] = entry
	h.next = (h.next + 1) % h.size
}

// Entries returns the events kept, oldest first, with their blocks' sizes.
func (h *History) Entries() []HistoryEntry {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.entriesLocked()
}

// entriesLocked is Entries, with h.mu held.
func (h *History) entriesLocked() []HistoryEntry {
	// Until the ring is full, h.next is 0 and the entries are in order.
	out := make([]HistoryEntry, 0, len(h.ring))
	out = append(out, h.ring[h.next:]...)
	return append(out, h.ring[:h.next]...)
}

// Events returns the last n events, oldest first. Their first events may
// be frees of blocks and segments whose allocations have left the ring:
// WriteTrace leaves out those of blocks, and writes those segments'
// allocations first.
func (h *History) Events() []trace.Event {
	entries := h.Entries()
	events := make([]trace.Event, len(entries))
	for i, entry := range entries {
		events[i] = entry.Event
	}
	return events
}

// History returns the same as Events. It is how a pool's Snapshot finds
// the events of a History registered on the pool.
func (h *History) History() []trace.Event { return h.Events() }

// Queues returns the queues the events name: queue n, an event's Queue,
// is Queues()[n-1]. A pool's Snapshot renumbers its history's queues with
// it, as the pool numbers them.
func (h *History) Queues() []*cl.CommandQueue {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.num.queues)
}

// Site returns where the live block id (a PooledBuffer's ID) was
// allocated, as its Alloc event's Site, and whether the History knows:
// it does for the blocks it saw handed out and not yet freed, if it
// records sites (WithSites), even once their events have left the ring.
// With it, a pool's Snapshot names the site of each active block
// (mempool.SiteNamer).
func (h *History) Site(id uint64) (string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	site, ok := h.sites[id]
	return site, ok && site != ""
}

// WriteTrace writes the events kept in the timed trace format of package
// trace, less the frees of blocks whose allocations have left the ring,
// so that what it writes reads back with trace.Read (and ReadComplete)
// and replays. A segment the History saw allocated that is live at the
// ring's oldest entry, but whose allocation has left the ring, has its
// SegmentAlloc event written first, at the time of that oldest entry, in
// the order of the segments' ids: the trace's segment events give the
// pool's managed bytes as they change (in the order they were told: see
// mempool.SegmentFree), of the segments allocated since
// the History was registered. (Segments the pool had before are not in
// the trace, nor their frees.) The trace is sited, with the queue and
// site columns, if the History records sites or any event has a queue.
// Blocks and segments still live at the end are left live, as in any
// trace. Ids and times are as recorded: the ids need not start at 1, nor
// the times at 0.
func (h *History) WriteTrace(w io.Writer) error {
	h.mu.Lock()
	entries := h.entriesLocked()
	events := make([]trace.Event, 0, len(h.lostSegs)+len(entries))
	for _, ev := range h.lostSegs {
		ev.Time = entries[0].Time // lostSegs is empty until the ring is full
		events = append(events, ev)
	}
	h.mu.Unlock()
	slices.SortFunc(events, func(a, b trace.Event) int { return cmp.Compare(a.ID, b.ID) })
	for _, entry := range entries {
		events = append(events, entry.Event)
	}
	tw := trace.NewTimedWriter(w)
	if h.depth > 0 || trace.Sited(events) {
		tw = trace.NewSitedWriter(w)
	}
	blocks, segs := make(map[int64]bool, len(events)), map[int64]bool{}
	for _, ev := range events {
		allocated := blocks
		if ev.Op.Segment() {
			allocated = segs
		}
		if ev.Op == trace.Alloc || ev.Op == trace.SegmentAlloc {
			allocated[ev.ID] = true
		} else if !allocated[ev.ID] {
			continue // its allocation has left the ring
		}
		if err := tw.Write(ev); err != nil {
			return err
		}
	}
	return tw.Flush()
}
