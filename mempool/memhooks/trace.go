package memhooks

import (
	"io"
	"sync"
	"time"

	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/trace"
)

// TraceRecorder writes a pool's allocations and frees as a timed trace of
// package trace (the format of testdata/cg.tsv with a fourth column, t),
// numbering blocks 1, 2, ... in the order they are handed out, so that a
// program's allocation pattern can be captured and replayed
// (`clpool replay`). Each event's time is the time since the recorder was
// made, from the monotonic clock, taken as the event is written, so that
// times never go back down the file.
type TraceRecorder struct {
	start time.Time // it holds a monotonic reading

	// mu protects the fields below. Each event's time is taken under it,
	// so that the times never go back down the file.
	mu   sync.Mutex
	w    *trace.Writer
	ids  map[uint64]int64 // live block ID -> trace id
	next int64            // the last trace id given
	err  error            // the first write error
}

// NewTraceRecorder returns a hook writing to w. Call Flush when done.
func NewTraceRecorder(w io.Writer) *TraceRecorder {
	return &TraceRecorder{w: trace.NewTimedWriter(w), start: time.Now(), ids: map[uint64]int64{}}
}

// Handle records successful Allocates and the frees of their blocks;
// frees of blocks handed out before the recorder was added are left out.
func (r *TraceRecorder) Handle(e mempool.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var err error
	switch {
	case e.Kind == mempool.MallocAfter && e.Err == nil:
		r.next++
		r.ids[e.BlockID] = r.next
		err = r.w.Write(trace.Event{Op: trace.Alloc, ID: r.next, Size: e.Size, Time: time.Since(r.start)})
	case e.Kind == mempool.FreeBefore:
		id, ok := r.ids[e.BlockID]
		if !ok {
			return // handed out before the recorder was added
		}
		delete(r.ids, e.BlockID)
		err = r.w.Write(trace.Event{Op: trace.Free, ID: id, Time: time.Since(r.start)})
	}
	if err != nil && r.err == nil {
		r.err = err
	}
}

// Flush writes what is buffered and returns the first error met.
func (r *TraceRecorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.w.Flush(); err != nil && r.err == nil {
		r.err = err
	}
	return r.err
}
