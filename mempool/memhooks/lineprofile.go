package memhooks

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"

	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/internal/callsite"
	"github.com/google/pprof/profile"
)

// LineProfile attributes a pool's memory to the code that asked for it.
// For every allocation it takes the caller's stack, leaving out clpool's
// own frames, and counts two things by stack, as CuPy's LineProfileHook
// does: used bytes, the alloc sizes the pool served (hit or miss), and
// acquired bytes, those it took from the device (misses). Unlike CuPy's, it
// also subtracts frees from used bytes, so the in-use view shows the memory
// live now and where it was asked for.
type LineProfile struct {
	mu     sync.Mutex              // protects the fields below and their records
	stacks map[string]*stackRecord // by the stack's frames
	live   map[uint64]*stackRecord // live block ID -> the stack that allocated it
}

// stackRecord is what one call stack allocated.
type stackRecord struct {
	frames []frame // innermost first
	seen   int     // its place among the stacks, in the order they were first seen
	counts
}

type counts struct {
	allocObjects, allocBytes int64 // used: every block served
	inuseObjects, inuseBytes int64 // used, less what was freed
	acquiredObjects          int64 // device allocations
	acquiredBytes            int64
}

// frame is a frame of a stack; its String is CuPy's file:line:function
// form (callsite's, which the sanitizer's findings use too).
type frame = callsite.Frame

// NewLineProfile returns an empty profile. Register it with pool.AddHook.
func NewLineProfile() *LineProfile {
	return &LineProfile{stacks: map[string]*stackRecord{}, live: map[uint64]*stackRecord{}}
}

// Handle records an event. It is called on the allocating goroutine, so
// the stack it takes is the caller's.
func (lp *LineProfile) Handle(e mempool.Event) {
	switch {
	case e.Kind == mempool.MallocAfter && e.Err == nil:
		frames := callers()
		lp.mu.Lock()
		r := lp.record(frames)
		r.allocObjects++
		r.allocBytes += e.AllocSize
		r.inuseObjects++
		r.inuseBytes += e.AllocSize
		lp.live[e.BlockID] = r
		lp.mu.Unlock()
	case e.Kind == mempool.AllocAfter && e.Err == nil:
		frames := callers()
		lp.mu.Lock()
		r := lp.record(frames)
		r.acquiredObjects++
		r.acquiredBytes += e.AllocSize
		lp.mu.Unlock()
	case e.Kind == mempool.FreeBefore:
		lp.mu.Lock()
		if r := lp.live[e.BlockID]; r != nil {
			delete(lp.live, e.BlockID)
			r.inuseObjects--
			r.inuseBytes -= e.AllocSize
		}
		lp.mu.Unlock()
	}
}

// record returns the record of a stack, making it. lp.mu must be held.
func (lp *LineProfile) record(frames []frame) *stackRecord {
	var key strings.Builder
	for _, f := range frames {
		fmt.Fprintf(&key, "%s\x00%s\x00%d\x00", f.Fn, f.File, f.Line)
	}
	r := lp.stacks[key.String()]
	if r == nil {
		r = &stackRecord{frames: frames, seen: len(lp.stacks)}
		lp.stacks[key.String()] = r
	}
	return r
}

// callers returns the stack of the goroutine calling the pool, innermost
// first, without clpool's frames (nor the runtime's and testing's, above
// the user's code).
func callers() []frame { return callsite.Callers(2) }

// sortedRecords returns the records in the order of their stacks' keys, so
// that output does not depend on map order. lp.mu must be held.
func (lp *LineProfile) sortedRecords() []*stackRecord {
	keys := make([]string, 0, len(lp.stacks))
	for k := range lp.stacks {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	records := make([]*stackRecord, len(keys))
	for i, k := range keys {
		records[i] = lp.stacks[k]
	}
	return records
}

// recordsSeen returns the records in the order their stacks were first
// seen (Print's order). lp.mu must be held.
func (lp *LineProfile) recordsSeen() []*stackRecord {
	records := make([]*stackRecord, len(lp.stacks))
	for _, r := range lp.stacks {
		records[r.seen] = r
	}
	return records
}

// View picks what Print shows as used bytes.
type View int

const (
	// InUse shows the bytes still allocated (frees subtracted).
	InUse View = iota
	// Allocated shows every byte ever served, as CuPy's LineProfileHook does.
	Allocated
)

// node is a frame of the printed tree.
type node struct {
	name     string
	used     int64
	acquired int64
	children []*node
	byName   map[string]*node
}

func (n *node) child(name string) *node {
	if c := n.byName[name]; c != nil {
		return c
	}
	c := &node{name: name, byName: map[string]*node{}}
	n.byName[name] = c
	n.children = append(n.children, c)
	return c
}

// Print writes the tree of stacks, outermost frame first, as CuPy's
// LineProfileHook prints it:
//
//	_root (4.00MB, 1.50MB)
//	  main.go:42:main.main (4.00MB, 1.50MB)
//	    cg.go:63:main.solve[...] (3.50MB, 1.00MB)
//
// Each line is file:line:function (used, acquired). Children are in the
// order they were first seen. maxDepth counts levels as CuPy's max_depth
// does, with _root as level 1: 1 prints _root alone, 2 adds the outermost
// frames (main.main above), 3 the frames they call, and so on; 0 or less
// prints every level.
func (lp *LineProfile) Print(w io.Writer, maxDepth int, view View) error {
	lp.mu.Lock()
	root := &node{name: "_root", byName: map[string]*node{}}
	for _, r := range lp.recordsSeen() {
		used := r.inuseBytes
		if view == Allocated {
			used = r.allocBytes
		}
		n := root
		n.used += used
		n.acquired += r.acquiredBytes
		for i := len(r.frames) - 1; i >= 0; i-- {
			n = n.child(r.frames[i].String())
			n.used += used
			n.acquired += r.acquiredBytes
		}
	}
	lp.mu.Unlock()
	return printNode(w, root, 0, maxDepth)
}

// printNode prints n, indented by its depth (0 for _root), then its
// children if their level is within maxDepth. Levels count from 1 at
// _root, as CuPy's do, so the children of a node at depth d are at level
// d+2.
func printNode(w io.Writer, n *node, depth, maxDepth int) error {
	if _, err := fmt.Fprintf(w, "%s%s (%s, %s)\n", strings.Repeat("  ", depth), n.name, humanSize(n.used), humanSize(n.acquired)); err != nil {
		return err
	}
	if childLevel := depth + 2; maxDepth > 0 && childLevel > maxDepth {
		return nil
	}
	for _, c := range n.children {
		if err := printNode(w, c, depth+1, maxDepth); err != nil {
			return err
		}
	}
	return nil
}

// humanSize prints bytes as CuPy does: two decimals and a binary unit.
func humanSize(n int64) string {
	size := float64(n)
	for _, unit := range []string{"B", "KB", "MB", "GB", "TB", "PB", "EB"} {
		if size < 1024 && size > -1024 {
			return fmt.Sprintf("%.2f%s", size, unit)
		}
		size /= 1024
	}
	return fmt.Sprintf("%.2fZB", size)
}

// Profile returns the data as a pprof profile, one sample per stack, with
// the sample types alloc_objects, alloc_space, inuse_objects and
// inuse_space (used blocks and bytes, served and still live) and
// acquired_objects and acquired_space (taken from the device). The default
// is inuse_space.
func (lp *LineProfile) Profile() *profile.Profile {
	p := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "alloc_objects", Unit: "count"}, {Type: "alloc_space", Unit: "bytes"},
			{Type: "inuse_objects", Unit: "count"}, {Type: "inuse_space", Unit: "bytes"},
			{Type: "acquired_objects", Unit: "count"}, {Type: "acquired_space", Unit: "bytes"},
		},
		DefaultSampleType: "inuse_space",
		PeriodType:        &profile.ValueType{Type: "space", Unit: "bytes"},
	}
	functions := map[[2]string]*profile.Function{}
	locations := map[frame]*profile.Location{}
	lp.mu.Lock()
	defer lp.mu.Unlock()
	for _, r := range lp.sortedRecords() {
		s := &profile.Sample{Value: []int64{r.allocObjects, r.allocBytes, r.inuseObjects, r.inuseBytes, r.acquiredObjects, r.acquiredBytes}}
		for _, f := range r.frames {
			loc := locations[f]
			if loc == nil {
				fn := functions[[2]string{f.Fn, f.File}]
				if fn == nil {
					fn = &profile.Function{ID: uint64(len(p.Function) + 1), Name: f.Fn, SystemName: f.Fn, Filename: f.File}
					functions[[2]string{f.Fn, f.File}] = fn
					p.Function = append(p.Function, fn)
				}
				loc = &profile.Location{ID: uint64(len(p.Location) + 1), Line: []profile.Line{{Function: fn, Line: int64(f.Line)}}}
				locations[f] = loc
				p.Location = append(p.Location, loc)
			}
			s.Location = append(s.Location, loc)
		}
		p.Sample = append(p.Sample, s)
	}
	return p
}

// WriteProfile writes the pprof profile (gzipped protobuf), for
// `go tool pprof -top file` or `go tool pprof -http=: file`.
func (lp *LineProfile) WriteProfile(w io.Writer) error { return lp.Profile().Write(w) }

// Site returns where the live block id (a PooledBuffer's ID) was
// allocated: the innermost frame outside clpool, in CuPy's
// file:line:function form. It makes a LineProfile a mempool.SiteNamer, so
// that the pool's snapshots name each active block's call site.
func (lp *LineProfile) Site(id uint64) (string, bool) {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	r, ok := lp.live[id]
	if !ok || len(r.frames) == 0 {
		return "", false
	}
	return r.frames[0].String(), true
}
