// Package trace reads, writes and replays allocation traces: the record of
// every allocation and free a program made, as a TSV file with a header
// line and one event a line,
//
//	op	id	size
//	a	1	524288
//	f	1	0
//
// where op "a" allocates size bytes as block id and "f" frees block id (a
// free's size is 0 or the size the block was allocated with). This is the
// format of the trace recorded from pyopencl.array running a
// conjugate-gradient solve (testdata/cg.tsv), so a program's allocation
// pattern can be captured once and replayed through any allocator.
//
// A timed trace has a fourth column, t, the time of the event in integer
// nanoseconds since the recording began:
//
//	op	id	size	t
//	a	1	524288	1200
//	f	1	0	53100
//
// A trace has times on every event or on none. Read reads both kinds;
// NewWriter writes the first and NewTimedWriter the second. In an Event, a
// Time of 0 means the trace had no time column, and Timed tells whether
// any event of a trace has a time.
//
// An Event also encodes as JSON, {"op":"a","id":1,"size":512,"t":123},
// with t in nanoseconds.
package trace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/bits"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Op is an event's kind. It encodes as text, and so in JSON, as "a" or
// "f".
type Op byte

// Event kinds.
const (
	Alloc Op = 'a'
	Free  Op = 'f'
)

// MarshalText returns "a" or "f", and an error for any other Op.
func (op Op) MarshalText() ([]byte, error) {
	if op != Alloc && op != Free {
		return nil, fmt.Errorf("trace: unknown op %q, want a or f", byte(op))
	}
	return []byte{byte(op)}, nil
}

// UnmarshalText sets op from "a" or "f", and returns an error for any other
// text.
func (op *Op) UnmarshalText(text []byte) error {
	parsed, err := parseOp(string(text))
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	*op = parsed
	return nil
}

// parseOp returns the Op that s names.
func parseOp(s string) (Op, error) {
	switch s {
	case "a":
		return Alloc, nil
	case "f":
		return Free, nil
	}
	return 0, fmt.Errorf("unknown op %s, want a or f", shorten(s))
}

// Event is one allocation or free.
type Event struct {
	Op   Op            `json:"op"`
	ID   int64         `json:"id"`
	Size int64         `json:"size"` // bytes allocated; 0 for a free
	Time time.Duration `json:"t"`    // since the recording began; 0 if the trace has no time column
}

// Timed reports whether any of events has a time, that is, whether they
// come from a timed trace.
func Timed(events []Event) bool {
	for _, ev := range events {
		if ev.Time != 0 {
			return true
		}
	}
	return false
}

// The two headers, as fields.
var (
	header      = []string{"op", "id", "size"}
	timedHeader = []string{"op", "id", "size", "t"}
)

// LineError is Read's error at a line of a trace.
type LineError struct {
	Line int // from 1
	Err  error
}

// Error names the line.
func (e *LineError) Error() string { return fmt.Sprintf("trace: line %d: %v", e.Line, e.Err) }

// Unwrap returns the error without the line.
func (e *LineError) Unwrap() error { return e.Err }

// Read parses a trace, timed or not. Blank lines and lines starting with #
// are skipped, and so is the header, if the first other line is one.
// Lines may be of any length. Read checks that every event line has the
// same number of fields, three or four (with a time, a non-negative
// integer); that every free names a live block, with size 0 or the size
// it was allocated with; and that no id is allocated twice while live.
// Errors are *LineError. The events Read returns have Size 0 for every
// free.
func Read(r io.Reader) ([]Event, error) {
	p := parser{liveSize: map[int64]int64{}}
	br := bufio.NewReader(r) // unlike a bufio.Scanner, no limit on a line's length
	var events []Event
	for line := 1; ; line++ {
		text, readErr := br.ReadString('\n')
		if readErr != nil && !errors.Is(readErr, io.EOF) {
			return nil, &LineError{Line: line, Err: fmt.Errorf("reading: %w", readErr)}
		}
		ev, ok, err := p.parse(strings.TrimSpace(text), line)
		if err != nil {
			return nil, &LineError{Line: line, Err: err}
		}
		if ok {
			events = append(events, ev)
		}
		if readErr != nil { // io.EOF, after the last line
			return events, nil
		}
	}
}

// ReadFile reads the trace file at path with Read. Its errors are Open's
// and Read's, as they are.
func ReadFile(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Read(f)
}

// parser is Read's state between lines.
type parser struct {
	liveSize map[int64]int64 // live block id -> its size
	seen     bool            // a header or an event has been read
	columns  int             // 3 or 4, once seen
	from     int             // the line that set columns
}

// parse parses one line, already trimmed. ok is false for a line with no
// event: blank, a comment or the header.
func (p *parser) parse(text string, line int) (ev Event, ok bool, err error) {
	if text == "" || strings.HasPrefix(text, "#") {
		return ev, false, nil
	}
	fields := strings.Fields(text)
	if !p.seen && fields[0] == "op" {
		if !slices.Equal(fields, header) && !slices.Equal(fields, timedHeader) {
			return ev, false, fmt.Errorf("header %s, want `op id size` or `op id size t`", shorten(text))
		}
		p.seen, p.columns, p.from = true, len(fields), line
		return ev, false, nil
	}
	if len(fields) != 3 && len(fields) != 4 {
		return ev, false, fmt.Errorf("want `op id size` or `op id size t`, got %d fields: %s", len(fields), shorten(text))
	}
	if !p.seen {
		p.seen, p.columns, p.from = true, len(fields), line
	}
	if len(fields) != p.columns {
		return ev, false, fmt.Errorf("%d fields, but line %d has %d: a trace has a time on every event or on none", len(fields), p.from, p.columns)
	}
	if ev.Op, err = parseOp(fields[0]); err != nil {
		return ev, false, err
	}
	if ev.ID, err = strconv.ParseInt(fields[1], 10, 64); err != nil {
		return ev, false, fmt.Errorf("block id %s is not an integer", shorten(fields[1]))
	}
	if ev.Size, err = strconv.ParseInt(fields[2], 10, 64); err != nil || ev.Size < 0 {
		return ev, false, fmt.Errorf("size %s is not a non-negative integer", shorten(fields[2]))
	}
	if len(fields) == 4 {
		ns, err := strconv.ParseInt(fields[3], 10, 64)
		if err != nil || ns < 0 {
			return ev, false, fmt.Errorf("time %s is not a non-negative integer (nanoseconds)", shorten(fields[3]))
		}
		ev.Time = time.Duration(ns)
	}
	allocated, live := p.liveSize[ev.ID]
	if ev.Op == Alloc {
		if live {
			return ev, false, fmt.Errorf("block %d allocated while live", ev.ID)
		}
		p.liveSize[ev.ID] = ev.Size
		return ev, true, nil
	}
	if !live {
		return ev, false, fmt.Errorf("free of block %d, which is not live", ev.ID)
	}
	if ev.Size != 0 && ev.Size != allocated {
		return ev, false, fmt.Errorf("free of block %d with size %d, but it was allocated with %d (a free's size is 0 or the allocated size)", ev.ID, ev.Size, allocated)
	}
	delete(p.liveSize, ev.ID)
	ev.Size = 0
	return ev, true, nil
}

// shorten quotes s for an error message, cutting it short if it is long:
// a line of a broken trace can be megabytes.
func shorten(s string) string {
	const limit = 40
	if len(s) <= limit {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:limit], len(s))
}

// Writer writes a trace, header first. It is not safe for concurrent use;
// wrap it in a lock to share it.
type Writer struct {
	w      *bufio.Writer
	timed  bool
	header bool // written
}

// NewWriter returns a Writer of the three-column format, `op id size`,
// to w; it leaves out the events' times. Call Flush when done.
func NewWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriter(w)} }

// NewTimedWriter returns a Writer of the timed format, `op id size t`,
// to w, with each event's Time in nanoseconds. Call Flush when done.
func NewTimedWriter(w io.Writer) *Writer { return &Writer{w: bufio.NewWriter(w), timed: true} }

// Write writes one event, after the header if it is the first.
func (t *Writer) Write(ev Event) error {
	if !t.header {
		t.header = true
		h := header
		if t.timed {
			h = timedHeader
		}
		if _, err := t.w.WriteString(strings.Join(h, "\t") + "\n"); err != nil {
			return fmt.Errorf("trace: writing: %w", err)
		}
	}
	var err error
	if t.timed {
		_, err = fmt.Fprintf(t.w, "%c\t%d\t%d\t%d\n", ev.Op, ev.ID, ev.Size, ev.Time.Nanoseconds())
	} else {
		_, err = fmt.Fprintf(t.w, "%c\t%d\t%d\n", ev.Op, ev.ID, ev.Size)
	}
	if err != nil {
		return fmt.Errorf("trace: writing: %w", err)
	}
	return nil
}

// Flush writes what is buffered.
func (t *Writer) Flush() error {
	if err := t.w.Flush(); err != nil {
		return fmt.Errorf("trace: writing: %w", err)
	}
	return nil
}

// Summary is what a trace asks of an allocator.
type Summary struct {
	Allocs, Frees int
	PeakLiveBytes int64 // the most bytes live at once; math.MaxInt64 if more
	Leaked        int   // blocks allocated and never freed
	Sizes         int   // distinct sizes allocated
}

// Summarize counts a trace's events, its distinct sizes and its peak
// live bytes. The peak saturates at math.MaxInt64: a trace whose live
// bytes pass it (events built by hand, sizes near math.MaxInt64) reports
// math.MaxInt64, never a wrapped figure. The live bytes are kept exactly
// on the way, past math.MaxInt64 too, so that the frees after such a peak
// bring them back down to the right figure. The counts are of events and
// cannot overflow.
func Summarize(events []Event) Summary {
	var s Summary
	var live wide
	sizes := map[int64]int64{}
	distinct := map[int64]bool{}
	for _, ev := range events {
		switch ev.Op {
		case Alloc:
			s.Allocs++
			sizes[ev.ID] = ev.Size
			distinct[ev.Size] = true
			live.add(ev.Size)
			s.PeakLiveBytes = max(s.PeakLiveBytes, live.saturated())
		case Free:
			s.Frees++
			live.sub(sizes[ev.ID])
			delete(sizes, ev.ID)
		}
	}
	s.Leaked, s.Sizes = len(sizes), len(distinct)
	return s
}

// wide is a 128-bit two's-complement integer, hi·2^64 + lo: Summarize's
// running sum of live bytes, which 2^63 events of any int64 size cannot
// overflow.
type wide struct {
	hi int64
	lo uint64
}

// add adds x to w.
func (w *wide) add(x int64) {
	var carry uint64
	w.lo, carry = bits.Add64(w.lo, uint64(x), 0)
	w.hi += x>>63 + int64(carry) // x>>63 is x's sign extension: 0 or -1
}

// sub subtracts x from w (-x would wrap for math.MinInt64).
func (w *wide) sub(x int64) {
	var borrow uint64
	w.lo, borrow = bits.Sub64(w.lo, uint64(x), 0)
	w.hi -= x>>63 + int64(borrow)
}

// saturated returns w clamped to the int64 range.
func (w wide) saturated() int64 {
	switch {
	case w.hi > 0 || w.hi == 0 && w.lo > math.MaxInt64:
		return math.MaxInt64
	case w.hi < -1 || w.hi == -1 && w.lo <= math.MaxInt64:
		return math.MinInt64
	}
	return int64(w.lo)
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
