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
// A trace has times on every event or on none, and its times never go
// backwards. Read reads both kinds; NewWriter writes the first and
// NewTimedWriter the second. In an Event, a Time of 0 means the trace had
// no time column, and Timed tells whether any event of a trace has a time.
//
// A sited trace (NewSitedWriter; memhooks.TraceRecorder with WithSites)
// has two more columns, named in its header: queue, the queue the block
// is for, numbered 1, 2, ... by the recorder in the order of their first
// use, or - for none; and site, where in the program the event came from,
// in the file:line:function form of memhooks.LineProfile and of the
// pool's snapshots (the first frame outside clpool), or a short stack of
// such frames, innermost first, joined by " < ", or - if unknown:
//
//	op	id	size	t	queue	site
//	A	1	2097152	1100	1	main.go:42:main.main
//	a	1	524288	1200	1	main.go:42:main.main
//	f	1	0	53100	1	main.go:57:main.main
//	F	1	2097152	60000	-	-
//
// Such a trace is split on tabs only, so a site may hold spaces.
//
// Ops "A" and "F" are a pool's segments: the device allocations it made
// and gave back, numbered apart from the blocks, with the segment's size
// (an "F" may give 0, as an "f" may). The bytes of the segments live at a
// moment are the pool's managed bytes then. A trace recorded from a pool
// has them; a trace of what a program asked for, such as cg.tsv, does
// not. Replay, Summarize's block figures, Plan and BestFit leave them out.
//
// An Event also encodes as JSON, {"op":"a","id":1,"size":512,"t":123},
// with t in nanoseconds, and queue and site when it has them.
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

// Op is an event's kind. It encodes as text, and so in JSON, as "a",
// "f", "A" or "F".
type Op byte

// Event kinds.
const (
	Alloc        Op = 'a' // a block allocated
	Free         Op = 'f' // a block freed
	SegmentAlloc Op = 'A' // a segment (a device allocation of a pool) allocated
	SegmentFree  Op = 'F' // a segment freed: given back to the device
)

// valid reports whether op is one of the four kinds.
func (op Op) valid() bool {
	return op == Alloc || op == Free || op == SegmentAlloc || op == SegmentFree
}

// Segment reports whether op is a segment's: SegmentAlloc or SegmentFree.
func (op Op) Segment() bool { return op == SegmentAlloc || op == SegmentFree }

// MarshalText returns "a", "f", "A" or "F", and an error for any other Op.
func (op Op) MarshalText() ([]byte, error) {
	if !op.valid() {
		return nil, fmt.Errorf("trace: unknown op %q, want a, f, A or F", byte(op))
	}
	return []byte{byte(op)}, nil
}

// UnmarshalText sets op from "a", "f", "A" or "F", and returns an error
// for any other text.
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
	case "A":
		return SegmentAlloc, nil
	case "F":
		return SegmentFree, nil
	}
	return 0, fmt.Errorf("unknown op %s, want a, f, A or F", shorten(s))
}

// Event is one allocation or free, of a block or (ops SegmentAlloc and
// SegmentFree) of a pool's segment.
type Event struct {
	Op   Op            `json:"op"`
	ID   int64         `json:"id"`   // the block's, or the segment's: each numbered apart
	Size int64         `json:"size"` // bytes allocated; 0 for a free
	Time time.Duration `json:"t"`    // since the recording began; 0 if the trace has no time column

	// Queue and Site are a sited trace's columns (see the package doc):
	// the queue's number, from 1, and where the event came from. Queue 0
	// and Site "" are "-": none, unknown, or a trace without the columns.
	Queue int    `json:"queue,omitempty"`
	Site  string `json:"site,omitempty"`
}

// Sited reports whether any of events has a queue or a site.
func Sited(events []Event) bool {
	for _, ev := range events {
		if ev.Queue != 0 || ev.Site != "" {
			return true
		}
	}
	return false
}

// Blocks returns the events of blocks (Alloc and Free) of events, in
// order, without the segments' events: what a program asked for. It
// returns events itself if they have no segment event.
func Blocks(events []Event) []Event {
	i := slices.IndexFunc(events, func(ev Event) bool { return ev.Op.Segment() })
	if i < 0 {
		return events
	}
	out := slices.Clone(events[:i])
	for _, ev := range events[i:] {
		if !ev.Op.Segment() {
			out = append(out, ev)
		}
	}
	return out
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

// The three headers, as fields.
var (
	header      = []string{"op", "id", "size"}
	timedHeader = []string{"op", "id", "size", "t"}
	sitedHeader = []string{"op", "id", "size", "t", "queue", "site"}
)

// Errors of a trace that Read and ReadComplete refuse, in a *LineError,
// for errors.Is: the error's message says more.
var (
	// ErrCut is ReadComplete's error for a last line without its newline:
	// the trace was cut mid-line, as when the program writing it was
	// stopped before it flushed.
	ErrCut = errors.New("trace: the last line has no newline: the trace was cut")
	// ErrTimeBackwards is the error for an event whose time is before
	// the time of the event above it.
	ErrTimeBackwards = errors.New("trace: a time goes backwards")
	// ErrColumns is the error for a line whose columns disagree with the
	// header's, or with the first event's when there is no header.
	ErrColumns = errors.New("trace: the columns disagree with the header")
)

// kindError is an error whose message is its own and that matches one of
// the sentinels above.
type kindError struct {
	kind error
	msg  string
}

func (e *kindError) Error() string        { return e.msg }
func (e *kindError) Is(target error) bool { return target == e.kind }

func kindErrorf(kind error, format string, args ...any) error {
	return &kindError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// LineError is Read's error at a line of a trace.
type LineError struct {
	Line int // from 1
	Err  error
}

// Error names the line.
func (e *LineError) Error() string { return fmt.Sprintf("trace: line %d: %v", e.Line, e.Err) }

// Unwrap returns the error without the line.
func (e *LineError) Unwrap() error { return e.Err }

// Read parses a trace, timed, sited or neither. Blank lines and lines
// starting with # are skipped, and so is the header, if the first other
// line is one. Lines may be of any length. A trace whose header names the
// queue and site columns is split on tabs only; any other, on white
// space. Read checks that every event line has the same columns, those of
// the header, or three or four (with a time, a non-negative integer) if
// there is none (ErrColumns); that times never go backwards
// (ErrTimeBackwards); that every free names a live block, with size 0 or
// the size it was allocated with; and that no id is allocated twice while
// live; and the same of segments. Errors are *LineError. The events Read
// returns have Size 0 for every free.
//
// Read takes a last line without its newline as the others; ReadComplete
// refuses it.
func Read(r io.Reader) ([]Event, error) { return read(r, false) }

// ReadComplete is Read for a trace that must be whole: it also refuses a
// last line, other than a blank one, that has no newline, as the trace of
// a program stopped mid-line ends (ErrCut, in a *LineError).
func ReadComplete(r io.Reader) ([]Event, error) { return read(r, true) }

func read(r io.Reader, complete bool) ([]Event, error) {
	p := parser{checker: newChecker("line")}
	br := bufio.NewReader(r) // unlike a bufio.Scanner, no limit on a line's length
	var events []Event
	for line := 1; ; line++ {
		text, readErr := br.ReadString('\n')
		if readErr != nil && !errors.Is(readErr, io.EOF) {
			return nil, &LineError{Line: line, Err: fmt.Errorf("reading: %w", readErr)}
		}
		if complete && readErr != nil && strings.TrimSpace(text) != "" {
			return nil, &LineError{Line: line, Err: kindErrorf(ErrCut, "the last line, %s, has no newline: the trace was cut", shorten(text))}
		}
		ev, ok, err := p.parse(text, line)
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

// Window returns the events of a window cut from a longer run (the ring
// of memhooks.History): events less the frees of blocks and of segments
// allocated before the window began, whose sizes it does not know, and
// how many block frees it dropped. What it returns is what a trace
// recorded from the window's start would hold; Check checks it.
func Window(events []Event) (kept []Event, dropped int) {
	blocks, segs := map[int64]bool{}, map[int64]bool{}
	for _, ev := range events {
		switch ev.Op {
		case Alloc:
			blocks[ev.ID] = true
		case SegmentAlloc:
			segs[ev.ID] = true
		case Free:
			if !blocks[ev.ID] {
				dropped++
				continue
			}
			delete(blocks, ev.ID)
		case SegmentFree:
			if !segs[ev.ID] {
				continue
			}
			delete(segs, ev.ID)
		}
		kept = append(kept, ev)
	}
	return kept, dropped
}

// Check checks events from elsewhere than a trace's text (a pool
// snapshot's JSON history, say) as Read checks a trace's lines: that
// each has a known op and no negative size, time or queue; that times
// never go backwards (ErrTimeBackwards); that every free names a live
// block, with size 0 or the size it was allocated with; and that no id is
// allocated twice while live; and the same of segments. Its error names
// the first event that fails, from 1, and wraps what Read's *LineError
// would (errors.Is finds ErrTimeBackwards). Unlike Read, it leaves the
// frees' sizes as they are.
func Check(events []Event) error {
	c := newChecker("event")
	for i, ev := range events {
		err := ev.checkFields()
		if err == nil {
			err = c.check(&ev, i+1)
		}
		if err != nil {
			return fmt.Errorf("trace: event %d: %w", i+1, err)
		}
	}
	return nil
}

// checkFields checks what Read checks of a line's fields, one at a time,
// of an event that has no line.
func (ev Event) checkFields() error {
	switch {
	case !ev.Op.valid():
		return fmt.Errorf("unknown op %d, want a, f, A or F", byte(ev.Op))
	case ev.Size < 0:
		return fmt.Errorf("size %d is negative", ev.Size)
	case ev.Time < 0:
		return fmt.Errorf("time %d ns is negative", ev.Time.Nanoseconds())
	case ev.Queue < 0:
		return fmt.Errorf("queue %d is negative", ev.Queue)
	}
	return nil
}

// checker checks events in order against those before them, for Read
// and Check: the times, and the blocks and segments live.
type checker struct {
	unit     string          // what a place is: "line" or "event"
	liveSize map[int64]int64 // live block id -> its size
	segSize  map[int64]int64 // live segment id -> its size
	last     time.Duration   // the time of the last event
	lastAt   int             // its place; 0 before the first event
}

func newChecker(unit string) checker {
	return checker{unit: unit, liveSize: map[int64]int64{}, segSize: map[int64]int64{}}
}

// check checks ev, at place at (from 1), after the events checked before
// it, and notes it; an event it refuses changes nothing. It sets a free's
// Size to 0.
func (c *checker) check(ev *Event, at int) error {
	if c.lastAt > 0 && ev.Time < c.last {
		return kindErrorf(ErrTimeBackwards, "time %d ns is before the %d ns of %s %d: a trace's times never go backwards", ev.Time.Nanoseconds(), c.last.Nanoseconds(), c.unit, c.lastAt)
	}
	what, live := "block", c.liveSize
	if ev.Op.Segment() {
		what, live = "segment", c.segSize
	}
	allocated, isLive := live[ev.ID]
	if ev.Op == Alloc || ev.Op == SegmentAlloc {
		if isLive {
			return fmt.Errorf("%s %d allocated while live", what, ev.ID)
		}
		live[ev.ID] = ev.Size
		c.last, c.lastAt = ev.Time, at
		return nil
	}
	if !isLive {
		return fmt.Errorf("free of %s %d, which is not live", what, ev.ID)
	}
	if ev.Size != 0 && ev.Size != allocated {
		return fmt.Errorf("free of %s %d with size %d, but it was allocated with %d (a free's size is 0 or the allocated size)", what, ev.ID, ev.Size, allocated)
	}
	delete(live, ev.ID)
	ev.Size = 0
	c.last, c.lastAt = ev.Time, at
	return nil
}

// parser is Read's state between lines.
type parser struct {
	checker
	seen    bool // a header or an event has been read
	columns int  // 3, 4 or 6, once seen
	from    int  // the line that set columns
	tabs    bool // split on tabs only: the header names the queue and site columns
}

// parse parses one line, as read, with its newline. ok is false for a
// line with no event: blank, a comment or the header.
func (p *parser) parse(raw string, line int) (ev Event, ok bool, err error) {
	text := strings.TrimSpace(raw)
	if text == "" || strings.HasPrefix(text, "#") {
		return ev, false, nil
	}
	fields := strings.Fields(text)
	if !p.seen && fields[0] == "op" {
		switch {
		case slices.Equal(fields, header), slices.Equal(fields, timedHeader):
		case slices.Equal(fields, sitedHeader):
			p.tabs = true
		default:
			return ev, false, fmt.Errorf("header %s, want `op id size`, `op id size t` or `op id size t queue site`", shorten(text))
		}
		p.seen, p.columns, p.from = true, len(fields), line
		return ev, false, nil
	}
	if p.tabs {
		fields = strings.Split(strings.TrimRight(raw, "\r\n"), "\t")
		if len(fields) != p.columns {
			return ev, false, kindErrorf(ErrColumns, "%d tab-separated fields, but the header (line %d) names %d: op id size t queue site (a trace with sites is split on tabs only): %s", len(fields), p.from, p.columns, shorten(text))
		}
	} else {
		if len(fields) != 3 && len(fields) != 4 {
			hint := ""
			if len(fields) > 4 {
				hint = " (a trace with queue and site columns names them in its header)"
			}
			return ev, false, kindErrorf(ErrColumns, "want `op id size` or `op id size t`, got %d fields%s: %s", len(fields), hint, shorten(text))
		}
		if !p.seen {
			p.seen, p.columns, p.from = true, len(fields), line
		}
		if len(fields) != p.columns {
			return ev, false, kindErrorf(ErrColumns, "%d fields, but line %d has %d: a trace has a time on every event or on none", len(fields), p.from, p.columns)
		}
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
	if len(fields) >= 4 {
		ns, err := strconv.ParseInt(fields[3], 10, 64)
		if err != nil || ns < 0 {
			return ev, false, fmt.Errorf("time %s is not a non-negative integer (nanoseconds)", shorten(fields[3]))
		}
		ev.Time = time.Duration(ns)
	}
	if p.tabs {
		if q := fields[4]; q != "-" {
			n, err := strconv.ParseInt(q, 10, 0)
			if err != nil || n < 1 {
				return ev, false, fmt.Errorf("queue %s is neither a positive integer nor -", shorten(q))
			}
			ev.Queue = int(n)
		}
		if site := fields[5]; site != "-" {
			ev.Site = site
		}
	}
	if err := p.check(&ev, line); err != nil {
		return ev, false, err
	}
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

// Writer writes a trace, header first. It writes whole lines only: it
// keeps the lines in a buffer of its own and hands them to w, a number of
// whole lines in one Write call, when the buffer passes 64 KiB and at
// Flush, so that a program stopped between two of its writes leaves no
// line cut (ReadComplete refuses a cut one). It is not safe for
// concurrent use; wrap it in a lock to share it.
type Writer struct {
	w       io.Writer
	buf     []byte
	cols    int // 3, 4 or 6: the header's
	header  bool
	err     error   // the first error of w; every later call returns it
	checker checker // the events written, as Read will check them
	written int     // events written
}

// writeAt is the buffered bytes past which Write hands them to w.
const writeAt = 64 << 10

// NewWriter returns a Writer of the three-column format, `op id size`,
// to w; it leaves out the events' times. Call Flush when done.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w, cols: 3} }

// NewTimedWriter returns a Writer of the timed format, `op id size t`,
// to w, with each event's Time in nanoseconds. Call Flush when done.
func NewTimedWriter(w io.Writer) *Writer { return &Writer{w: w, cols: 4} }

// NewSitedWriter returns a Writer of the sited format, `op id size t
// queue site`, to w, with each event's Time, Queue (- for 0) and Site (-
// for ""; its tabs and line breaks written as spaces). A Site of "-" is
// the format's unknown site, as "" is: Read gives both back as "". Call
// Flush when done.
func NewSitedWriter(w io.Writer) *Writer { return &Writer{w: w, cols: 6} }

// Write writes one event, after the header if it is the first. An event
// Read would refuse, in the Writer's format and after the events written
// before it, is refused with an error, and nothing is written for it; the
// Writer stays usable. That is an unknown op; a negative size, or time or
// queue where the format has them; a time before the last event's; an
// allocation of a block (or segment) that is live, a free of one that is
// not, or a free whose size is neither 0 nor the allocated size.
func (t *Writer) Write(ev Event) error {
	if t.err != nil {
		return t.err
	}
	if t.cols < 4 {
		ev.Time = 0 // not written
	}
	if t.cols < 6 {
		ev.Queue = 0
	}
	err := ev.checkFields()
	if err == nil {
		if t.checker.liveSize == nil {
			t.checker = newChecker("event")
		}
		checked := ev // check sets a free's size to 0; the line keeps the size given
		err = t.checker.check(&checked, t.written+1)
	}
	if err != nil {
		return fmt.Errorf("trace: writing %c %d: %w", ev.Op, ev.ID, err)
	}
	t.written++
	if !t.header {
		t.header = true
		h := header
		switch t.cols {
		case 4:
			h = timedHeader
		case 6:
			h = sitedHeader
		}
		t.buf = append(t.buf, strings.Join(h, "\t")...)
		t.buf = append(t.buf, '\n')
	}
	t.buf = append(t.buf, byte(ev.Op), '\t')
	t.buf = strconv.AppendInt(t.buf, ev.ID, 10)
	t.buf = append(t.buf, '\t')
	t.buf = strconv.AppendInt(t.buf, ev.Size, 10)
	if t.cols >= 4 {
		t.buf = append(t.buf, '\t')
		t.buf = strconv.AppendInt(t.buf, ev.Time.Nanoseconds(), 10)
	}
	if t.cols == 6 {
		t.buf = append(t.buf, '\t')
		if ev.Queue == 0 {
			t.buf = append(t.buf, '-')
		} else {
			t.buf = strconv.AppendInt(t.buf, int64(ev.Queue), 10)
		}
		t.buf = append(t.buf, '\t')
		if ev.Site == "" {
			t.buf = append(t.buf, '-')
		} else {
			for i := 0; i < len(ev.Site); i++ {
				c := ev.Site[i]
				if c == '\t' || c == '\n' || c == '\r' {
					c = ' '
				}
				t.buf = append(t.buf, c)
			}
		}
	}
	t.buf = append(t.buf, '\n')
	if len(t.buf) >= writeAt {
		return t.Flush()
	}
	return nil
}

// Flush hands what is buffered, whole lines, to w in one Write call.
func (t *Writer) Flush() error {
	if t.err != nil {
		return t.err
	}
	if len(t.buf) == 0 {
		return nil
	}
	_, err := t.w.Write(t.buf)
	t.buf = t.buf[:0]
	if err != nil {
		t.err = fmt.Errorf("trace: writing: %w", err)
	}
	return t.err
}

// Summary is what a trace asks of an allocator, and, for a trace recorded
// from a pool, what the pool took from the device.
type Summary struct {
	Allocs, Frees int
	PeakLiveBytes int64 // the most bytes live at once; math.MaxInt64 if more
	Leaked        int   // blocks allocated and never freed
	Sizes         int   // distinct sizes allocated

	// The segments' events (SegmentAlloc and SegmentFree): the device
	// allocations and frees a recorded pool made, and the most bytes of
	// segments live at once: the pool's peak managed bytes, as its events
	// told them (saturating as PeakLiveBytes does; from several
	// goroutines, a segment being freed is live until its free's event,
	// which can take this peak past the pool's own, never past the
	// device's: see mempool.SegmentFree). Zero for a trace without them.
	SegmentAllocs, SegmentFrees int
	PeakSegmentBytes            int64
}

// Summarize counts a trace's events, its distinct sizes and its peak
// live bytes, and the same of its segments. The peak saturates at
// math.MaxInt64: a trace whose live bytes pass it (events built by hand,
// sizes near math.MaxInt64) reports math.MaxInt64, never a wrapped
// figure. The live bytes are kept exactly on the way, past math.MaxInt64
// too, so that the frees after such a peak bring them back down to the
// right figure. The counts are of events and cannot overflow.
func Summarize(events []Event) Summary {
	var s Summary
	blocks, segs := newTally(), newTally()
	distinct := map[int64]bool{}
	for _, ev := range events {
		switch ev.Op {
		case Alloc:
			blocks.alloc(ev)
			distinct[ev.Size] = true
		case Free:
			blocks.free(ev)
		case SegmentAlloc:
			segs.alloc(ev)
		case SegmentFree:
			segs.free(ev)
		}
	}
	s.Allocs, s.Frees, s.PeakLiveBytes = blocks.allocs, blocks.frees, blocks.peak
	s.SegmentAllocs, s.SegmentFrees, s.PeakSegmentBytes = segs.allocs, segs.frees, segs.peak
	s.Leaked, s.Sizes = len(blocks.sizes)+blocks.replaced, len(distinct)
	return s
}

// tally is Summarize's count of one kind of allocation (blocks, or
// segments): allocations, frees, the sizes of those live by ID, and the
// peak of their sum. An allocation of a live ID replaces its block, which
// stays live to the end (replaced counts them).
type tally struct {
	allocs, frees int
	sizes         map[int64]int64
	replaced      int
	live          wide
	peak          int64
}

func newTally() *tally { return &tally{sizes: map[int64]int64{}} }

func (t *tally) alloc(ev Event) {
	t.allocs++
	if _, live := t.sizes[ev.ID]; live {
		t.replaced++
	}
	t.sizes[ev.ID] = ev.Size
	t.live.add(ev.Size)
	t.peak = max(t.peak, t.live.saturated())
}

func (t *tally) free(ev Event) {
	t.frees++
	t.live.sub(t.sizes[ev.ID])
	delete(t.sizes, ev.ID)
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

// Replay runs the events of blocks through alloc and free, keeping each
// block's handle by id; it leaves out the segments' events, which are what
// the recorded pool did, not what the program asked. Blocks the trace
// leaves live are freed at the end, in id order. A free of a block that is
// not live, or an allocation of one that is, is an error (Check refuses
// both): free only ever gets a handle alloc returned. If alloc or free
// fails, or an event is refused, Replay frees the blocks live then, in id
// order, and returns the error (with theirs, if any); the error of the
// event is an *EventError, which gives its index in events.
func Replay[T any](events []Event, alloc func(size int64) (T, error), free func(T) error) error {
	live := make(map[int64]T, 64)
	err := replayEvents(events, live, alloc, free)
	ids := slices.Sorted(maps.Keys(live)) // in id order, so that replays are repeatable
	for _, id := range ids {
		if ferr := free(live[id]); ferr != nil {
			err = errors.Join(err, fmt.Errorf("trace: freeing block %d at the end: %w", id, ferr))
		}
	}
	return err
}

// EventError is Replay's error at an event: the event's index in the
// events replayed, and the error, which names the block.
type EventError struct {
	Index int
	Err   error
}

// Error is the error's, which names the block (not the index).
func (e *EventError) Error() string { return e.Err.Error() }

// Unwrap returns the error.
func (e *EventError) Unwrap() error { return e.Err }

// replayEvents is Replay's pass over the events: live holds the handles of
// the blocks live, at the end or at the first error.
func replayEvents[T any](events []Event, live map[int64]T, alloc func(size int64) (T, error), free func(T) error) error {
	for i, ev := range events {
		switch ev.Op {
		case Alloc:
			if _, ok := live[ev.ID]; ok {
				return &EventError{i, fmt.Errorf("trace: allocating block %d, which is live", ev.ID)}
			}
			h, err := alloc(ev.Size)
			if err != nil {
				return &EventError{i, fmt.Errorf("trace: allocating block %d (%d bytes): %w", ev.ID, ev.Size, err)}
			}
			live[ev.ID] = h
		case Free:
			h, ok := live[ev.ID]
			if !ok {
				return &EventError{i, fmt.Errorf("trace: freeing block %d, which is not live", ev.ID)}
			}
			delete(live, ev.ID)
			if err := free(h); err != nil {
				return &EventError{i, fmt.Errorf("trace: freeing block %d: %w", ev.ID, err)}
			}
		}
	}
	return nil
}
