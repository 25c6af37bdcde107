package trace_test

import (
	"cmp"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// parseEvents reads a trace written on one line, events separated by
// commas: "a1:768, a2:768, f1".
func parseEvents(t *testing.T, s string) []trace.Event {
	t.Helper()
	var events []trace.Event
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		var ev trace.Event
		var err error
		if f[0] == 'a' {
			ev.Op = trace.Alloc
			_, err = fmt.Sscanf(f[1:], "%d:%d", &ev.ID, &ev.Size)
		} else {
			ev.Op = trace.Free
			_, err = fmt.Sscanf(f[1:], "%d", &ev.ID)
		}
		require.NoError(t, err, f)
		events = append(events, ev)
	}
	return events
}

// TestPlanMatchesOfflinePlanPy pins Plan's figures on the repository's
// traces to those that shared/tools/offline_plan.py printed for them
// (`offline_plan.py FILE [ALIGN]`: blocks, peak_live, planned and ratio to
// three places), so the Go plan is the Python one without Python in the
// test. With -short, only align 256, the script's default.
func TestPlanMatchesOfflinePlanPy(t *testing.T) {
	type figures struct {
		planned int64
		ratio   string
	}
	for _, tc := range []struct {
		file     string
		blocks   int
		peakLive int64
		byAlign  map[int64]figures
	}{
		{"batches.tsv", 21175, 13961388, map[int64]figures{256: {13964288, "1.000"}, 1: {13961388, "1.000"}, 4096: {14032896, "1.005"}}},
		{"cg-go.tsv", 2406, 3145728, map[int64]figures{256: {3145728, "1.000"}, 1: {3145728, "1.000"}, 4096: {3145728, "1.000"}}},
		{"cg.tsv", 3307, 3670016, map[int64]figures{256: {3670016, "1.000"}, 1: {3670016, "1.000"}, 4096: {3670016, "1.000"}}},
		{"mlp.tsv", 26951, 235704520, map[int64]figures{256: {250562048, "1.063"}, 1: {250560752, "1.063"}, 4096: {250580992, "1.063"}}},
		{"particles.tsv", 18960, 5832600, map[int64]figures{256: {5843456, "1.002"}, 1: {5835996, "1.001"}, 4096: {6004736, "1.030"}}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			events := readFile(t, "../testdata/"+tc.file)
			for align, want := range tc.byAlign {
				if align != 256 && testing.Short() {
					continue
				}
				l := trace.Plan(events, align)
				assert.Len(t, l.Blocks, tc.blocks)
				assert.Equal(t, align, l.Align)
				assert.Equal(t, tc.peakLive, l.PeakLive)
				assert.Equal(t, want.planned, l.Size, "align %d", align)
				assert.Equal(t, want.ratio, fmt.Sprintf("%.3f", l.Ratio()), "align %d", align)
				if align == 256 { // the contract, block by block, once a trace
					checkGreedy(t, l)
				}
			}
		})
	}
}

func TestPlanByHand(t *testing.T) {
	for _, tc := range []struct {
		name    string
		events  string
		align   int64
		live    int64
		size    int64
		offsets []int64 // of the blocks, in the order of their allocations
		sizes   []int64
	}{
		{"no events", "", 256, 0, 0, nil, nil},
		{"one block is rounded up", "a1:100, f1", 256, 100, 256, []int64{0}, []int64{256}},
		{"an empty block takes align bytes", "a1:0", 256, 0, 256, []int64{0}, []int64{256}},
		{"align 1 rounds nothing", "a1:100, a2:3", 1, 103, 103, []int64{0, 100}, []int64{100, 3}},
		{"a block left live lives to the end", "a1:100, a2:100, f2, a3:100", 1, 200, 200, []int64{0, 100, 100}, []int64{100, 100, 100}},
		{"blocks at different times share the range", "a1:1000, f1, a2:500, f2, a3:1024, f3", 256, 1024, 1024, []int64{0, 0, 0}, []int64{1024, 512, 1024}},
		{"the larger goes first, at 0", "a1:500, a2:1000, f1, f2", 256, 1500, 1536, []int64{1024, 0}, []int64{512, 1024}},
		{"of equal sizes, the first allocated goes first", "a1:256, a2:256, f2, f1", 256, 512, 512, []int64{0, 256}, []int64{256, 256}},
		{
			// X lives throughout; Y and Z, never at once, both go just
			// above it; W, alive with all three, goes above them. The
			// plan is the live peak, reached twice.
			"a block goes at the lowest offset free for its whole life",
			"a1:2048, a2:1024, a4:512, f2, a3:1024, f4, f3, f1", 256, 3584, 3584,
			[]int64{0, 2048, 3072, 2048}, []int64{2048, 1024, 512, 1024},
		},
		{
			// A gap too small for the block is passed over: 4 (1024) goes
			// at 0, 3 (768) too, as they never live at once, and 1 above 4.
			// 2 lives with 3 and 1, which leave 256 bytes between them, and
			// needs 512: it goes above 1.
			"a gap too small is passed over",
			"a1:512, a2:512, a3:768, f2, f3, a4:1024, f1, f4", 256, 1792, 2048,
			[]int64{1024, 1536, 0, 0}, []int64{512, 512, 768, 1024},
		},
		{
			// Largest first is a heuristic: 4 (1024) goes at 0, then 1 at
			// 0 and 2 above it, and 3, alive with 2 and 4, above both. A
			// pool that put 3 where 1 was and 4 above 3 would take only
			// the live peak, 1536.
			"largest first can take more than the live peak",
			"a1:768, a2:768, f1, a3:512, f2, a4:1024, f3, f4", 256, 1536, 2048,
			[]int64{0, 768, 1536, 0}, []int64{768, 768, 512, 1024},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := trace.Plan(parseEvents(t, tc.events), tc.align)
			assert.Equal(t, tc.live, l.PeakLive, "peak live")
			assert.Equal(t, tc.size, l.Size, "size")
			var offsets, sizes []int64
			for _, b := range l.Blocks {
				offsets, sizes = append(offsets, b.Offset), append(sizes, b.Size)
			}
			assert.Equal(t, tc.offsets, offsets, "offsets")
			assert.Equal(t, tc.sizes, sizes, "sizes")
			checkGreedy(t, l)
		})
	}
}

func TestPlanLifetimes(t *testing.T) {
	events := parseEvents(t, "a7:10, a8:20, f7, a7:30, f8")
	l := trace.Plan(events, 1)
	assert.Equal(t, []trace.Placement{
		{ID: 7, Alloc: 0, Free: 2, Size: 10, Offset: 0},
		{ID: 8, Alloc: 1, Free: 4, Size: 20, Offset: 30},
		{ID: 7, Alloc: 3, Free: 5, Size: 30, Offset: 0}, // left live: to len(events)
	}, l.Blocks)
	assert.Equal(t, int64(50), l.Size)
	assert.Equal(t, int64(50), l.PeakLive)
}

func TestPlanTakesEventsAsSummarizeCounts(t *testing.T) {
	// A free of a block not live is ignored; an allocation of a live id
	// leaves the block it replaces live to the end. Times are not used.
	events := []trace.Event{
		{Op: trace.Free, ID: 9},
		{Op: trace.Alloc, ID: 1, Size: 100, Time: 5},
		{Op: trace.Alloc, ID: 1, Size: 200, Time: 1},
		{Op: trace.Free, ID: 1},
		{Op: trace.Free, ID: 1},
		{Op: 'x', ID: 1, Size: 1000},
		{Op: trace.Alloc, ID: 2, Size: 50},
	}
	l := trace.Plan(events, 1)
	assert.Equal(t, []trace.Placement{
		{ID: 1, Alloc: 1, Free: 7, Size: 100, Offset: 200},
		{ID: 1, Alloc: 2, Free: 3, Size: 200, Offset: 0},
		{ID: 2, Alloc: 6, Free: 7, Size: 50, Offset: 0},
	}, l.Blocks)
	assert.Equal(t, trace.Summarize(events).PeakLiveBytes, l.PeakLive)
	assert.Equal(t, int64(300), l.PeakLive)
	assert.Equal(t, int64(300), l.Size)
}

func TestPlanRatio(t *testing.T) {
	assert.True(t, math.IsNaN(trace.Plan(nil, 256).Ratio()), "no allocations")
	assert.True(t, math.IsInf(trace.Plan(parseEvents(t, "a1:0"), 256).Ratio(), 1), "only empty blocks")
	assert.Equal(t, 1.25, trace.Layout{PeakLive: 4, Size: 5}.Ratio())
}

func TestPlanSaturates(t *testing.T) {
	// Two blocks of math.MaxInt64 bytes, alive at once: each rounds to
	// 2^63, the second goes at 2^63, and the plan ends at 2^64.
	l := trace.Plan(parseEvents(t, fmt.Sprintf("a1:%d, a2:%d, a3:300", math.MaxInt64, math.MaxInt64)), 256)
	assert.Equal(t, int64(math.MaxInt64), l.PeakLive)
	assert.Equal(t, int64(math.MaxInt64), l.Size)
	assert.Equal(t, []int64{math.MaxInt64, math.MaxInt64, 512}, []int64{l.Blocks[0].Size, l.Blocks[1].Size, l.Blocks[2].Size})
	assert.Equal(t, []int64{0, math.MaxInt64, math.MaxInt64}, []int64{l.Blocks[0].Offset, l.Blocks[1].Offset, l.Blocks[2].Offset})

	// Offsets under math.MaxInt64 are exact even when they depend on
	// figures over it. A (math.MaxInt64 bytes) goes at 0 and S, alive
	// with it, at math.MaxInt64. C, after A, goes at 0; Q, alive with C
	// and S, does not fit between them (2^62 + 2^62 > math.MaxInt64) and
	// goes above S; R, 256 bytes, does fit between them, at 2^62. Ends
	// clamped to math.MaxInt64 would have let Q in at 2^62 and put R above.
	events := parseEvents(t, fmt.Sprintf("a1:%d, a2:%d, f1, a3:%d, a4:%d, a5:256", int64(math.MaxInt64), int64(1)<<62, int64(1)<<62, int64(1)<<62))
	l = trace.Plan(events, 1)
	assert.Equal(t, []int64{0, math.MaxInt64, 0, math.MaxInt64, 1 << 62},
		[]int64{l.Blocks[0].Offset, l.Blocks[1].Offset, l.Blocks[2].Offset, l.Blocks[3].Offset, l.Blocks[4].Offset})
	assert.Equal(t, int64(math.MaxInt64), l.Size)
	assert.Equal(t, referencePlan(events, 1), l)
}

func TestPlanPanicsOnAlignUnder1(t *testing.T) {
	assert.PanicsWithValue(t, "trace: Plan with align 0, want at least 1", func() { trace.Plan(nil, 0) })
	assert.Panics(t, func() { trace.Plan(nil, -256) })
}

// TestPlanIsOfflinePlanPy checks Plan against a plain transliteration of
// offline_plan.py (every placed block examined for every block, exact
// integers) on random traces, sizes near math.MaxInt64 among them, and
// each plan against the contract.
func TestPlanIsOfflinePlanPy(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 22))
	for i := range 500 {
		n := 1 + r.IntN(60)
		huge := i%5 == 4
		events := randomTrace(r, n, huge)
		align := []int64{1, 8, 256, 4096}[r.IntN(4)]
		l := trace.Plan(events, align)
		want := referencePlan(events, align)
		if !assert.Equal(t, want, l, "trace %d (align %d): %v", i, align, events) {
			return
		}
		checkGreedy(t, l)
	}
}

// randomTrace returns a trace of n allocations, with frees between them
// and some blocks left live, of small sizes or, if huge, some near
// math.MaxInt64.
func randomTrace(r *rand.Rand, n int, huge bool) []trace.Event {
	var events []trace.Event
	var live []int64
	for id := int64(1); id <= int64(n) || len(live) > 0 && r.IntN(4) != 0; {
		if id <= int64(n) && (len(live) == 0 || r.IntN(2) == 0) {
			size := r.Int64N(5000)
			if huge && r.IntN(3) == 0 {
				size = math.MaxInt64 - r.Int64N(1<<62)
			}
			events = append(events, trace.Event{Op: trace.Alloc, ID: id, Size: size})
			live = append(live, id)
			id++
			continue
		}
		k := r.IntN(len(live))
		events = append(events, trace.Event{Op: trace.Free, ID: live[k]})
		live = slices.Delete(live, k, k+1)
	}
	return events
}

// referencePlan is offline_plan.py's main, in Go, with math/big for its
// Python integers.
func referencePlan(events []trace.Event, align int64) trace.Layout {
	type block struct {
		id         int64
		size       *big.Int // rounded
		start, end int
		off        *big.Int
	}
	var blocks []*block
	byID := map[int64]*block{}
	for i, ev := range events {
		switch ev.Op {
		case trace.Alloc:
			b := &block{id: ev.ID, start: i, end: len(events)}
			n := big.NewInt(max(ev.Size, 1))
			a := big.NewInt(align)
			n.Add(n, big.NewInt(align-1)).Div(n, a).Mul(n, a)
			b.size = n
			blocks = append(blocks, b)
			byID[ev.ID] = b
		case trace.Free:
			if b, ok := byID[ev.ID]; ok {
				b.end = i
				delete(byID, ev.ID)
			}
		}
	}
	order := slices.Clone(blocks)
	slices.SortStableFunc(order, func(x, y *block) int { return y.size.Cmp(x.size) }) // stable: by start among equals
	var placed []*block
	top := new(big.Int)
	for _, b := range order {
		var over []*block
		for _, p := range placed {
			if p.start < b.end && b.start < p.end {
				over = append(over, p)
			}
		}
		slices.SortFunc(over, func(x, y *block) int { return x.off.Cmp(y.off) })
		off := new(big.Int)
		for _, p := range over {
			if new(big.Int).Sub(p.off, off).Cmp(b.size) >= 0 {
				break
			}
			if end := new(big.Int).Add(p.off, p.size); end.Cmp(off) > 0 {
				off = end
			}
		}
		b.off = off
		placed = append(placed, b)
		if end := new(big.Int).Add(off, b.size); end.Cmp(top) > 0 {
			top = end
		}
	}
	sat := func(x *big.Int) int64 {
		if x.IsInt64() {
			return x.Int64()
		}
		return math.MaxInt64
	}
	l := trace.Layout{Align: align, PeakLive: trace.Summarize(events).PeakLiveBytes, Size: sat(top)}
	for _, b := range blocks {
		l.Blocks = append(l.Blocks, trace.Placement{ID: b.id, Alloc: b.start, Free: b.end, Size: sat(b.size), Offset: sat(b.off)})
	}
	return l
}

// checkGreedy checks a layout against Plan's contract: blocks whose
// lives intersect share no byte; each block is at the lowest offset where
// it shares none with the blocks placed before it (larger, or as large and
// allocated earlier) whose lives intersect its own; and the size is the
// highest end. It checks nothing of a layout with offsets or sizes near
// math.MaxInt64, whose sums would overflow here.
func checkGreedy(t *testing.T, l trace.Layout) {
	t.Helper()
	for _, b := range l.Blocks {
		if b.Offset >= math.MaxInt64/4 || b.Size >= math.MaxInt64/4 {
			return
		}
	}
	before := func(x, y trace.Placement) bool { // x is placed before y
		return cmp.Or(cmp.Compare(y.Size, x.Size), cmp.Compare(x.Alloc, y.Alloc)) < 0
	}
	clash := func(off, size int64, y trace.Placement) bool { return off < y.Offset+y.Size && y.Offset < off+size }
	var top int64
	var live []int // the blocks allocated before b and live at its allocation
	for i, b := range l.Blocks {
		top = max(top, b.Offset+b.Size)
		if b.Size%l.Align != 0 {
			t.Fatalf("block %d's size %d is not a multiple of %d", i, b.Size, l.Align)
		}
		live = slices.DeleteFunc(live, func(j int) bool { return l.Blocks[j].Free <= b.Alloc })
		// The blocks whose lives intersect b's: those live at its
		// allocation, and those allocated while it lives.
		overlapping := slices.Clone(live)
		for j := i + 1; j < len(l.Blocks) && l.Blocks[j].Alloc < b.Free; j++ {
			overlapping = append(overlapping, j)
		}
		live = append(live, i)
		// The lowest offset free for b's whole life: 0, unless a block
		// placed before it is in the way; then the end of that block, and
		// so on up.
		var earlier []trace.Placement
		for _, j := range overlapping {
			o := l.Blocks[j]
			if clash(b.Offset, b.Size, o) {
				t.Fatalf("blocks %d and %d live at once and share bytes: %+v, %+v", i, j, b, o)
			}
			if before(o, b) {
				earlier = append(earlier, o)
			}
		}
		slices.SortFunc(earlier, func(x, y trace.Placement) int { return cmp.Compare(x.Offset, y.Offset) })
		var lowest int64
		for _, o := range earlier {
			if clash(lowest, b.Size, o) {
				lowest = max(lowest, o.Offset+o.Size)
			}
		}
		if b.Offset != lowest {
			t.Fatalf("block %d at %d, but %d is free for its whole life", i, b.Offset, lowest)
		}
	}
	assert.Equal(t, top, l.Size)
}

func BenchmarkPlanMLP(b *testing.B) {
	events, err := trace.ReadFile("../testdata/mlp.tsv")
	require.NoError(b, err)
	for b.Loop() {
		trace.Plan(events, 256)
	}
}
