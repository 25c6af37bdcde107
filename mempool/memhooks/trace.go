package memhooks

import (
	"fmt"
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
// (`clpool replay`) or drawn (`clpool viz`). Each event's time is the time
// since the recorder was made, from the monotonic clock, taken as the
// event is written, so that times never go back down the file.
//
// It records the pool's segments too, as the trace's ops A and F: each
// device allocation the pool made (alloc_after) and gave back
// (segment_free), numbered 1, 2, ... apart from the blocks, so that the
// trace has the pool's own managed bytes as they change. Blocks and
// segments the pool had before the recorder was added are left out, their
// frees with them. From one goroutine, the trace's segment bytes are the
// pool's once each call that frees segments has told them all (its peak
// is Stats' PeakManagedBytes; see mempool.SegmentFree). From
// several, the trace's live segments are at every moment among those the
// device holds (its peak within a device's memory or an allocator.Budget),
// and its peak can pass the pool's for a moment: a segment that one
// goroutine frees is on the device, and live in the trace, until its
// segment_free, after the pool stopped counting it (see
// mempool.SegmentFree).
//
// With WithSites (or WithStacks), the trace has two more columns: the
// queue of each block, numbered 1, 2, ... by the recorder in the order of
// their first use (- for none), and the site of each event, where in the
// program it was asked for (see package trace).
//
// The recorder writes whole lines only, and by itself every 250 ms
// (WithFlushEvery) while it has lines to write, so that the trace of a
// program that is killed ends at most that long before it, on a whole
// line. A program stopped with Ctrl-C can write the rest: catch the
// signal with signal.NotifyContext, end the work when the context is
// done, and Flush or Close the recorder, as in
//
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
//	defer stop()
//	f, err := os.Create("run.tsv")
//	...
//	rec := memhooks.NewTraceRecorder(f, memhooks.WithSites())
//	remove := pool.AddHook(rec)
//	defer func() {
//		remove()
//		if err := rec.Close(); err != nil { // Flush, and stop recording
//			log.Print(err)
//		}
//		f.Close()
//	}()
//	for step := 0; step < steps && ctx.Err() == nil; step++ {
//		... // Ctrl-C ends the loop; the deferred Close writes the rest
//	}
type TraceRecorder struct {
	start time.Time // it holds a monotonic reading
	depth int       // the frames of a site; 0: no sites
	every time.Duration

	// mu protects the fields below. Each event's time is taken under it,
	// so that the times never go back down the file.
	mu       sync.Mutex
	w        *trace.Writer
	num      numbering   // the blocks', segments' and queues' numbers
	timer    *time.Timer // the flush to come; nil before the first
	pending  bool        // lines wait for the timer
	closed   bool        // Close was called
	panicked bool        // the writer panicked: nothing more is written (see write)
	err      error       // the first write error
}

// TraceOption is an option of NewTraceRecorder, and of NewHistory.
type TraceOption func(*traceConfig)

type traceConfig struct {
	depth int
	every time.Duration
}

// WithSites adds the queue and site columns to the trace, the site being
// the innermost frame outside clpool, in the file:line:function form of
// LineProfile and of the pool's snapshots; to a History, it gives each
// event its site. Taking the caller's stack at each event costs about a
// microsecond.
func WithSites() TraceOption { return WithStacks(1) }

// WithStacks is WithSites with up to depth frames in each site, innermost
// first, joined by " < ": "cg.go:63:main.solve < main.go:40:main.main".
// A depth less than 1 is 1.
func WithStacks(depth int) TraceOption {
	return func(c *traceConfig) { c.depth = max(depth, 1) }
}

// applyOptions sets c by opts, for the constructor called call; it
// panics on a nil option, at the call that passed it (a caller building
// its options conditionally would otherwise find a nil dereference).
func applyOptions(call string, c *traceConfig, opts []TraceOption) {
	for i, o := range opts {
		if o == nil {
			panic(fmt.Sprintf("memhooks: %s: option %d is nil", call, i))
		}
		o(c)
	}
}

// WithFlushEvery sets how long a line may wait in the recorder before it
// is written, 250 ms unless set; 0 or less: with no time bound, written
// when Flush or Close is called or when 64 KiB of lines wait (the trace
// writer's buffer, which never holds more).
func WithFlushEvery(d time.Duration) TraceOption {
	return func(c *traceConfig) { c.every = max(d, 0) }
}

// NewTraceRecorder returns a hook writing to w, with w's own Write calls
// made under the recorder's lock, one at a time: w need not be safe for
// concurrent use. Register it with pool.AddHook, and Close it (or Flush it)
// when done. It panics on a nil option, as NewHistory does.
func NewTraceRecorder(w io.Writer, opts ...TraceOption) *TraceRecorder {
	c := traceConfig{every: 250 * time.Millisecond}
	applyOptions("NewTraceRecorder", &c, opts)
	r := &TraceRecorder{start: time.Now(), depth: c.depth, every: c.every, num: newNumbering()}
	if c.depth > 0 {
		r.w = trace.NewSitedWriter(w)
	} else {
		r.w = trace.NewTimedWriter(w)
	}
	return r
}

// Handle records successful Allocates and the frees of their blocks, and
// the segments the pool allocates and frees.
func (r *TraceRecorder) Handle(e mempool.Event) {
	if !traced(e) {
		return
	}
	site := siteOf(r.depth) // outside the lock: it is the slow part
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	ev, ok := r.num.event(e, site)
	if !ok {
		return
	}
	ev.Time = time.Since(r.start)
	r.write(func() error { return r.w.Write(ev) })
	if !r.pending && r.every > 0 {
		r.pending = true
		if r.timer == nil {
			r.timer = time.AfterFunc(r.every, r.tick)
		} else {
			r.timer.Reset(r.every)
		}
	}
}

// tick is the timer's: it writes the lines waiting.
func (r *TraceRecorder) tick() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = false
	if !r.closed {
		r.write(r.w.Flush)
	}
}

// write calls f, a write to the trace, and keeps its error (note). A
// writer that panics fails it too, rather than the program (the timer's
// goroutine has no one to recover it): the recorder then writes nothing
// more, since its writer may hold lines it would write again. r.mu must
// be held.
func (r *TraceRecorder) write(f func() error) {
	if r.panicked {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			r.panicked = true
			r.note(fmt.Errorf("memhooks: the trace's writer panicked: %v", v))
		}
	}()
	r.note(f())
}

// note keeps err if it is the first.
func (r *TraceRecorder) note(err error) {
	if err != nil && r.err == nil {
		r.err = err
	}
}

// Flush writes what is buffered, whole lines, and returns the first error
// met. A writer that panics is an error (and the recorder writes nothing
// more), whether Flush, Close, a hook event or the timer met it.
func (r *TraceRecorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.write(r.w.Flush)
	}
	return r.err
}

// Close stops the recorder: it writes what is buffered, as Flush does,
// and records no event after. It does not close the writer, nor remove
// the hook from the pool. It returns the first error met; a second Close
// returns it again.
func (r *TraceRecorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.write(r.w.Flush)
		r.closed = true
		if r.timer != nil {
			r.timer.Stop()
		}
	}
	return r.err
}
