package memhooks

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/trace"
)

// History keeps a pool's last n allocations and frees in a ring, as
// torch.cuda.memory._record_memory_history(max_entries=n) does, so that a
// program can look back at what led up to a moment (an out-of-memory
// error, a snapshot) at little cost while it runs.
//
// It records what TraceRecorder records, numbered the same way: a
// successful Allocate as an Alloc of the bytes asked for, and the free of
// a block it saw handed out (Close, or the collector's reclaim) as a Free,
// each with its time since the History was made. Frees of blocks handed out before the History was
// registered are not recorded.
//
// Each event costs O(1) and, once the ring is full, allocates nothing; the
// History's memory is the ring of n entries, grown as it fills, and the
// ids of the blocks live now. It is safe for concurrent use.
type History struct {
	start time.Time // for the events' times; it holds a monotonic reading
	size  int       // the ring's capacity, n

	mu     sync.Mutex // protects the fields below
	ring   []HistoryEntry
	next   int              // where the next entry goes, once the ring is full
	ids    map[uint64]int64 // live block ID -> trace id
	lastID int64
}

// HistoryEntry is one event of a History: the trace event, and the size
// of the block the pool used for it, which can be larger than the bytes
// asked for (trace.Event's Size).
type HistoryEntry struct {
	trace.Event
	AllocSize int64 `json:"alloc_size"`
}

// NewHistory returns a History of the last n events. Register it with
// pool.AddHook. It panics if n is less than 1.
func NewHistory(n int) *History {
	if n < 1 {
		panic(fmt.Sprintf("memhooks: NewHistory: n is %d, want at least 1", n))
	}
	return &History{start: time.Now(), size: n, ids: map[uint64]int64{}}
}

// Handle records successful Allocates and the frees of their blocks.
func (h *History) Handle(e mempool.Event) {
	switch {
	case e.Kind == mempool.MallocAfter && e.Err == nil:
		h.mu.Lock()
		h.lastID++
		h.ids[e.BlockID] = h.lastID
		h.add(trace.Event{Op: trace.Alloc, ID: h.lastID, Size: e.Size}, e.AllocSize)
		h.mu.Unlock()
	case e.Kind == mempool.FreeBefore:
		h.mu.Lock()
		if id, ok := h.ids[e.BlockID]; ok {
			delete(h.ids, e.BlockID)
			h.add(trace.Event{Op: trace.Free, ID: id}, e.AllocSize)
		}
		h.mu.Unlock()
	}
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
	h.ring[h.next] = entry
	h.next = (h.next + 1) % h.size
}

// Entries returns the events kept, oldest first, with their blocks' sizes.
func (h *History) Entries() []HistoryEntry {
	h.mu.Lock()
	defer h.mu.Unlock()
	// Until the ring is full, h.next is 0 and the entries are in order.
	out := make([]HistoryEntry, 0, len(h.ring))
	out = append(out, h.ring[h.next:]...)
	return append(out, h.ring[:h.next]...)
}

// Events returns the last n events, oldest first. Their first events may
// be frees of blocks whose allocations have left the ring; WriteTrace
// leaves those out.
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

// WriteTrace writes the events kept in the timed trace format of package
// trace, less the frees of blocks whose allocations have left the ring,
// so that what it writes reads back with trace.Read and replays. Blocks
// still live at the end are left live, as in any trace. Ids and times are
// as recorded: the ids need not start at 1, nor the times at 0.
func (h *History) WriteTrace(w io.Writer) error {
	events := h.Events()
	allocated := make(map[int64]bool, len(events))
	tw := trace.NewTimedWriter(w)
	for _, ev := range events {
		if ev.Op == trace.Alloc {
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
