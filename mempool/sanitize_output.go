package mempool

import (
	"fmt"
	"io"
	"os"
	"sync"
)

// This file is how the sanitizer writes its findings to its output
// (WithSanitizerOutput). A line is printed under s.mu, with the finding,
// and handed to the output once s.mu is let go, with no lock of the pool
// or the sanitizer held, so that the writer may call the pool. The output
// (sanOutput) is shared by every pool made with one option (a Set's
// pools): one goroutine writes at a time, and lines handed over
// meanwhile, on any goroutine and by any of those pools (the writer's own
// calls into a pool included), are queued for it, and it writes them
// before it stops. A writer that panics is called no more, by any of
// those pools: the panic stops here, so that the pool's operation in
// progress (a Close, say) finishes; the findings are kept either way.

// sanOutput is a writer of findings, shared by the pools made with one
// WithSanitizerOutput option.
type sanOutput struct {
	w io.Writer

	mu      sync.Mutex // protects the fields below
	queue   []string   // lines left to the write under way
	writing bool       // a goroutine writes to w
	dead    bool       // w panicked: it is called no more
}

// stderrOutput is the output of pools made without WithSanitizerOutput.
var stderrOutput = newSanOutput(os.Stderr)

// newSanOutput returns the output to w; nil for a nil w (nowhere).
func newSanOutput(w io.Writer) *sanOutput {
	if w == nil {
		return nil
	}
	return &sanOutput{w: w}
}

// emit writes lines, then the lines handed over meanwhile, until none is
// left; if a write is under way, it leaves lines to it. No lock of the
// pool or the sanitizer may be held. The loop ends when it finds the
// queue empty, or w dead.
func (o *sanOutput) emit(lines []string) {
	o.mu.Lock()
	if o.dead {
		o.mu.Unlock()
		return
	}
	o.queue = append(o.queue, lines...)
	if o.writing {
		o.mu.Unlock()
		return
	}
	o.writing = true
	for len(o.queue) > 0 && !o.dead {
		batch := o.queue
		o.queue = nil
		o.mu.Unlock()
		ok := writeLines(o.w, batch)
		o.mu.Lock()
		if !ok {
			o.dead, o.queue = true, nil // called no more
		}
	}
	o.writing = false
	o.mu.Unlock()
}

// writeLines writes lines to w, and reports whether w returned from each
// call (false: it panicked, and the rest were not written).
func writeLines(w io.Writer, lines []string) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	for _, l := range lines {
		_, _ = io.WriteString(w, l)
	}
	return true
}

// print notes a line for the output, if any: unlock hands it over. s.mu
// must be held.
func (s *sanitizer) print(format string, args ...any) {
	if s.out != nil {
		s.lines = append(s.lines, fmt.Sprintf(format, args...))
	}
}

// unlock lets go of s.mu, then hands the lines printed under it to the
// output. No other lock of the pool or the sanitizer may be held, nor a
// queue's hold: harvest, under harvestMu, and the holders of a queue keep
// their lines instead (unlockQueued), and hand them over once they let go
// (flushQueued).
func (s *sanitizer) unlock() {
	lines := s.lines
	s.lines = nil
	s.mu.Unlock()
	if len(lines) > 0 {
		s.out.emit(lines)
	}
}

// unlockQueued lets go of s.mu, keeping the lines printed under it for
// flushQueued.
func (s *sanitizer) unlockQueued() {
	s.queued = append(s.queued, s.lines...)
	s.lines = nil
	s.mu.Unlock()
}

// flushQueued hands the lines kept by unlockQueued to the output. No lock
// of the pool or the sanitizer may be held, nor a queue's hold.
func (s *sanitizer) flushQueued() {
	s.mu.Lock()
	lines := s.queued
	s.queued = nil
	s.mu.Unlock()
	if len(lines) > 0 {
		s.out.emit(lines)
	}
}
