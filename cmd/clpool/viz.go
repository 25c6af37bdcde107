package main

// This file is `clpool viz`: a trace or a pool snapshot drawn as one HTML
// page, in the manner of torch's memory_viz. The Go side lists the
// allocations, the moments they happen at, the managed bytes and how the
// pool's segments change at each moment; the page's script (viz.html)
// stacks the allocations into bands, groups them and draws everything.

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
	"maps"
	"math"
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
the time, queue and site columns) or a pool snapshot (the JSON of
mempool.Pool.Snapshot), as one HTML page that opens offline, with
  1. the active memory over time, each allocation a band from its
     allocation to its free, stacked as torch's memory_viz stacks them and
     colored by call site (by size class if the trace has no sites), with
     the managed bytes over them; hover a band for its id, size, queue,
     site, allocation and free, click it to pin it;
  2. the active bytes over time grouped by call site and by queue, each
     group's peak marked;
  3. the pool's segments and blocks (active, cached, inactive split) at any
     moment of a trace, chosen with a scrubber, or at the snapshot.
Drag across a plot to zoom in, shift-drag or scroll sideways to pan,
double-click to zoom out. A trace is replayed through a pool with no
device (-policy; no limit and no sanitizer, whatever CLPOOL_MEMORY_LIMIT
and CLPOOL_SANITIZE say), which gives the segments, and the managed bytes
if the trace has no segment events (A and F): with no device, blocks are
aligned to 4 KiB (a device's pool aligns them to the device's base-address
alignment and at least 512 bytes: 512 on POCL, whose alignment is 128), so
those managed bytes can differ from what replay and plan report for the
same trace. A snapshot's plots 1 and 2 come from its history, if it has
one, checked as a trace is. The x axis is time if the events have times,
else the event's number. Ids past ±(2^53-1), which the page cannot tell
apart, are refused.

flags:
`

// bigInput is the size, in bytes read or events replayed, past which viz
// shows its progress on a terminal.
const bigInput = 1 << 20

//go:embed viz.html
var vizHTML string

var vizTemplate = template.Must(template.New("viz").Parse(vizHTML))

// page is everything the HTML page draws. Its script reads it as JSON.
//
// Time is counted in moments: moment 0 is before the first event, moment
// k just after event k, for k from 1 to Events. Moment k lasts from X[k]
// to X[k+1], and the last one to End.
type page struct {
	Title  string   `json:"title"`  // the input file's name
	Source string   `json:"source"` // "trace" or "snapshot"
	Policy string   `json:"policy"` // the pool's: "arena" or "bins"
	Events int      `json:"events"` // events: allocations and frees of blocks and of segments
	Timed  bool     `json:"timed"`  // X is in nanoseconds; otherwise it counts events
	Notes  []string `json:"notes"`  // said above the plots

	// X[k] is where moment k starts on the time axis, in nanoseconds; nil
	// when the events have no times, and moment k starts at k. End is
	// where the axis ends, a moment's length after the last event, so
	// that the last state has a width.
	X   []int64 `json:"x,omitempty"`
	End int64   `json:"end"`

	Allocs allocTable `json:"allocs"`
	Sites  []string   `json:"sites"`  // the sites the allocations name; Sites[0] is "", none
	Queues int        `json:"queues"` // the largest queue number an allocation has; 0 if none has one

	// Managed is the managed bytes over time as pairs of a moment and the
	// bytes from it on, in order; nil when only the map's moment is known
	// (a snapshot). ManagedFrom says where it comes from: "trace" (the
	// pool's own segments, recorded in the trace) or "replay".
	Managed     []int64 `json:"managed,omitempty"`
	ManagedFrom string  `json:"managed_from"`

	PeakActive  peak `json:"peak_active"`
	PeakManaged peak `json:"peak_managed"`

	Map segmentMap `json:"map"`

	// Steps is how the replayed pool's segments change at each moment of
	// a trace, from none at moment 0; nil for a snapshot, whose segments
	// are known at its moment only.
	Steps *steps `json:"steps,omitempty"`
}

// allocTable is the allocations, one column a field, in the order of
// their allocation: the allocation i is the block ID[i] of Size[i] bytes,
// allocated at moment A[i] (0: before the first event, in a snapshot's
// history) and freed at moment F[i] (0: never, within the events), at the
// sites Sites[Site[i]] and Sites[FreeSite[i]], on queue Queue[i] (0: none
// or not known).
type allocTable struct {
	ID       []int64 `json:"id"`
	Size     []int64 `json:"size"`
	A        []int   `json:"a"`
	F        []int   `json:"f"`
	Site     []int   `json:"site,omitempty"` // the three are left out when all are 0
	FreeSite []int   `json:"free_site,omitempty"`
	Queue    []int   `json:"queue,omitempty"`
}

// peak is a peak of bytes, and when it was reached.
type peak struct {
	Bytes  int64  `json:"bytes"`
	Moment int    `json:"moment"` // the first moment at it; -1 if not known
	Note   string `json:"note,omitempty"`
}

// segmentMap is the pool's memory at one moment, the map's first.
type segmentMap struct {
	Caption      string `json:"caption"` // what moment it is
	Moment       int    `json:"moment"`  // the moment; -1 if it is after the events (a snapshot)
	ManagedBytes int64  `json:"managed_bytes"`
	ActiveBytes  int64  `json:"active_bytes"`
	IDs          string `json:"ids"` // what the blocks' ids are
	// Segments are the snapshot's, with each active block's ID replaced by
	// the trace's id for it when the input is a trace.
	Segments []pageSegment `json:"segments"`
}

// pageSegment is a mempool.SegmentSnapshot as the page has it: its
// blocks' ids are signed, as the trace's are (a trace may number its
// blocks from 0, or below), and 0 is written out, not left out.
type pageSegment struct {
	ID     int64       `json:"id"`
	Size   int64       `json:"size"`
	Small  bool        `json:"small"`
	Blocks []pageBlock `json:"blocks"`
}

// pageBlock is a mempool.BlockSnapshot as the page has it: ID is the
// active block's id, the trace's or the PooledBuffer's; 0 for a block
// that is not active.
type pageBlock struct {
	Offset    int64  `json:"offset"`
	Size      int64  `json:"size"`
	Requested int64  `json:"requested,omitempty"`
	State     string `json:"state"`
	Queue     int    `json:"queue,omitempty"`
	ID        int64  `json:"block_id"`
	Site      string `json:"site,omitempty"`
}

// pageSegments returns segs as the page has them, with the ID of each
// active block mapped by id; never nil.
func pageSegments(segs []mempool.SegmentSnapshot, id func(uint64) int64) []pageSegment {
	out := make([]pageSegment, len(segs))
	for i, seg := range segs {
		blocks := make([]pageBlock, len(seg.Blocks))
		for j, b := range seg.Blocks {
			blocks[j] = pageBlock{Offset: b.Offset, Size: b.Size, Requested: b.Requested, State: b.State, Queue: b.Queue, Site: b.Site}
			if b.State == mempool.StateActive {
				blocks[j].ID = id(b.ID)
			}
		}
		out[i] = pageSegment{ID: seg.ID, Size: seg.Size, Small: seg.Small, Blocks: blocks}
	}
	return out
}

// maxPageID is the largest id, and -maxPageID the least, that the page
// holds: its script's numbers are float64, which tell integers apart only
// up to 2^53. viz refuses a trace or snapshot with an id past them, which
// the page would merge with another.
const maxPageID = 1<<53 - 1

// maxPageQueue is the largest queue number the page holds: its script
// keeps them in an Int32Array. viz refuses a larger one, which the page
// would draw as another queue.
const maxPageQueue = 1<<31 - 1

// checkPageQueue returns an error if the page cannot draw queue q (0:
// none) as it is: a negative one, or one past maxPageQueue.
func checkPageQueue(q int) error {
	if q < 0 || q > maxPageQueue {
		return fmt.Errorf("queue %d is past 0 to 2^31-1, the queues the page draws", q)
	}
	return nil
}

// checkPageID returns an error if the page cannot hold id, of a what
// ("block" or "segment"), apart from its neighbours; nil if it can.
func checkPageID[T int64 | uint64](what string, id T) error {
	if id > maxPageID || id < 0 && int64(id) < -maxPageID {
		return fmt.Errorf("%s id %d is past ±(2^53-1), the largest the page's script tells apart from the next: number the %ss closer to 0", what, id, what)
	}
	return nil
}

// steps lists how the segments change: Count[k] changes at moment k, in
// order, each five numbers of Ops: segment, offset, size, what, id. What
// is one of the step constants: for a block, its new state at offset
// (stepActive with the trace's id of its allocation, of the block's size)
// or its removal; for a segment, its allocation (of size bytes, with id 1
// if it is of the small pool) or its release.
type steps struct {
	Count []int   `json:"count"`
	Ops   []int64 `json:"ops"`
}

// The changes a step names.
const (
	stepRemove       = 0
	stepActive       = 1
	stepHeld         = 2
	stepInactive     = 3
	stepSegmentNew   = 4
	stepSegmentFreed = 5
)

var stepOfState = map[string]int64{
	mempool.StateActive:        stepActive,
	mempool.StateHeld:          stepHeld,
	mempool.StateInactiveSplit: stepInactive,
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
	if in, err := os.Stat(fs.Arg(0)); err == nil {
		if o, err := os.Stat(*out); err == nil && os.SameFile(in, o) {
			return fmt.Errorf("-o %s is the input: the page would replace it", *out)
		}
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
		fs.Arg(0), pg.Events, formatBytes(pg.PeakActive.Bytes), formatBytes(pg.PeakManaged.Bytes), *out)
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
	// The white space before the first other character, however long,
	// is read here and handed back to a trace's parser (its line numbers
	// count those lines).
	var space []byte
	for {
		c, err := br.ReadByte()
		if err != nil {
			break // the reader's error: reading below sees it again
		}
		if c != ' ' && c != '\t' && c != '\r' && c != '\n' {
			_ = br.UnreadByte() // the byte just read: cannot fail
			break
		}
		space = append(space, c)
	}
	if head, _ := br.Peek(1); len(head) == 1 && head[0] == '{' {
		var s snapshotFile
		dec := json.NewDecoder(br)
		if err := dec.Decode(&s); err != nil {
			return page{}, fmt.Errorf("%s: reading the snapshot: %w", path, err)
		}
		if _, err := dec.Token(); err != io.EOF {
			return page{}, fmt.Errorf("%s: more after the snapshot (one snapshot a file; a trace's lines are not JSON)", path)
		}
		pg, err := snapshotPage(s)
		if err != nil {
			return page{}, fmt.Errorf("%s: %w", path, err)
		}
		pg.Title = filepath.Base(path)
		return pg, nil
	}
	events, err := parseTrace(io.MultiReader(bytes.NewReader(space), br), path)
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

// snapshotFile is a snapshot's JSON. The pool's peaks are pointers, nil
// in a snapshot written before they were part of it.
type snapshotFile struct {
	mempool.Snapshot
	PeakManagedBytes *int64 `json:"peak_managed_bytes"`
	PeakActiveBytes  *int64 `json:"peak_active_bytes"`
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

// pageBuilder gathers a page's allocations, sites and moments.
type pageBuilder struct {
	pg     page
	siteOf map[string]int
	index  map[int64]int // a live block's id -> its allocation
}

func newPageBuilder(events int, timed bool) *pageBuilder {
	b := &pageBuilder{siteOf: map[string]int{"": 0}, index: map[int64]int{}}
	b.pg.Events, b.pg.Timed, b.pg.Sites = events, timed, []string{""}
	if timed {
		b.pg.X = make([]int64, 1, events+1)
	}
	return b
}

func (b *pageBuilder) site(s string) int {
	i, ok := b.siteOf[s]
	if !ok {
		i = len(b.pg.Sites)
		b.siteOf[s] = i
		b.pg.Sites = append(b.pg.Sites, s)
	}
	return i
}

// alloc adds an allocation of block id at moment k.
func (b *pageBuilder) alloc(id, size int64, k int, site string, queue int) {
	t := &b.pg.Allocs
	b.index[id] = len(t.ID)
	t.ID, t.Size, t.A, t.F = append(t.ID, id), append(t.Size, size), append(t.A, k), append(t.F, 0)
	t.Site, t.FreeSite, t.Queue = append(t.Site, b.site(site)), append(t.FreeSite, 0), append(t.Queue, queue)
	b.pg.Queues = max(b.pg.Queues, queue)
}

// free notes the free of block id at moment k, and reports whether the
// block was live.
func (b *pageBuilder) free(id int64, k int, site string) bool {
	i, ok := b.index[id]
	if !ok {
		return false
	}
	delete(b.index, id)
	b.pg.Allocs.F[i], b.pg.Allocs.FreeSite[i] = k, b.site(site)
	return true
}

// finish sets the axis's end, a moment's length past the last: one event,
// or the events' mean spacing.
func (b *pageBuilder) finish() page {
	pg := b.pg
	if t := &pg.Allocs; !slices.ContainsFunc(t.Site, nonzero) && !slices.ContainsFunc(t.FreeSite, nonzero) && !slices.ContainsFunc(t.Queue, nonzero) {
		t.Site, t.FreeSite, t.Queue = nil, nil, nil
	}
	if !pg.Timed {
		pg.End = int64(pg.Events + 1)
		return pg
	}
	first, last := pg.X[min(1, len(pg.X)-1)], pg.X[len(pg.X)-1]
	step := max(1, (last-first)/int64(max(1, pg.Events-1)))
	pg.End = last + min(step, math.MaxInt64-last) // saturated at the last time an int64 holds, not wrapped
	return pg
}

func nonzero(v int) bool { return v != 0 }

// tracePage replays events through a pool of the policy over nothing,
// noting how its segments change at each event and taking its snapshot
// just after the first event that reaches the trace's peak of live
// bytes.
func tracePage(events []trace.Event, policy string, prog *progress) (page, error) {
	opts := append(unaffectedByEnv(),
		mempool.WithDropSafety(false), // no finalizers: viz drops no buffer while the pool is in use
	)
	if policy == "arena" {
		opts = append(opts, mempool.WithArena())
	}
	pool, err := mempool.New(nothing{}, opts...)
	if err != nil {
		return page{}, err
	}
	b := newPageBuilder(len(events), trace.Timed(events))
	st := &steps{Count: make([]int, 1, len(events)+1), Ops: []int64{}}
	var d differ
	live := map[int64]*mempool.PooledBuffer{}
	traceID := map[uint64]int64{} // a live PooledBuffer's ID -> the trace's id for it
	idOf := func(id uint64) int64 { return traceID[id] }

	var (
		liveBytes, peakLive  bytesSum
		segBytes, peakSegSum bytesSum // the trace's segments' managed bytes, which may pass 2^63
		peakAt               = -1
		at                   mempool.Snapshot
		atSegments           = []pageSegment{} // at's, with the trace's ids
		segments             bool              // the trace has segment events
		segLive              = map[int64]int64{}
		replayed             int64 // the replayed pool's managed bytes
		trManaged, rpManaged []int64
		peakSeg, peakReplay  peak
	)
	peakSeg.Moment, peakReplay.Moment = -1, -1
	for i, ev := range events {
		k := i + 1
		if b.pg.Timed {
			b.pg.X = append(b.pg.X, int64(ev.Time))
		}
		changed := true
		switch ev.Op {
		case trace.Alloc:
			if err := cmp.Or(checkPageID("block", ev.ID), checkPageQueue(ev.Queue)); err != nil {
				return page{}, fmt.Errorf("event %d: %w", k, err)
			}
			pb, err := pool.Allocate(ev.Size)
			if err != nil {
				return page{}, fmt.Errorf("replaying event %d, allocating block %d (%d bytes): %w", k, ev.ID, ev.Size, err)
			}
			live[ev.ID], traceID[pb.ID()] = pb, ev.ID
			b.alloc(ev.ID, ev.Size, k, ev.Site, ev.Queue)
			liveBytes.add(ev.Size)
		case trace.Free:
			pb := live[ev.ID]
			delete(traceID, pb.ID())
			if err := pb.Close(); err != nil {
				return page{}, fmt.Errorf("replaying event %d, freeing block %d: %w", k, ev.ID, err)
			}
			delete(live, ev.ID)
			liveBytes.sub(b.pg.Allocs.Size[b.index[ev.ID]])
			b.free(ev.ID, k, ev.Site)
		case trace.SegmentAlloc, trace.SegmentFree:
			segments, changed = true, false
			if ev.Op == trace.SegmentAlloc {
				segLive[ev.ID] = ev.Size
				segBytes.add(ev.Size)
			} else {
				segBytes.sub(segLive[ev.ID])
				delete(segLive, ev.ID)
			}
			trManaged = append(trManaged, int64(k), segBytes.bytes())
			if segBytes.more(peakSegSum) {
				peakSegSum, peakSeg = segBytes, peak{Bytes: segBytes.bytes(), Moment: k}
			}
		default:
			changed = false
		}
		if !changed {
			st.Count = append(st.Count, 0)
			continue
		}
		snap := pool.Snapshot()
		segs := pageSegments(snap.Segments, idOf)
		n := d.diff(segs, &st.Ops)
		st.Count = append(st.Count, n)
		if snap.ManagedBytes != replayed {
			replayed = snap.ManagedBytes
			rpManaged = append(rpManaged, int64(k), replayed)
			if replayed > peakReplay.Bytes {
				peakReplay = peak{Bytes: replayed, Moment: k}
			}
		}
		if liveBytes.more(peakLive) || peakAt < 0 {
			peakLive, peakAt, at, atSegments = liveBytes, k, snap, segs
		}
		if len(events) >= bigInput {
			prog.count("replaying", int64(k), int64(len(events)))
		}
	}
	// The blocks the trace leaves live hold no memory: they go with the
	// pool, unclosed.
	if err := pool.Close(); err != nil {
		return page{}, err
	}

	pg := b.finish()
	pg.Source, pg.Policy, pg.Steps = "trace", policy, st
	if peakAt < 0 { // a trace of segment events only
		peakAt = 0
	}
	pg.PeakActive = peak{Bytes: peakLive.bytes(), Moment: peakAt}
	if segments {
		pg.Managed, pg.ManagedFrom, pg.PeakManaged = trManaged, "trace", peakSeg
		pg.Notes = append(pg.Notes, fmt.Sprintf("The managed bytes are the pool's own, from the trace's segment events. The segment map is that of a pool (policy %s) the trace's blocks were replayed through, with no device.", policy))
	} else {
		pg.Managed, pg.ManagedFrom, pg.PeakManaged = rpManaged, "replay", peakReplay
		pg.Notes = append(pg.Notes, fmt.Sprintf("The managed bytes and the segments are those of a pool (policy %s) that the trace was replayed through, with no device: the trace has no segment events.", policy))
	}
	if pg.Managed == nil {
		pg.Managed = []int64{}
	}
	pg.Map = segmentMap{
		Caption:      "at the peak of active bytes, just after " + pg.moment(peakAt),
		Moment:       peakAt,
		ManagedBytes: at.ManagedBytes,
		ActiveBytes:  at.ActiveBytes,
		IDs:          "the trace's block ids",
		Segments:     atSegments,
	}
	if !trace.Sited(events) {
		pg.Notes = append(pg.Notes, "The trace has no queue and site columns: the bands are colored by size class. Record it with memhooks.NewTraceRecorder(w, memhooks.WithSites()) to see where each block was allocated.")
	}
	return pg, nil
}

// moment names moment k for people.
func (pg page) moment(k int) string {
	if k == 0 {
		return "the start"
	}
	if pg.Timed {
		return fmt.Sprintf("event %d, at %s", k, formatNs(pg.X[k]))
	}
	return fmt.Sprintf("event %d", k)
}

// differ finds how a pool's segments changed since the last snapshot it
// saw.
type differ struct {
	prev map[int64][]pageBlock // segment id -> its blocks
	seen map[int64]bool
}

// diff appends to ops the steps from the last segments to segs and
// returns how many it appended. It keeps segs' blocks.
func (d *differ) diff(segs []pageSegment, ops *[]int64) int {
	if d.prev == nil {
		d.prev, d.seen = map[int64][]pageBlock{}, map[int64]bool{}
	}
	n := 0
	add := func(seg, off, size, what, id int64) {
		*ops = append(*ops, seg, off, size, what, id)
		n++
	}
	clear(d.seen)
	for _, seg := range segs {
		d.seen[seg.ID] = true
		old, ok := d.prev[seg.ID]
		if !ok {
			small := int64(0)
			if seg.Small {
				small = 1
			}
			add(seg.ID, 0, seg.Size, stepSegmentNew, small)
		}
		i := 0 // old[i] is the first old block not before the new one
		for _, bl := range seg.Blocks {
			for i < len(old) && old[i].Offset < bl.Offset {
				add(seg.ID, old[i].Offset, 0, stepRemove, 0)
				i++
			}
			if i < len(old) && old[i].Offset == bl.Offset {
				o := old[i]
				i++
				if o.Size == bl.Size && o.State == bl.State && o.ID == bl.ID {
					continue
				}
			}
			add(seg.ID, bl.Offset, bl.Size, stepOfState[bl.State], bl.ID)
		}
		for ; i < len(old); i++ {
			add(seg.ID, old[i].Offset, 0, stepRemove, 0)
		}
		d.prev[seg.ID] = seg.Blocks
	}
	var gone []int64
	for id := range d.prev {
		if !d.seen[id] {
			gone = append(gone, id)
		}
	}
	slices.Sort(gone)
	for _, id := range gone {
		add(id, 0, 0, stepSegmentFreed, 0)
		delete(d.prev, id)
	}
	return n
}

// snapshotPage works out the page of a snapshot: its history, if any, for
// the timelines, and its segments for the map.
func snapshotPage(s snapshotFile) (page, error) {
	if s.Policy == "" || s.Segments == nil {
		return page{}, errors.New("a JSON object, but not a pool snapshot: it has no policy or no segments")
	}
	// A pool's snapshot: its segments numbered apart, its figures theirs
	// (ManagedBytes their bytes, ActiveBytes the active blocks' requests).
	seen := map[int64]bool{}
	var managed, asked bytesSum
	for _, seg := range s.Segments {
		if err := checkPageID("segment", seg.ID); err != nil {
			return page{}, err
		}
		if seen[seg.ID] {
			return page{}, fmt.Errorf("segment %d: a second segment of that id (a pool numbers its segments apart)", seg.ID)
		}
		seen[seg.ID] = true
		var end int64
		for _, b := range seg.Blocks {
			if _, ok := stepOfState[b.State]; !ok {
				return page{}, fmt.Errorf("segment %d: block at offset %d: unknown state %q", seg.ID, b.Offset, b.State)
			}
			if err := cmp.Or(checkPageID("block", b.ID), checkPageQueue(b.Queue)); err != nil {
				return page{}, fmt.Errorf("segment %d: block at offset %d: %w", seg.ID, b.Offset, err)
			}
			if b.Offset != end || b.Size <= 0 || b.Size > seg.Size-end {
				return page{}, fmt.Errorf("segment %d: block at offset %d of %d bytes: the blocks do not tile the segment", seg.ID, b.Offset, b.Size)
			}
			end += b.Size
			if b.Requested < 0 || b.Requested > b.Size {
				return page{}, fmt.Errorf("segment %d: block at offset %d of %d bytes: %d bytes requested, which no pool hands out", seg.ID, b.Offset, b.Size, b.Requested)
			}
			if b.State == mempool.StateActive {
				asked.add(b.Requested)
			}
		}
		if end != seg.Size {
			return page{}, fmt.Errorf("segment %d: its blocks cover %d of its %d bytes", seg.ID, end, seg.Size)
		}
		managed.add(seg.Size)
	}
	if !managed.is(s.ManagedBytes) || !asked.is(s.ActiveBytes) {
		return page{}, fmt.Errorf("managed_bytes %d and active_bytes %d: not the snapshot's (its segments hold %d bytes, its active blocks asked for %d)", s.ManagedBytes, s.ActiveBytes, managed.bytes(), asked.bytes())
	}

	// The history's events, less the frees of blocks allocated before it
	// began (their sizes are unknown), and of segments: what a trace
	// recorded from its start would have, checked as a trace is. Its
	// segment events are moments too.
	for j, ev := range s.History {
		if ev.Op == trace.Alloc {
			if err := checkPageID("block", ev.ID); err != nil {
				return page{}, fmt.Errorf("the history's event %d: %w", j+1, err)
			}
		}
	}
	events, left := trace.Window(s.History)
	if err := trace.Check(events); err != nil {
		return page{}, fmt.Errorf("the history, less its frees of blocks and segments from before it: %w", err)
	}
	timed := trace.Timed(events)
	b := newPageBuilder(len(events), timed)
	if timed {
		// The axis starts a little before the history does, not at 0: the
		// history is the last of a longer run.
		first, last := int64(events[0].Time), int64(events[len(events)-1].Time)
		b.pg.X[0] = max(0, first-max(1, min((last-first)/int64(max(1, len(events)-1)), (last-first)/100)))
	}

	// The blocks active at the snapshot that the history did not see
	// allocated were allocated before it began: they are bands from its
	// start, at the bottom of the stack (see blocksBefore).
	liveKeys := map[int64]blockKey{} // the blocks the history leaves live, by id
	for _, ev := range events {
		switch ev.Op {
		case trace.Alloc:
			liveKeys[ev.ID] = blockKey{ev.Size, ev.Queue, ev.Site}
		case trace.Free:
			delete(liveKeys, ev.ID)
		}
	}
	var active []mempool.BlockSnapshot
	for _, seg := range s.Segments {
		for _, bl := range seg.Blocks {
			if bl.State == mempool.StateActive {
				active = append(active, bl)
			}
		}
	}
	before := blocksBefore(liveKeys, active)
	slices.SortFunc(before, func(x, y mempool.BlockSnapshot) int { return cmp.Compare(x.ID, y.ID) })
	var live bytesSum
	for _, bl := range before {
		b.alloc(int64(bl.ID), bl.Requested, 0, bl.Site, bl.Queue)
		live.add(bl.Requested)
	}
	histPeak, peakSum := peak{Bytes: live.bytes(), Moment: 0}, live
	for i, ev := range events {
		k := i + 1
		if timed {
			b.pg.X = append(b.pg.X, int64(ev.Time))
		}
		switch ev.Op {
		case trace.Alloc:
			b.alloc(ev.ID, ev.Size, k, ev.Site, ev.Queue)
			live.add(ev.Size)
		case trace.Free:
			live.sub(b.pg.Allocs.Size[b.index[ev.ID]])
			b.free(ev.ID, k, ev.Site)
		}
		if live.more(peakSum) {
			histPeak, peakSum = peak{Bytes: live.bytes(), Moment: k}, live
		}
	}
	pg := b.finish()
	pg.Source, pg.Policy, pg.ManagedFrom = "snapshot", s.Policy, "snapshot"
	pg.Map = segmentMap{
		Caption:      "at the snapshot, " + s.Time.Format("2006-01-02 15:04:05 MST"),
		Moment:       -1,
		ManagedBytes: s.ManagedBytes,
		ActiveBytes:  s.ActiveBytes,
		IDs:          "the PooledBuffers' IDs",
		Segments:     pageSegments(s.Segments, func(id uint64) int64 { return int64(id) }),
	}
	if s.Device != "" {
		pg.Map.Caption += ", on " + s.Device
	}

	// The peaks: the pool's own, when the snapshot has them, at the
	// moment the history or the snapshot reaches them, if either does.
	atSnapshot := pg.Events
	pg.PeakActive = histPeak
	if s.ActiveBytes > pg.PeakActive.Bytes {
		pg.PeakActive = peak{Bytes: s.ActiveBytes, Moment: atSnapshot}
	}
	pg.PeakManaged = peak{Bytes: s.ManagedBytes, Moment: atSnapshot, Note: "at the snapshot"}
	if s.PeakActiveBytes != nil && *s.PeakActiveBytes > pg.PeakActive.Bytes {
		pg.PeakActive = peak{Bytes: *s.PeakActiveBytes, Moment: -1, Note: "the pool's peak, at a moment the snapshot does not record"}
	}
	if s.PeakManagedBytes != nil && *s.PeakManagedBytes > pg.PeakManaged.Bytes {
		pg.PeakManaged = peak{Bytes: *s.PeakManagedBytes, Moment: -1, Note: "the pool's peak, at a moment the snapshot does not record"}
	}
	if s.PeakManagedBytes == nil {
		pg.Notes = append(pg.Notes, "The snapshot does not have the pool's peaks (a snapshot from before clpool recorded them): the peaks are those of its history and its moment.")
	}
	if len(s.History) == 0 {
		pg.PeakActive.Note = "at the snapshot"
		pg.Notes = append(pg.Notes, "The snapshot has no history, so plots 1 and 2 show only the blocks active at its moment. Register a memhooks.History on the pool before taking the snapshot to see what led up to it.")
		return pg, nil
	}
	pg.Map.Moment = pg.Events
	pg.Notes = append(pg.Notes, fmt.Sprintf("Plots 1 and 2 are the snapshot's history, its last %d events, from %s: the blocks active at the snapshot that it did not see allocated (told apart by size, queue and site) are drawn from its start, and the %d frees of other blocks allocated before it are left out. The managed bytes are known only at the snapshot, drawn at the history's end.",
		len(s.History), pg.moment0(), left))
	return pg, nil
}

// blockKey is what tells a snapshot's active block apart from others:
// its requested size, its queue and its site.
type blockKey struct {
	size  int64
	queue int
	site  string
}

// blocksBefore returns the blocks of active (a snapshot's) that none of
// the blocks its history leaves live (liveByID, by the history's ids)
// matches: those allocated before the history began. The history
// numbers blocks its own way, so each of its live blocks is taken for
// one of the active blocks of its size, queue and site, in that order
// (a History with sites names the site of each block it saw allocated,
// and numbers queues as the snapshot does); else, for those left, of its
// size and queue (a history without sites, or a snapshot that names
// none); else, last, of its size alone.
func blocksBefore(liveByID map[int64]blockKey, active []mempool.BlockSnapshot) []mempool.BlockSnapshot {
	var live []blockKey // oldest first, so that the matches are the same each time
	for _, id := range slices.Sorted(maps.Keys(liveByID)) {
		live = append(live, liveByID[id])
	}
	passes := []func(blockKey) blockKey{
		func(k blockKey) blockKey { return k },
		func(k blockKey) blockKey { return blockKey{size: k.size, queue: k.queue} },
		func(k blockKey) blockKey { return blockKey{size: k.size} },
	}
	for _, key := range passes {
		unmatched := map[blockKey][]int{} // the live blocks left, by key: indices into live
		for i, k := range live {
			unmatched[key(k)] = append(unmatched[key(k)], i)
		}
		matched := make([]bool, len(live))
		var rest []mempool.BlockSnapshot
		for _, bl := range active {
			k := key(blockKey{bl.Requested, bl.Queue, bl.Site})
			if is := unmatched[k]; len(is) > 0 {
				matched[is[0]], unmatched[k] = true, is[1:]
				continue
			}
			rest = append(rest, bl)
		}
		active = rest
		var left []blockKey
		for i, k := range live {
			if !matched[i] {
				left = append(left, k)
			}
		}
		live = left
	}
	return active
}

// moment0 names where the page's axis starts.
func (pg page) moment0() string {
	if pg.Timed {
		return formatNs(pg.X[0])
	}
	return "its first event"
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

// bytesSum is a running sum of the bytes of live blocks, exact past
// math.MaxInt64 (in 128 bits, as trace.Summarize keeps its own), so that a
// page's peak is Summarize's: bytes saturates it where it is read. It is
// never negative: only a live block's bytes are taken out.
type bytesSum struct{ hi, lo uint64 }

// add adds n >= 0 bytes.
func (s *bytesSum) add(n int64) {
	var carry uint64
	s.lo, carry = bits.Add64(s.lo, uint64(n), 0)
	s.hi += carry
}

// sub takes out n bytes added before.
func (s *bytesSum) sub(n int64) {
	var borrow uint64
	s.lo, borrow = bits.Sub64(s.lo, uint64(n), 0)
	s.hi -= borrow
}

// is reports whether s is n.
func (s bytesSum) is(n int64) bool { return n >= 0 && s.hi == 0 && s.lo == uint64(n) }

// more reports whether s is more than t.
func (s bytesSum) more(t bytesSum) bool { return s.hi > t.hi || s.hi == t.hi && s.lo > t.lo }

// bytes returns the sum, saturated at math.MaxInt64.
func (s bytesSum) bytes() int64 {
	if s.hi != 0 || s.lo > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(s.lo)
}
