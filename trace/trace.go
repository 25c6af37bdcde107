// Package trace reads, writes and replays allocation traces: the record of
// every allocation and free a program made, as a TSV file with a header
// line and one event a line,
//
//	op	id	size
//	a	1	524288
//	f	1	0
//
// where op "a" allocates size bytes as block id and "f" frees block id.
// This is the format of the trace recorded from pyopencl.array running a
// conjugate-gradient solve (testdata/cg.tsv), so a program's allocation
// pattern can be captured once and replayed through any allocator.
package trace

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Op is an event's kind.
type Op byte

// Event kinds.
const (
	Alloc Op = 'a'
	Free  Op = 'f'
)

// Event is one allocation or free.
type Event struct {
	Op   Op
	ID   int64
	Size int64 // bytes allocated; 0 for a free
}

// Read parses a trace. It checks that every free names a live block and
// that no id is allocated twice while live.
func Read(r io.Reader) ([]Event, error) {
	var events []Event
	live := map[int64]bool{}
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") || (line == 1 && strings.HasPrefix(text, "op")) {
			continue
		}
		f := strings.Fields(text)
		if len(f) < 2 || len(f) > 3 || len(f[0]) != 1 {
			return nil, fmt.Errorf("trace: line %d: want `op id size`, got %q", line, text)
		}
		id, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("trace: line %d: id: %w", line, err)
		}
		var size int64
		if len(f) == 3 {
			if size, err = strconv.ParseInt(f[2], 10, 64); err != nil || size < 0 {
				return nil, fmt.Errorf("trace: line %d: bad size %q", line, f[2])
			}
		}
		ev := Event{Op: Op(f[0][0]), ID: id, Size: size}
		switch ev.Op {
		case Alloc:
			if live[id] {
				return nil, fmt.Errorf("trace: line %d: block %d allocated while live", line, id)
			}
			live[id] = true
		case Free:
			if !live[id] {
				return nil, fmt.Errorf("trace: line %d: free of block %d, which is not live", line, id)
			}
			delete(live, id)
			ev.Size = 0
		default:
			return nil, fmt.Errorf("trace: line %d: unknown op %q", line, f[0])
		}
		events = append(events, ev)
	}
	return events, sc.Err()
}

// Writer writes a trace, header first. It is not safe for concurrent use;
// wrap it in a lock to share it.
type Writer struct {
	w      *bufio.Writer
	header bool
}

// NewWriter returns a Writer to w. Call Flush when done.
func NewWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriter(w)} }

// Write writes one event.
func (t *Writer) Write(ev Event) error {
	if !t.header {
		t.header = true
		if _, err := t.w.WriteString("op\tid\tsize\n"); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(t.w, "%c\t%d\t%d\n", ev.Op, ev.ID, ev.Size)
	return err
}

// Flush writes what is buffered.
func (t *Writer) Flush() error { return t.w.Flush() }

// Summary is what a trace asks of an allocator.
type Summary struct {
	Allocs, Frees int
	PeakLiveBytes int64 // the most bytes live at once
	Leaked        int   // blocks allocated and never freed
}

// Summarize counts a trace's events and its peak live bytes.
func Summarize(events []Event) Summary {
	var s Summary
	var live int64
	sizes := map[int64]int64{}
	for _, ev := range events {
		switch ev.Op {
		case Alloc:
			s.Allocs++
			sizes[ev.ID] = ev.Size
			live += ev.Size
			s.PeakLiveBytes = max(s.PeakLiveBytes, live)
		case Free:
			s.Frees++
			live -= sizes[ev.ID]
			delete(sizes, ev.ID)
		}
	}
	s.Leaked = len(sizes)
	return s
}

// Replay runs the events through alloc and free, keeping each block's
// handle by id. Blocks the trace leaves live are freed at the end, in id
// order.
func Replay[T any](events []Event, alloc func(size int64) (T, error), free func(T) error) error {
	live := make(map[int64]T, 64)
	for _, ev := range events {
		switch ev.Op {
		case Alloc:
			h, err := alloc(ev.Size)
			if err != nil {
				return fmt.Errorf("trace: allocating block %d (%d bytes): %w", ev.ID, ev.Size, err)
			}
			live[ev.ID] = h
		case Free:
			h := live[ev.ID]
			delete(live, ev.ID)
			if err := free(h); err != nil {
				return fmt.Errorf("trace: freeing block %d: %w", ev.ID, err)
			}
		}
	}
	ids := slices.Sorted(maps.Keys(live)) // in id order, so that replays are repeatable
	for _, id := range ids {
		if err := free(live[id]); err != nil {
			return fmt.Errorf("trace: freeing block %d at the end: %w", id, err)
		}
	}
	return nil
}
