package mempool

import (
	"fmt"
	"io"
)

// This file is how the sanitizer writes its findings to its output
// (WithSanitizerOutput). A line is printed under s.mu, with the finding,
// and written once s.mu is let go, with no lock of the pool or the
// sanitizer held, so that the writer may call the pool. One goroutine
// writes at a time (s.writing): lines printed meanwhile, on any goroutine
// (the writer's own, through the pool, included), are queued for it
// (s.outQ), and it writes them before it stops. A writer that panics is
// called no more: the panic stops here, so that the pool's operation in
// progress (a Close, say) finishes; the findings are kept either way.

// print notes a line for the output, if any: unlock writes it. s.mu must
// be held.
func (s *sanitizer) print(format string, args ...any) {
	if s.out != nil {
		s.lines = append(s.lines, fmt.Sprintf(format, args...))
	}
}

// unlock lets go of s.mu, then writes the lines printed under it, or
// queues them if a write is under way. No other lock of the pool or the
// sanitizer may be held: harvest, under harvestMu, queues its lines
// instead (unlockQueued), and writes them once it lets go of harvestMu.
func (s *sanitizer) unlock() {
	lines := s.lines
	s.lines = nil
	if len(lines) == 0 {
		s.mu.Unlock()
		return
	}
	if s.writing {
		s.outQ = append(s.outQ, lines...)
		s.mu.Unlock()
		return
	}
	s.writing = true
	s.mu.Unlock()
	s.write(lines)
}

// unlockQueued lets go of s.mu, queueing the lines printed under it for
// flushQueued.
func (s *sanitizer) unlockQueued() {
	s.outQ = append(s.outQ, s.lines...)
	s.lines = nil
	s.mu.Unlock()
}

// flushQueued writes the queued lines, unless a write is under way (it
// writes them). No lock of the pool or the sanitizer may be held.
func (s *sanitizer) flushQueued() {
	s.mu.Lock()
	if s.writing || len(s.outQ) == 0 {
		s.mu.Unlock()
		return
	}
	lines := s.outQ
	s.outQ, s.writing = nil, true
	s.mu.Unlock()
	s.write(lines)
}

// write writes lines to the output, then the lines queued meanwhile,
// until none is left, and ends the write (s.writing). s.writing must be
// set by the caller, and s.mu not held. It ends when it finds the queue
// empty, or the output gone (nil, or panicked).
func (s *sanitizer) write(lines []string) {
	for {
		s.mu.Lock()
		out := s.out
		s.mu.Unlock()
		if out != nil && !writeLines(out, lines) {
			s.mu.Lock()
			s.out = nil // called no more
			s.mu.Unlock()
		}
		s.mu.Lock()
		lines, s.outQ = s.outQ, nil
		if len(lines) == 0 || s.out == nil {
			s.writing = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
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
