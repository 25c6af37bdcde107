package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// handMadeTrace is a small timed trace whose figures are worked out by
// hand: its peak is 3000 + 700000 + 1500000 = 2203000 live bytes, just
// after block 4 is allocated at 5 µs. In an arena, blocks 1 to 3 share a
// small segment (block 1 at offset 0, block 2 at 4096) and block 4 gets a
// large one.
const handMadeTrace = `op	id	size	t
a	1	1000	1000
a	2	3000	2000
f	1	0	3000
a	3	700000	4000
a	4	1500000	5000
f	3	0	6000
f	2	0	7000
a	5	100	8000
f	4	0	9000
f	5	0	10000
`

const handMadePeak = 3000 + 700000 + 1500000

// sitedTrace is handMadeTrace as a recorder with sites writes it: with
// queues, sites (one a stack, one with spaces) and the pool's own
// segments, whose bytes peak at 4 MiB from 5 µs to 9.5 µs.
const sitedTrace = "op\tid\tsize\tt\tqueue\tsite\n" +
	"A\t1\t2097152\t900\t1\tmain.go:12:main.setup\n" +
	"a\t1\t1000\t1000\t1\tmain.go:12:main.setup\n" +
	"a\t2\t3000\t2000\t2\tsolver.go:40:main.solve < main.go:30:main.main\n" +
	"f\t1\t0\t3000\t1\tmain.go:14:main.setup\n" +
	"a\t3\t700000\t4000\t1\tmodel.go:7:main.load\n" +
	"A\t2\t2097152\t4900\t2\tkernel.go:99:main.step (inlined)\n" +
	"a\t4\t1500000\t5000\t2\tkernel.go:99:main.step (inlined)\n" +
	"f\t3\t0\t6000\t1\tmodel.go:9:main.load\n" +
	"f\t2\t0\t7000\t2\tsolver.go:44:main.solve < main.go:30:main.main\n" +
	"a\t5\t100\t8000\t-\t-\n" +
	"f\t4\t0\t9000\t2\tkernel.go:120:main.step (inlined)\n" +
	"F\t2\t2097152\t9500\t-\t-\n" +
	"f\t5\t0\t10000\t-\t-\n"

// viz runs `clpool viz` on the file at input and returns the HTML file it
// wrote, in a temporary directory.
func viz(t *testing.T, input string, flags ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "mem.html")
	var stdout, stderr bytes.Buffer
	status := run(append(append([]string{"viz", "-o", out}, flags...), input), &stdout, &stderr)
	require.Equal(t, 0, status, stderr.String())
	assert.Contains(t, stderr.String(), "wrote "+out)
	assert.Empty(t, stdout.String())
	return out
}

func writeTemp(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	return path
}

func readEvents(t *testing.T, path string) []trace.Event {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	events, err := trace.Read(f)
	require.NoError(t, err)
	return events
}

// replayPeakManaged replays events through a pool over nothing, as viz
// does but with trace.Replay, and returns the pool's own peak of managed
// bytes.
func replayPeakManaged(t *testing.T, events []trace.Event, opts ...mempool.Option) int64 {
	t.Helper()
	pool, err := mempool.New(nothing{}, append([]mempool.Option{mempool.WithDropSafety(false), mempool.WithLimit(0)}, opts...)...)
	require.NoError(t, err)
	require.NoError(t, trace.Replay(events, pool.Allocate, (*mempool.PooledBuffer).Close))
	return pool.Stats().PeakManagedBytes
}

func policyOptions(policy string) []mempool.Option {
	if policy == "arena" {
		return []mempool.Option{mempool.WithArena()}
	}
	return nil
}

// A link or a source that names a scheme or starts with // would be
// fetched from elsewhere.
var fetches = regexp.MustCompile(`(?i)\b(src|href|xlink:href)\s*=\s*["']?\s*([a-z][a-z0-9+.-]*:|//)|<link\b|@import|url\(`)

func TestVizWritesOnePageThatFetchesNothing(t *testing.T) {
	html, err := os.ReadFile(viz(t, filepath.Join(repoRoot, "testdata", "cg.tsv")))
	require.NoError(t, err)
	page := string(html)
	assert.Empty(t, fetches.FindAllString(page, -1), "the page fetches nothing")
	assert.NotContains(t, page, "<script src", "the script is inline")
	urls := regexp.MustCompile(`(?i)https?://[^\s"'<>]*`).FindAllString(page, -1)
	assert.Equal(t, []string{"http://www.w3.org/2000/svg"}, urls, "the only URL is the SVG namespace's name, in the script")
	assert.Contains(t, page, `<div class="plot" id="timeline">`)
	assert.Contains(t, page, `"events":6614`, "the data is in the page")
	assert.Less(t, len(html), 600_000, "cg's page, with every allocation and every step of the segments")

	// The check itself finds what it should.
	for _, bad := range []string{`<script src="https://cdn.example/d3.js">`, `<img src='http://x/y.png'>`, `<a href="//x/y">`,
		`<link rel="stylesheet" href="s.css">`, `background: url(x.png)`, `<image xlink:href="ftp://x">`} {
		assert.NotEmpty(t, fetches.FindAllString(bad, -1), bad)
	}
}

func TestVizTracePageByHand(t *testing.T) {
	events := readEvents(t, writeTemp(t, "t.tsv", handMadeTrace))
	pg, err := tracePage(events, "arena", newProgress(&bytes.Buffer{}))
	require.NoError(t, err)
	assert.True(t, pg.Timed)
	assert.Equal(t, 10, pg.Events)
	assert.Equal(t, []int64{0, 1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000}, pg.X, "moment k starts at event k's time")
	assert.Equal(t, int64(11000), pg.End, "the last state lasts as long as the events' mean spacing")
	assert.Equal(t, allocTable{
		ID:   []int64{1, 2, 3, 4, 5},
		Size: []int64{1000, 3000, 700000, 1500000, 100},
		A:    []int{1, 2, 4, 5, 8},
		F:    []int{3, 7, 6, 9, 10},
	}, pg.Allocs, "no sites nor queues: their columns are left out")
	assert.Equal(t, []string{""}, pg.Sites)
	assert.Zero(t, pg.Queues)
	assert.Equal(t, peak{Bytes: handMadePeak, Moment: 5}, pg.PeakActive)
	assert.Equal(t, "replay", pg.ManagedFrom)
	assert.Equal(t, replayPeakManaged(t, events, mempool.WithArena()), pg.PeakManaged.Bytes)
	assert.Equal(t, pg.PeakManaged.Bytes, managedAt(pg, pg.PeakManaged.Moment))
	assert.Contains(t, strings.Join(pg.Notes, " "), "no queue and site columns")

	// The map is at the peak, with the trace's ids.
	assert.Equal(t, 5, pg.Map.Moment)
	assert.Equal(t, int64(handMadePeak), pg.Map.ActiveBytes)
	assert.Contains(t, pg.Map.Caption, "just after event 5, at 5 µs")
	var got []string
	for _, seg := range pg.Map.Segments {
		for _, b := range seg.Blocks {
			got = append(got, fmt.Sprint(seg.ID, " ", b.ID, " ", b.Offset, " ", b.State))
		}
	}
	assert.Contains(t, got, "1 0 0 inactive_split", "block 1's place, freed")
	assert.Contains(t, got, "1 2 4096 active", "block 2 beside it, in the small segment")
	assert.Contains(t, got, fmt.Sprint(len(pg.Map.Segments), " 4 0 active"), "block 4 in the last segment")
	assert.Equal(t, normalize(pg.Map.Segments), stepsAt(t, pg, 5), "the steps lead to the map")

	// With bins, each block is a segment of its own, and block 1's is held.
	pg, err = tracePage(events, "bins", newProgress(&bytes.Buffer{}))
	require.NoError(t, err)
	var states []string
	for _, seg := range pg.Map.Segments {
		require.Len(t, seg.Blocks, 1)
		states = append(states, fmt.Sprint(seg.Blocks[0].ID, " ", seg.Blocks[0].State))
	}
	assert.Equal(t, []string{"0 held", "2 active", "3 active", "4 active"}, states)
	assert.Equal(t, replayPeakManaged(t, events), pg.PeakManaged.Bytes)
}

func TestVizSitedTraceWithSegments(t *testing.T) {
	events := readEvents(t, writeTemp(t, "t.tsv", sitedTrace))
	pg, err := tracePage(events, "arena", newProgress(&bytes.Buffer{}))
	require.NoError(t, err)
	assert.Equal(t, 13, pg.Events, "segment events are moments too")
	assert.Equal(t, "trace", pg.ManagedFrom, "the managed bytes are the pool's own")
	assert.Equal(t, []int64{1, 2 << 20, 6, 4 << 20, 12, 2 << 20}, pg.Managed)
	assert.Equal(t, peak{Bytes: 4 << 20, Moment: 6}, pg.PeakManaged)
	assert.Equal(t, peak{Bytes: handMadePeak, Moment: 7}, pg.PeakActive)
	assert.Equal(t, []int{2, 3, 5, 7, 10}, pg.Allocs.A)
	assert.Equal(t, []int{4, 9, 8, 11, 13}, pg.Allocs.F)
	assert.Equal(t, []int{1, 2, 1, 2, 0}, pg.Allocs.Queue)
	assert.Equal(t, 2, pg.Queues)
	site := func(i int) string { return pg.Sites[i] }
	assert.Equal(t, "solver.go:40:main.solve < main.go:30:main.main", site(pg.Allocs.Site[1]))
	assert.Equal(t, "kernel.go:99:main.step (inlined)", site(pg.Allocs.Site[3]), "a site with spaces")
	assert.Equal(t, "kernel.go:120:main.step (inlined)", site(pg.Allocs.FreeSite[3]))
	assert.Equal(t, "", site(pg.Allocs.Site[4]), "- is no site")
	assert.NotContains(t, strings.Join(pg.Notes, " "), "no queue and site columns")
	assert.Equal(t, normalize(pg.Map.Segments), stepsAt(t, pg, pg.Map.Moment))
	for k := range pg.Steps.Count {
		if events := events; k > 0 && events[k-1].Op.Segment() {
			assert.Zero(t, pg.Steps.Count[k], "a segment event of the trace changes nothing in the replayed pool")
		}
	}
}

// managedAt returns the page's managed bytes in moment k.
func managedAt(pg page, k int) int64 {
	var v int64
	for i := 0; i < len(pg.Managed); i += 2 {
		if pg.Managed[i] <= int64(k) {
			v = pg.Managed[i+1]
		}
	}
	return v
}

// mapBlock is a block as the steps know it.
type mapBlock struct {
	Seg, Offset, Size int64
	State             string
	ID                int64
}

// normalize returns segs' blocks as the steps know them.
func normalize(segs []pageSegment) []mapBlock {
	var out []mapBlock
	for _, seg := range segs {
		for _, b := range seg.Blocks {
			out = append(out, mapBlock{seg.ID, b.Offset, b.Size, b.State, b.ID})
		}
	}
	return out
}

// stepsAt applies pg's steps from moment 0 to k, as the page does, and
// returns the blocks then, by segment and offset.
func stepsAt(t *testing.T, pg page, k int) []mapBlock {
	t.Helper()
	require.NotNil(t, pg.Steps)
	require.Len(t, pg.Steps.Count, pg.Events+1)
	segs := map[int64]map[int64]mapBlock{}
	o := 0
	for j := 0; j <= k; j++ {
		for range pg.Steps.Count[j] {
			op := pg.Steps.Ops[o : o+5]
			o += 5
			seg, off, size, what, id := op[0], op[1], op[2], op[3], op[4]
			switch what {
			case stepSegmentNew:
				require.NotContains(t, segs, seg, "moment %d: segment %d allocated twice", j, seg)
				segs[seg] = map[int64]mapBlock{}
			case stepSegmentFreed:
				require.Contains(t, segs, seg, "moment %d: segment %d freed but not allocated", j, seg)
				delete(segs, seg)
			case stepRemove:
				require.Contains(t, segs[seg], off, "moment %d: removes no block", j)
				delete(segs[seg], off)
			default:
				state := map[int64]string{stepActive: mempool.StateActive, stepHeld: mempool.StateHeld, stepInactive: mempool.StateInactiveSplit}[what]
				require.NotEmpty(t, state, "moment %d: step %d", j, what)
				segs[seg][off] = mapBlock{seg, off, size, state, id}
			}
		}
	}
	return flatten(segs)
}

// randomTrace returns a trace of n events over many size classes, from seed.
func randomTrace(n int, seed uint64) []trace.Event {
	rng := rand.New(rand.NewPCG(seed, 2))
	var events []trace.Event
	var live []int64
	next := int64(1)
	for len(events) < n {
		if len(live) == 0 || rng.IntN(2) == 0 {
			events = append(events, trace.Event{Op: trace.Alloc, ID: next, Size: 1 << rng.IntN(24) * int64(1+rng.IntN(3))})
			live = append(live, next)
			next++
			continue
		}
		i := rng.IntN(len(live))
		events = append(events, trace.Event{Op: trace.Free, ID: live[i]})
		live = append(live[:i], live[i+1:]...)
	}
	return events
}

func TestVizStepsRebuildThePoolAtEveryMoment(t *testing.T) {
	events := randomTrace(3000, 1)
	for _, policy := range []string{"arena", "bins"} {
		t.Run(policy, func(t *testing.T) {
			pg, err := tracePage(events, policy, newProgress(&bytes.Buffer{}))
			require.NoError(t, err)
			assert.Equal(t, trace.Summarize(events).PeakLiveBytes, pg.PeakActive.Bytes)
			assert.Equal(t, replayPeakManaged(t, events, policyOptions(policy)...), pg.PeakManaged.Bytes)
			assert.Nil(t, pg.X, "no times: moment k is at k")
			assert.Equal(t, int64(len(events)+1), pg.End)

			// A pool of its own, and its snapshot after every event, against
			// the steps applied as the page applies them.
			pool, err := mempool.New(nothing{}, append([]mempool.Option{mempool.WithDropSafety(false), mempool.WithLimit(0)}, policyOptions(policy)...)...)
			require.NoError(t, err)
			live := map[int64]*mempool.PooledBuffer{}
			ids := map[uint64]int64{}
			segs := map[int64]map[int64]mapBlock{}
			o := 0
			for i, ev := range events {
				k := i + 1
				if ev.Op == trace.Alloc {
					b, err := pool.Allocate(ev.Size)
					require.NoError(t, err)
					live[ev.ID], ids[b.ID()] = b, ev.ID
				} else {
					require.NoError(t, live[ev.ID].Close())
				}
				applySteps(pg.Steps, k, &o, segs)
				want := normalize(pageSegments(pool.Snapshot().Segments, func(id uint64) int64 { return ids[id] }))
				if got := flatten(segs); !assert.Equal(t, want, got, "moment %d", k) {
					return
				}
			}
		})
	}
}

// applySteps applies the steps of moment k, from ops[*o], to segs.
func applySteps(st *steps, k int, o *int, segs map[int64]map[int64]mapBlock) {
	for range st.Count[k] {
		op := st.Ops[*o : *o+5]
		*o += 5
		switch seg, off := op[0], op[1]; op[3] {
		case stepSegmentNew:
			segs[seg] = map[int64]mapBlock{}
		case stepSegmentFreed:
			delete(segs, seg)
		case stepRemove:
			delete(segs[seg], off)
		default:
			state := map[int64]string{stepActive: mempool.StateActive, stepHeld: mempool.StateHeld, stepInactive: mempool.StateInactiveSplit}[op[3]]
			segs[seg][off] = mapBlock{seg, off, op[2], state, op[4]}
		}
	}
}

func flatten(segs map[int64]map[int64]mapBlock) []mapBlock {
	var out []mapBlock
	for _, seg := range segs {
		for _, b := range seg {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b mapBlock) int {
		if a.Seg != b.Seg {
			return int(a.Seg - b.Seg)
		}
		return int(a.Offset - b.Offset)
	})
	return out
}

func TestVizRejectsBadInputAndWritesNothing(t *testing.T) {
	good := writeTemp(t, "good.tsv", handMadeTrace)
	for _, tc := range []struct {
		name string
		args []string // the output file is added before them
		text string   // if not empty, the input file, added after them
		want string
	}{
		{"no file", nil, "", "want one trace or snapshot file"},
		{"two files", []string{good, good}, "", "want one trace or snapshot file"},
		{"unknown policy", []string{"-policy", "buddy", good}, "", `-policy "buddy": want arena or bins`},
		{"no such file", []string{"no-such-file.tsv"}, "", "no-such-file.tsv"},
		{"empty trace", nil, "op\tid\tsize\n", "t.in: the trace has no events"},
		{"bad trace", nil, "a\t1\t8\nf\t2\t0\n", "t.in:2: free of block 2, which is not live"},
		{"a trace cut mid-line", nil, "op\tid\tsize\tt\na\t1\t8\t100\na\t3628\t237568\t186", "t.in:3:"},
		{"bad JSON", nil, `{"policy": "arena", `, "t.in: reading the snapshot: unexpected EOF"},
		{"JSON that is no snapshot", nil, `{"op": "a"}`, "t.in: a JSON object, but not a pool snapshot"},
		{"blocks that leave a gap", nil, `{"policy":"arena","segments":[{"id":1,"size":8192,"blocks":[{"offset":4096,"size":4096,"state":"held"}]}]}`,
			"t.in: segment 1: block at offset 4096 of 4096 bytes: the blocks do not tile the segment"},
		{"blocks short of the segment", nil, `{"policy":"arena","segments":[{"id":1,"size":8192,"blocks":[{"offset":0,"size":4096,"state":"held"}]}]}`,
			"t.in: segment 1: its blocks cover 4096 of its 8192 bytes"},
		{"unknown state", nil, `{"policy":"arena","segments":[{"id":1,"size":4096,"blocks":[{"offset":0,"size":4096,"state":"lost"}]}]}`,
			`t.in: segment 1: block at offset 0: unknown state "lost"`},
		// The page's script holds ids as float64: past 2^53 two ids would
		// be one block.
		{"block ids past 2^53", nil, "a 9007199254740993 100\na 9007199254740992 200\nf 9007199254740993 0\nf 9007199254740992 0\n",
			"t.in: event 1: block id 9007199254740993 is past ±(2^53-1), the largest the page's script tells apart from the next"},
		{"block ids below -2^53", nil, "a 1 100\na -9007199254740992 200\n", "t.in: event 2: block id -9007199254740992 is past ±(2^53-1)"},
		{"a snapshot's block id past 2^53", nil, `{"policy":"arena","segments":[{"id":1,"size":4096,"blocks":[{"offset":0,"size":4096,"state":"active","block_id":9007199254740993}]}]}`,
			"t.in: segment 1: block at offset 0: block id 9007199254740993 is past ±(2^53-1)"},
		{"a snapshot's segment id past 2^53", nil, `{"policy":"arena","segments":[{"id":9007199254740993,"size":4096,"blocks":[{"offset":0,"size":4096,"state":"held"}]}]}`,
			"t.in: segment id 9007199254740993 is past ±(2^53-1)"},
		{"a history's block id past 2^53", nil, `{"policy":"arena","segments":[],"history":[{"op":"f","id":7,"size":0,"t":5},{"op":"a","id":9007199254740993,"size":100,"t":50}]}`,
			"t.in: the history's event 2: block id 9007199254740993 is past ±(2^53-1)"},
		// A snapshot's history is checked as a trace file is.
		{"a history going backwards", nil, `{"policy":"arena","segments":[],"history":[{"op":"a","id":1,"size":100,"t":50},{"op":"a","id":2,"size":100,"t":9}]}`,
			"t.in: the history, less its frees of blocks and segments from before it: trace: event 2: time 9 ns is before the 50 ns of event 1"},
		{"a history allocating a live block", nil, `{"policy":"arena","segments":[],"history":[{"op":"a","id":1,"size":100,"t":5},{"op":"a","id":1,"size":100,"t":9}]}`,
			"t.in: the history, less its frees of blocks and segments from before it: trace: event 2: block 1 allocated while live"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "mem.html")
			args := append([]string{"viz", "-o", out}, tc.args...)
			if tc.text != "" {
				args = append(args, writeTemp(t, "t.in", tc.text))
			}
			var stdout, stderr bytes.Buffer
			assert.Equal(t, 1, run(args, &stdout, &stderr))
			assert.Contains(t, stderr.String(), "clpool viz: ")
			assert.Contains(t, stderr.String(), tc.want)
			assert.Equal(t, 1, strings.Count(stderr.String(), "clpool viz:"), "one prefix")
			assert.NoFileExists(t, out)
		})
	}
}

// segmentsOnly is a recorded trace with the pool's segment events and no
// block event: the format accepts it, and so does viz (replay and plan
// have nothing to replay).
const segmentsOnly = "op\tid\tsize\tt\tqueue\tsite\n" +
	"A\t1\t2097152\t900\t1\tmain.go:12:main.setup\n" +
	"F\t1\t2097152\t9500\t-\t-\n"

// The page of a trace with no block event has steps, none of them a
// block's: an empty list, not null, which the script's reading of
// steps.ops.length threw on.
func TestVizPageOfATraceOfSegmentsOnlyHasNoNullSteps(t *testing.T) {
	pg, err := loadPage(writeTemp(t, "segments.tsv", segmentsOnly), "arena", newProgress(io.Discard))
	require.NoError(t, err, "viz accepts the trace")
	raw, err := json.Marshal(pg)
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"steps":{"count":[0,0,0],"ops":[]}`)
	assert.Contains(t, string(raw), `"segments":[]`)
	assert.Equal(t, peak{Bytes: 2 << 20, Moment: 1}, pg.PeakManaged, "the trace's own segment")
}

// The map of a trace numbered from 0, or below, has the trace's ids, 0
// and negative ones included, as the steps do: the page checks that the
// steps lead to the map. (The map's blocks were mempool.BlockSnapshots,
// whose ID, a uint64 left out when 0, lost block 0 and wrapped -1.) Ids
// as far from 0 as the page tells apart are kept as they are.
func TestVizMapHasTheTracesIDsOfZeroAndBelow(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       []int64 // the map's active blocks' ids, by segment and offset
	}{
		{"from 0", "a 0 100\na 1 200\nf 0 0\n", []int64{0, 1}},
		{"negative", "a -1 100\nf -1 0\n", []int64{-1}},
		{"at ±(2^53-1)", "a 9007199254740991 100\na -9007199254740991 200\nf 9007199254740991 0\n", []int64{9007199254740991, -9007199254740991}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pg, err := loadPage(writeTemp(t, "t.tsv", tc.text), "arena", newProgress(io.Discard))
			require.NoError(t, err)
			var ids []int64
			for _, b := range normalize(pg.Map.Segments) {
				if b.State == mempool.StateActive {
					ids = append(ids, b.ID)
				}
			}
			assert.Equal(t, tc.want, ids)
			assert.Equal(t, normalize(pg.Map.Segments), stepsAt(t, pg, pg.Map.Moment), "the steps lead to the map")
			raw, err := json.Marshal(pg.Map)
			require.NoError(t, err)
			assert.Contains(t, string(raw), fmt.Sprintf(`"state":"active","block_id":%d`, tc.want[0]))
		})
	}
}

// viz replays a trace through a pool of its own: CLPOOL_MEMORY_LIMIT and
// CLPOOL_SANITIZE, meant for the user's program, change nothing it draws
// (the sanitizer's guard bytes and lack of queue caches changed the
// managed bytes and segments) and fail nothing (a value New refuses).
func TestVizIgnoresThePoolEnvironment(t *testing.T) {
	events := readEvents(t, filepath.Join(repoRoot, "testdata", "cg.tsv"))
	want, err := tracePage(events, "arena", newProgress(io.Discard))
	require.NoError(t, err)
	for _, env := range [][2]string{{mempool.SanitizeEnv, "1"}, {mempool.SanitizeEnv, "yes"}, {mempool.LimitEnv, "1"}} {
		t.Run(env[0]+"="+env[1], func(t *testing.T) {
			t.Setenv(env[0], env[1])
			got, err := tracePage(events, "arena", newProgress(io.Discard))
			require.NoError(t, err)
			assert.Equal(t, want.PeakManaged, got.PeakManaged, "the managed bytes of the same replay")
			assert.Equal(t, want.Map, got.Map)
			assert.Equal(t, want.Steps, got.Steps)
		})
	}
}

func TestRunListsViz(t *testing.T) {
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 0, run([]string{"help"}, &stdout, &stderr))
	assert.Contains(t, stdout.String(), "viz       draw a trace or a pool snapshot")
}

// The hand-made snapshot: a pool whose history began at 1 s, after block
// 100 (20000 bytes, at model.go:5) was allocated; the history, recorded
// with sites, allocates blocks 1 (3000 bytes, on queue 1) and 2 (700000,
// on queue 2), frees 1, and frees a block from before it (7). Its
// segments hold 100 and 2 active, with sites and queues.
const snapshotByHand = `{
  "time": "2026-01-02T03:04:05Z", "policy": "arena", "device": "pthread-cpu",
  "managed_bytes": 4194304, "active_bytes": 720000, %s
  "segments": [
    {"id": 1, "size": 2097152, "small": true, "blocks": [
      {"offset": 0, "size": 20480, "requested": 20000, "state": "active", "queue": 1, "block_id": 824634000000, "site": "model.go:5:main.load"},
      {"offset": 20480, "size": 2076672, "state": "inactive_split"}]},
    {"id": 2, "size": 2097152, "blocks": [
      {"offset": 0, "size": 700416, "requested": 700000, "state": "active", "queue": 2, "block_id": 824634000100, "site": "kernel.go:99:main.step < main.go:30:main.main"},
      {"offset": 700416, "size": 1396736, "state": "inactive_split"}]}
  ],
  "history": [
    {"op": "f", "id": 7, "size": 0, "t": 1000000000, "queue": 1, "site": "model.go:9:main.load"},
    {"op": "a", "id": 1, "size": 3000, "t": 1000100000, "queue": 1, "site": "model.go:7:main.load"},
    {"op": "a", "id": 2, "size": 700000, "t": 1000200000, "queue": 2, "site": "kernel.go:99:main.step < main.go:30:main.main"},
    {"op": "f", "id": 1, "size": 0, "t": 1000300000, "queue": 1, "site": "model.go:9:main.load"}
  ]
}`

func TestVizReadsASnapshot(t *testing.T) {
	path := writeTemp(t, "snap.json", fmt.Sprintf(snapshotByHand, `"peak_managed_bytes": 10485760, "peak_active_bytes": 9000000,`))
	pg, err := loadPage(path, "arena", newProgress(&bytes.Buffer{}))
	require.NoError(t, err)
	assert.Equal(t, "snapshot", pg.Source)
	assert.Equal(t, 3, pg.Events, "the free of block 7, allocated before the history, is left out")
	assert.Nil(t, pg.Managed, "a snapshot knows its managed bytes only at its moment")
	assert.Nil(t, pg.Steps)
	assert.Equal(t, int64(1000100000)-2000, pg.X[0], "the axis starts just before the history (a hundredth of its span), not at 0")
	assert.Equal(t, []int64{1000100000, 1000200000, 1000300000}, pg.X[1:])
	assert.Equal(t, int64(1000300000+100000), pg.End, "the last state lasts the events' mean spacing")
	assert.Equal(t, allocTable{
		ID:       []int64{824634000000, 1, 2},
		Size:     []int64{20000, 3000, 700000},
		A:        []int{0, 1, 2},
		F:        []int{0, 3, 0},
		Site:     []int{1, 2, 3},
		FreeSite: []int{0, 4, 0},
		Queue:    []int{1, 1, 2},
	}, pg.Allocs, "block 100 was allocated before the history: a band from its start; 2 is the history's")
	assert.Equal(t, []string{"", "model.go:5:main.load", "model.go:7:main.load", "kernel.go:99:main.step < main.go:30:main.main", "model.go:9:main.load"}, pg.Sites)
	assert.Equal(t, 2, pg.Queues)
	assert.Equal(t, peak{Bytes: 10485760, Moment: -1, Note: "the pool's peak, at a moment the snapshot does not record"}, pg.PeakManaged)
	assert.Equal(t, int64(9000000), pg.PeakActive.Bytes)
	assert.Equal(t, -1, pg.PeakActive.Moment)
	assert.Equal(t, 3, pg.Map.Moment, "the map is at the history's end")
	assert.Contains(t, strings.Join(pg.Notes, " "), "the 1 frees of other blocks allocated before it are left out")

	// A snapshot from before the pool's peaks were in it: the peaks are the
	// history's and the snapshot's own.
	pg, err = loadPage(writeTemp(t, "old.json", fmt.Sprintf(snapshotByHand, "")), "arena", newProgress(&bytes.Buffer{}))
	require.NoError(t, err)
	assert.Equal(t, peak{Bytes: 4194304, Moment: 3, Note: "at the snapshot"}, pg.PeakManaged)
	assert.Equal(t, peak{Bytes: 723000, Moment: 2}, pg.PeakActive, "20000 + 3000 + 700000")
	assert.Contains(t, strings.Join(pg.Notes, " "), "does not have the pool's peaks")

	// No history.
	var s map[string]any
	require.NoError(t, json.Unmarshal([]byte(fmt.Sprintf(snapshotByHand, "")), &s))
	delete(s, "history")
	raw, err := json.Marshal(s)
	require.NoError(t, err)
	pg, err = loadPage(writeTemp(t, "nohist.json", string(raw)), "arena", newProgress(&bytes.Buffer{}))
	require.NoError(t, err)
	assert.Zero(t, pg.Events)
	assert.Equal(t, []int{0, 0}, pg.Allocs.A, "the two active blocks, from the start")
	assert.Equal(t, peak{Bytes: 720000, Moment: 0, Note: "at the snapshot"}, pg.PeakActive)
	assert.Contains(t, strings.Join(pg.Notes, " "), "The snapshot has no history")
}

func TestVizOfARealPoolsSnapshot(t *testing.T) {
	pool, err := mempool.New(nothing{}, mempool.WithArena(), mempool.WithDropSafety(false), mempool.WithLimit(0))
	require.NoError(t, err)
	var blocks []*mempool.PooledBuffer
	for i := range 40 {
		b, err := pool.Allocate(int64(1000 + 5000*i))
		require.NoError(t, err)
		blocks = append(blocks, b)
	}
	for _, b := range blocks[:30] {
		require.NoError(t, b.Close())
	}
	snap := pool.Snapshot()
	raw, err := json.Marshal(snap)
	require.NoError(t, err)
	pg, err := loadPage(writeTemp(t, "snap.json", string(raw)), "arena", newProgress(&bytes.Buffer{}))
	require.NoError(t, err)
	assert.Equal(t, snap.ActiveBytes, func() (s int64) {
		for _, v := range pg.Allocs.Size {
			s += v
		}
		return s
	}(), "the active blocks are drawn")
	assert.Equal(t, pool.Stats().PeakManagedBytes, pg.PeakManaged.Bytes, "the pool's own peak")
	assert.Equal(t, pool.Stats().PeakActiveBytes, pg.PeakActive.Bytes)
}

// A snapshot of a pool with a History that records sites: the history's
// blocks have their sites, and their queues numbered as the snapshot's
// blocks are; a block from before the history, of the size of one the
// history leaves live, is told apart from it by its queue and site.
func TestVizOfASnapshotWithASitedHistory(t *testing.T) {
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	pool := pooltest.New(t, q)
	old, err := pool.Allocate(1000) // before the history, on q: the pool's queue 1
	require.NoError(t, err)
	h := memhooks.NewHistory(100, memhooks.WithSites())
	pool.AddHook(h)
	b1, err := pool.On(q2).Allocate(1000) // old's size, on the pool's queue 2, the history's 1
	require.NoError(t, err)
	b2, err := pool.Allocate(5000)
	require.NoError(t, err)
	tmp, err := pool.Allocate(300)
	require.NoError(t, err)
	require.NoError(t, tmp.Close())
	raw, err := json.Marshal(pool.Snapshot())
	require.NoError(t, err)
	for _, b := range []*mempool.PooledBuffer{old, b1, b2} {
		require.NoError(t, b.Close())
	}

	pg, err := loadPage(writeTemp(t, "snap.json", string(raw)), "arena", newProgress(&bytes.Buffer{}))
	require.NoError(t, err)
	a := pg.Allocs
	require.Len(t, a.ID, 4, "old, then the history's three")
	assert.Equal(t, []int64{int64(old.ID()), 1, 2, 3}, a.ID, "old is the band from before the history, not b1")
	assert.Equal(t, []int64{1000, 1000, 5000, 300}, a.Size)
	assert.Equal(t, []int{1, 2, 1, 1}, a.Queue, "the pool's numbers, the history's included")
	assert.Equal(t, 2, pg.Queues)
	assert.Empty(t, pg.Sites[a.Site[0]], "old's site is not known")
	for i := 1; i < 4; i++ {
		assert.Regexp(t, `^viz_test\.go:\d+:clpool\.TestVizOfASnapshotWithASitedHistory$`, pg.Sites[a.Site[i]], "allocation %d", i)
	}
	assert.NotEqual(t, a.Site[1], a.Site[2])
	assert.Contains(t, strings.Join(pg.Notes, " "), "told apart by size, queue and site")
}

func TestProgressCountDrawsABarOnlyOnATerminal(t *testing.T) {
	var buf bytes.Buffer
	p := &progress{w: &buf, terminal: true}
	for i := range int64(1000) {
		p.count("replaying", i+1, 1000)
	}
	p.done()
	out := buf.String()
	assert.Equal(t, 101, strings.Count(out, "\rreplaying"), "drawn once for each percentage, 0 to 100")
	assert.Contains(t, out, "] 100%")
	assert.True(t, strings.HasSuffix(out, "\n"), "done ends the line")

	buf.Reset()
	p = newProgress(&buf) // a buffer is no terminal
	p.count("replaying", 1, 2)
	p.done()
	assert.Empty(t, buf.String())
}

// A History that wrapped has lost the allocation of a segment that is
// still live, but keeps other segments' events: its WriteTrace writes
// that allocation first, so that viz, which takes the managed bytes from
// the trace's segment events ("the pool's own"), never draws less
// managed memory than active memory.
func TestVizOfAWrappedHistoryKeepsManagedAboveActive(t *testing.T) {
	p := pooltest.New(t, nil)
	warm, err := p.Allocate(4000) // the small blocks' segment, before the History
	require.NoError(t, err)
	require.NoError(t, warm.Close())

	before := p.Stats().ManagedBytes // the small segment: the History cannot know it
	h := memhooks.NewHistory(40)
	p.AddHook(h)
	big, err := p.Allocate(4 << 20) // a segment of its own, whose "A" leaves the ring
	require.NoError(t, err)
	for range 30 {
		b, err := p.Allocate(4000)
		require.NoError(t, err)
		require.NoError(t, b.Close())
	}
	big2, err := p.Allocate(8 << 20) // another segment, whose "A" stays
	require.NoError(t, err)
	for range 10 {
		b, err := p.Allocate(4000)
		require.NoError(t, err)
		require.NoError(t, b.Close())
	}
	managed := p.Stats().ManagedBytes

	var out bytes.Buffer
	require.NoError(t, h.WriteTrace(&out))
	events, err := trace.ReadComplete(bytes.NewReader(out.Bytes()))
	require.NoError(t, err)
	require.True(t, trace.Summarize(events).Allocs > 0)
	path := filepath.Join(t.TempDir(), "history.tsv")
	require.NoError(t, os.WriteFile(path, out.Bytes(), 0o644))

	pg, err := loadPage(path, "bins", newProgress(&bytes.Buffer{}))
	require.NoError(t, err)
	require.Equal(t, "trace", pg.ManagedFrom)
	// No segment was freed while the History ran: the segments it saw
	// allocated (both big blocks') are all live at the trace's end.
	assert.Equal(t, managed-before, pg.PeakManaged.Bytes, "the page's peak managed, \"the pool's own, from the trace's segment events\"")
	var active int64
	for i, ev := range events {
		switch ev.Op {
		case trace.Alloc:
			active += ev.Size
		case trace.Free:
			active -= pg.Allocs.Size[slices.Index(pg.Allocs.ID, ev.ID)]
		}
		if !assert.GreaterOrEqual(t, managedAt(pg, i+1), active, "moment %d: the page's managed bytes are below its active bytes", i+1) {
			break
		}
	}

	for _, b := range []*mempool.PooledBuffer{big, big2} {
		require.NoError(t, b.Close())
	}
}

// A History without sites beside a LineProfile (which names the
// snapshot's active blocks' sites): the history's blocks have no site,
// the snapshot's have one, so no block matches by size, queue and site;
// viz matches them by size and queue then, before the size alone: the
// block from before the history on queue 1 is not taken for the
// history's block of its size on queue 2.
func TestVizSnapshotMatchesBySizeAndQueueWithoutHistorySites(t *testing.T) {
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	pool := pooltest.New(t, q)
	pool.AddHook(memhooks.NewLineProfile())
	old, err := pool.Allocate(1000) // before the history, on the pool's queue 1
	require.NoError(t, err)
	h := memhooks.NewHistory(100) // no sites
	pool.AddHook(h)
	b1, err := pool.On(q2).Allocate(1000) // old's size, on the pool's queue 2
	require.NoError(t, err)
	raw, err := json.Marshal(pool.Snapshot())
	require.NoError(t, err)
	for _, b := range []*mempool.PooledBuffer{old, b1} {
		require.NoError(t, b.Close())
	}

	pg, err := loadPage(writeTemp(t, "snap.json", string(raw)), "bins", newProgress(&bytes.Buffer{}))
	require.NoError(t, err)
	a := pg.Allocs
	require.Len(t, a.ID, 2)
	assert.Equal(t, []int64{int64(old.ID()), 1}, a.ID, "old is the band from before the history")
	assert.ElementsMatch(t, []int{1, 2}, a.Queue, "one block on each queue")
}

// A snapshot's active blocks are matched to its history's live blocks by
// size, queue and site first, then by size and queue, and by size alone
// last: the blocks left are those from before the history.
func TestBlocksBeforeMatchesSiteThenQueueThenSize(t *testing.T) {
	active := []mempool.BlockSnapshot{
		{ID: 1, Requested: 1000, Queue: 1, Site: "a.go:1:f"}, // from before
		{ID: 2, Requested: 1000, Queue: 2, Site: "b.go:2:g"}, // size and queue
		{ID: 3, Requested: 500, Queue: 1, Site: "x.go:3:h"},  // size, queue and site
		{ID: 4, Requested: 500, Queue: 1, Site: "y.go:4:i"},  // from before: site taken
		{ID: 5, Requested: 700, Queue: 1},                    // size alone
	}
	live := map[int64]blockKey{
		7: {size: 500, queue: 1, site: "x.go:3:h"},
		8: {size: 1000, queue: 2},
		9: {size: 700, queue: 3},
	}
	var ids []uint64
	for _, bl := range blocksBefore(live, active) {
		ids = append(ids, bl.ID)
	}
	assert.Equal(t, []uint64{1, 4}, ids)
}
