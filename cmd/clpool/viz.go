package main

// This file is `clpool viz`: a trace or a pool snapshot drawn as one HTML
// page, in the manner of torch's memory_viz. The Go side works out the
// series and the segment map; the page's script (viz.html) draws them and
// finds their peaks, which it writes into the page for tests to read.

import (
	"bufio"
	"bytes"
	"cmp"
	_ "embed"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"html/template"
	"io"
	"math/bits"
	"os"
	"path/filepath"
	"slices"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/trace"
)

const vizUsage = `usage: clpool viz [flags] FILE

Draws FILE, an allocation trace (the format replay reads, with or without
a time column) or a pool snapshot (the JSON of mempool.Pool.Snapshot), as
one HTML page that opens offline, with
  1. the active bytes over time, stacked by size class;
  2. the managed bytes against the active bytes over time, peaks marked;
  3. the pool's segments and blocks at the peak of active bytes (a trace)
     or at the snapshot, colored by state; hover a block for its details.
A trace is replayed through a pool with no device (-policy), which gives
the managed bytes and the segments. A snapshot's plots 1 and 2 come from
its history, if it has one. The x axis is time if the events have times,
else the event's number.

flags:
`

// Limits on what the page draws, to keep it small and quick for any input.
const (
	maxPoints = 2000 // points of the timelines; more events are sampled at their peaks
	maxLayers = 10   // size classes stacked; the smallest classes beyond are one layer
)

// bigInput is the size, in bytes read or events replayed, past which viz
// shows its progress on a terminal.
const bigInput = 1 << 20

//go:embed viz.html
var vizHTML string

var vizTemplate = template.Must(template.New("viz").Parse(vizHTML))

// page is everything the HTML page draws. Its script reads it as JSON.
type page struct {
	Title  string   `json:"title"`  // the input file's name
	Source string   `json:"source"` // "trace" or "snapshot"
	Policy string   `json:"policy"` // the pool's: "arena" or "bins"
	Events int      `json:"events"` // events behind the timelines
	Timed  bool     `json:"timed"`  // X is in nanoseconds; otherwise it counts events
	Notes  []string `json:"notes"`  // said above the plots

	// The timelines: point i is the moment X[i], just after an event, with
	// Layers[k].Bytes[i] active bytes of layer k and Managed[i] managed
	// bytes. Point 0 is before the first event. When there are more
	// events than points, each point is the event of most active bytes
	// among those it stands for, so the peaks are all there.
	X         []int64 `json:"x"`
	StackedBy string  `json:"stacked_by"`
	Layers    []layer `json:"layers"`
	Managed   []int64 `json:"managed,omitempty"` // nil when unknown (a snapshot)

	Map segmentMap `json:"map"`
}

// layer is one band of the stacked timeline.
type layer struct {
	Name  string  `json:"name"`
	Bytes []int64 `json:"bytes"`
}

// segmentMap is the pool's memory at one moment: plot 3, and a point
// marked on the timelines.
type segmentMap struct {
	Caption      string `json:"caption"` // what moment it is
	X            int64  `json:"x"`       // the moment on the timelines; -1 if it is not on them
	ManagedBytes int64  `json:"managed_bytes"`
	ActiveBytes  int64  `json:"active_bytes"`
	IDs          string `json:"ids"` // what the blocks' ids are
	// Segments are the snapshot's, with each active block's ID replaced by
	// the trace's id for it when the input is a trace.
	Segments []mempool.SegmentSnapshot `json:"segments"`
}

// vizCmd runs `clpool viz`.
func vizCmd(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("viz", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, vizUsage); fs.PrintDefaults() }
	out := fs.String("o", "mem.html", "the HTML file to write")
	policy := fs.String("policy", "arena", "the pool a trace is replayed through: arena or bins")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("want one trace or snapshot file")
	}
	if *policy != "arena" && *policy != "bins" {
		return fmt.Errorf("-policy %q: want arena or bins", *policy)
	}
	if *out == "" {
		return errors.New("-o: want a file name")
	}
	prog := newProgress(stderr)
	pg, err := loadPage(fs.Arg(0), *policy, prog)
	prog.done()
	if err != nil {
		return err
	}
	if err := writePage(*out, pg); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "%s: %d events, peak %s active, peak %s managed; wrote %s\n",
		fs.Arg(0), pg.Events, formatBytes(pg.peakActive()), formatBytes(pg.peakManaged()), *out)
	return nil
}

// loadPage reads the trace or snapshot at path and works out its page. A
// file whose first character other than white space is '{' is a
// snapshot; any other, a trace.
func loadPage(path, policy string, prog *progress) (page, error) {
	f, err := os.Open(path)
	if err != nil {
		return page{}, err
	}
	defer f.Close()
	var r io.Reader = f
	if st, err := f.Stat(); err == nil && st.Size() >= bigInput {
		r = &progressReader{r: f, prog: prog, phase: "reading", total: st.Size()}
	}
	br := bufio.NewReader(r)
	head, _ := br.Peek(512) // an error here is the reader's, and reading below sees it again
	if bytes.HasPrefix(bytes.TrimLeft(head, " \t\r\n"), []byte("{")) {
		var s mempool.Snapshot
		if err := json.NewDecoder(br).Decode(&s); err != nil {
			return page{}, fmt.Errorf("%s: reading the snapshot: %w", path, err)
		}
		pg, err := snapshotPage(s)
		if err != nil {
			return page{}, fmt.Errorf("%s: %w", path, err)
		}
		pg.Title = filepath.Base(path)
		return pg, nil
	}
	events, err := parseTrace(br, path)
	if err != nil {
		return page{}, err
	}
	if len(events) == 0 {
		return page{}, fmt.Errorf("%s: the trace has no events", path)
	}
	pg, err := tracePage(events, policy, prog)
	if err != nil {
		return page{}, fmt.Errorf("%s: %w", path, err)
	}
	pg.Title = filepath.Base(path)
	return pg, nil
}

// writePage writes pg's HTML to the file path.
func writePage(path string, pg page) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	err = vizTemplate.Execute(w, pg)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// nothing is an allocator that hands out no memory, for a pool that only
// keeps accounts: the pool never touches its buffers.
type nothing struct{}

func (nothing) Allocate(int64) (*cl.Buffer, error) { return nil, nil }
func (nothing) Free(*cl.Buffer) error              { return nil }

var _ allocator.Allocator = nothing{}

// tracePage replays events through a pool of the policy over nothing,
// noting the managed bytes after each event and taking the pool's snapshot
// just after the first event that reaches the trace's peak of live bytes.
func tracePage(events []trace.Event, policy string, prog *progress) (page, error) {
	opts := []mempool.Option{
		mempool.WithDropSafety(false), // no finalizers: viz drops no buffer while the pool is in use
		mempool.WithLimit(0),          // no limit, whatever CLPOOL_MEMORY_LIMIT says
	}
	if policy == "arena" {
		opts = append(opts, mempool.WithArena())
	}
	pool, err := mempool.New(nothing{}, opts...)
	if err != nil {
		return page{}, err
	}
	peak := trace.Summarize(events).PeakLiveBytes
	tl := newTimeline(len(events), trace.Timed(events))
	live := map[int64]*mempool.PooledBuffer{}
	var at mempool.Snapshot
	var atEvent int // the event after which at was taken, from 1; 0 until then
	var atX int64   // its moment on the timelines
	for i, ev := range events {
		switch ev.Op {
		case trace.Alloc:
			b, err := pool.Allocate(ev.Size)
			if err != nil {
				return page{}, fmt.Errorf("replaying event %d, allocating block %d (%d bytes): %w", i+1, ev.ID, ev.Size, err)
			}
			live[ev.ID] = b
		case trace.Free:
			if err := live[ev.ID].Close(); err != nil {
				return page{}, fmt.Errorf("replaying event %d, freeing block %d: %w", i+1, ev.ID, err)
			}
			delete(live, ev.ID)
		}
		x := tl.add(ev, pool.ManagedBytes())
		if atEvent == 0 && tl.live == peak {
			at, atX, atEvent = pool.Snapshot(), x, i+1
			useTraceIDs(at.Segments, live)
		}
		if len(events) >= bigInput {
			prog.count("replaying", int64(i+1), int64(len(events)))
		}
	}
	// The blocks the trace leaves live hold no memory: they go with the
	// pool, unclosed.
	if err := pool.Close(); err != nil {
		return page{}, err
	}

	pg := tl.page()
	pg.Source, pg.Policy = "trace", policy
	pg.Map = segmentMap{
		Caption:      fmt.Sprintf("at the peak of active bytes, just after %s", tl.moment(atEvent, atX)),
		X:            atX,
		ManagedBytes: at.ManagedBytes,
		ActiveBytes:  at.ActiveBytes,
		IDs:          "the trace's block ids",
		Segments:     at.Segments,
	}
	pg.Notes = append(pg.Notes, fmt.Sprintf("The managed bytes and the segments are those of a pool (policy %s) that the trace was replayed through, with no device.", policy))
	return pg, nil
}

// useTraceIDs replaces the ID of each active block in segs, the
// PooledBuffer's, with the trace's id for it, which is what the trace's
// reader knows it by.
func useTraceIDs(segs []mempool.SegmentSnapshot, live map[int64]*mempool.PooledBuffer) {
	traceID := make(map[uint64]int64, len(live))
	for id, b := range live {
		traceID[b.ID()] = id
	}
	for _, seg := range segs {
		for j := range seg.Blocks {
			if b := &seg.Blocks[j]; b.State == mempool.StateActive {
				b.ID = uint64(traceID[b.ID])
			}
		}
	}
}

// snapshotPage works out the page of a snapshot: its history, if any, for
// the timelines, and its segments for the map.
func snapshotPage(s mempool.Snapshot) (page, error) {
	if s.Policy == "" || s.Segments == nil {
		return page{}, errors.New("a JSON object, but not a pool snapshot: it has no policy or no segments")
	}
	for _, seg := range s.Segments {
		var end int64
		for _, b := range seg.Blocks {
			if b.State != mempool.StateActive && b.State != mempool.StateHeld && b.State != mempool.StateInactiveSplit {
				return page{}, fmt.Errorf("segment %d: block at offset %d: unknown state %q", seg.ID, b.Offset, b.State)
			}
			if b.Offset != end || b.Size <= 0 {
				return page{}, fmt.Errorf("segment %d: block at offset %d of %d bytes: the blocks do not tile the segment", seg.ID, b.Offset, b.Size)
			}
			end += b.Size
		}
		if end != seg.Size {
			return page{}, fmt.Errorf("segment %d: its blocks cover %d of its %d bytes", seg.ID, end, seg.Size)
		}
	}

	// The history's first events can be frees of blocks allocated before
	// it began: their sizes are unknown, so they are left out.
	known := map[int64]bool{}
	var events []trace.Event
	for _, ev := range s.History {
		if ev.Op == trace.Alloc {
			known[ev.ID] = true
		} else if !known[ev.ID] {
			continue
		}
		events = append(events, ev)
	}
	tl := newTimeline(len(events), trace.Timed(events))
	for _, ev := range events {
		tl.add(ev, 0)
	}
	pg := tl.page()
	pg.Source, pg.Policy = "snapshot", s.Policy
	pg.Managed = nil // a snapshot has its own managed bytes only
	pg.Map = segmentMap{
		Caption:      "at the snapshot, " + s.Time.Format("2006-01-02 15:04:05 MST"),
		X:            -1,
		ManagedBytes: s.ManagedBytes,
		ActiveBytes:  s.ActiveBytes,
		IDs:          "the PooledBuffers' IDs",
		Segments:     s.Segments,
	}
	if s.Device != "" {
		pg.Map.Caption += ", on " + s.Device
	}
	if len(events) == 0 {
		pg.Notes = append(pg.Notes, "The snapshot has no history, so plots 1 and 2 show only its own moment. Register a memhooks.History on the pool before taking the snapshot to see what led up to it.")
		return pg, nil
	}
	pg.Map.X = tl.x
	pg.Notes = append(pg.Notes,
		fmt.Sprintf("Plots 1 and 2 are the snapshot's history, its last %d events: they count only the blocks allocated within it (%d frees of blocks allocated before it are left out). The managed bytes are known only at the snapshot, drawn at the history's end.", len(events), len(s.History)-len(events)))
	return pg, nil
}

// timeline builds the page's timelines one event at a time. For n events
// it keeps at most maxPoints points: each stands for a run of events and
// is the one of them with the most live bytes, with the most managed
// bytes among them.
type timeline struct {
	timed bool
	per   int // events a point stands for

	// The running state: the event count, x, live bytes in all and per
	// size class, and the size of each live block.
	n       int
	x       int64
	live    int64
	byClass [65]int64
	sizes   map[int64]int64

	// The point being filled: its events so far, and the best of them.
	inPoint int
	best    point

	points []point
}

// point is one point of the timelines.
type point struct {
	x       int64
	live    int64
	managed int64
	byClass [65]int64
}

func newTimeline(events int, timed bool) *timeline {
	tl := &timeline{timed: timed, per: max(1, (events+maxPoints-1)/maxPoints), sizes: map[int64]int64{}}
	tl.points = append(tl.points, point{}) // before the first event, at time or event 0
	tl.best.live = -1
	return tl
}

// add applies ev, after which the pool manages managed bytes, and returns
// the moment just after it.
func (tl *timeline) add(ev trace.Event, managed int64) int64 {
	tl.n++
	tl.x = int64(tl.n)
	if tl.timed {
		tl.x = int64(ev.Time)
	}
	switch ev.Op {
	case trace.Alloc:
		tl.sizes[ev.ID] = ev.Size
		tl.live += ev.Size
		tl.byClass[sizeClass(ev.Size)] += ev.Size
	case trace.Free:
		size := tl.sizes[ev.ID]
		delete(tl.sizes, ev.ID)
		tl.live -= size
		tl.byClass[sizeClass(size)] -= size
	}
	if tl.live > tl.best.live {
		tl.best = point{x: tl.x, live: tl.live, managed: tl.best.managed, byClass: tl.byClass}
	}
	tl.best.managed = max(tl.best.managed, managed)
	tl.inPoint++
	if tl.inPoint == tl.per {
		tl.flush()
	}
	return tl.x
}

// flush ends the point being filled.
func (tl *timeline) flush() {
	if tl.inPoint > 0 {
		tl.points = append(tl.points, tl.best)
	}
	tl.inPoint = 0
	tl.best = point{live: -1}
}

// moment names the moment just after event n (counting from 1), at x on
// the timeline, for people.
func (tl *timeline) moment(n int, x int64) string {
	if tl.timed {
		return fmt.Sprintf("event %d, at %s", n, formatNs(x))
	}
	return fmt.Sprintf("event %d", n)
}

// page returns the page's timelines. The size classes beyond maxLayers-1
// that hold the fewest bytes at their peaks become one layer.
func (tl *timeline) page() page {
	tl.flush()
	pg := page{Events: tl.n, Timed: tl.timed, StackedBy: "size class", Layers: []layer{}}
	var classes []int // the classes that ever held bytes
	peakOf := func(c int) int64 {
		var m int64
		for _, p := range tl.points {
			m = max(m, p.byClass[c])
		}
		return m
	}
	for c := range 65 {
		if peakOf(c) > 0 {
			classes = append(classes, c)
		}
	}
	// The largest sizes first, at the bottom of the stack.
	slices.Reverse(classes)
	var rest []int
	if len(classes) > maxLayers {
		byPeak := slices.Clone(classes)
		slices.SortStableFunc(byPeak, func(a, b int) int { return cmp.Compare(peakOf(b), peakOf(a)) })
		drop := byPeak[maxLayers-1:]
		classes = slices.DeleteFunc(classes, func(c int) bool { return slices.Contains(drop, c) })
		rest = drop
	}
	for _, c := range classes {
		l := layer{Name: sizeClassName(c)}
		for _, p := range tl.points {
			l.Bytes = append(l.Bytes, p.byClass[c])
		}
		pg.Layers = append(pg.Layers, l)
	}
	if len(rest) > 0 {
		l := layer{Name: fmt.Sprintf("%d other size classes", len(rest))}
		for _, p := range tl.points {
			var sum int64
			for _, c := range rest {
				sum += p.byClass[c]
			}
			l.Bytes = append(l.Bytes, sum)
		}
		pg.Layers = append(pg.Layers, l)
	}
	for _, p := range tl.points {
		pg.X = append(pg.X, p.x)
		pg.Managed = append(pg.Managed, p.managed)
	}
	if tl.per > 1 {
		pg.Notes = append(pg.Notes, fmt.Sprintf("The timelines have a point for every %d events: the one of them with the most active bytes (and the most managed bytes among them), so the peaks are exact.", tl.per))
	}
	return pg
}

// peakActive returns the most active bytes the page shows: on the
// timeline or at the map's moment.
func (pg page) peakActive() int64 {
	peak := pg.Map.ActiveBytes
	for i := range pg.X {
		var sum int64
		for _, l := range pg.Layers {
			sum += l.Bytes[i]
		}
		peak = max(peak, sum)
	}
	return peak
}

// peakManaged returns the most managed bytes the page shows: on the
// timeline or at the map's moment.
func (pg page) peakManaged() int64 {
	return max(pg.Map.ManagedBytes, slices.Max(append([]int64{0}, pg.Managed...)))
}

// sizeClass returns the power-of-two class of size: class c holds the
// sizes over 2^(c-1) up to 2^c; class 0 holds 0 and 1.
func sizeClass(size int64) int {
	if size <= 1 {
		return 0
	}
	return bits.Len64(uint64(size - 1))
}

// sizeClassName names class c, as "(256 KiB, 512 KiB]".
func sizeClassName(c int) string {
	if c == 0 {
		return "≤ 1 B"
	}
	return fmt.Sprintf("(%s, %s]", formatBytes(int64(1)<<(c-1)), formatBytes(int64(1)<<c))
}

// formatBytes writes n bytes with a binary unit, as "1.5 MiB".
func formatBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		v /= unit
		if v < unit && v > -unit || u == "TiB" {
			return fmt.Sprintf("%.4g %s", v, u)
		}
	}
	panic("unreachable")
}

// formatNs writes a time in nanoseconds with a unit, as "12.5 ms".
func formatNs(ns int64) string {
	switch {
	case ns < 1e3:
		return fmt.Sprintf("%d ns", ns)
	case ns < 1e6:
		return fmt.Sprintf("%.4g µs", float64(ns)/1e3)
	case ns < 1e9:
		return fmt.Sprintf("%.4g ms", float64(ns)/1e6)
	}
	return fmt.Sprintf("%.4g s", float64(ns)/1e9)
}

// progressReader reports on prog how much of total bytes have been read
// through it.
type progressReader struct {
	r     io.Reader
	prog  *progress
	phase string
	n     int64
	total int64
}

func (r *progressReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.n += int64(n)
	r.prog.count(r.phase, r.n, r.total)
	return n, err
}
