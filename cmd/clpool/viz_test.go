package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// handMadeTrace is a small timed trace whose figures are worked out by
// hand: its peak is 3000 + 700000 + 1500000 = 2203000 live bytes, just
// after block 4 is allocated at 5 µs. In an arena, blocks 1 to 3 share a
// small 2 MiB segment (block 1 at offset 0, block 2 at 4096, as in
// mempool's ExamplePool_Snapshot) and block 4 gets a large one.
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
	pool, err := mempool.New(nothing{}, append([]mempool.Option{mempool.WithDropSafety(false)}, opts...)...)
	require.NoError(t, err)
	require.NoError(t, trace.Replay(events, pool.Allocate, (*mempool.PooledBuffer).Close))
	return pool.Stats().PeakManagedBytes
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
	assert.Contains(t, page, `<svg id="timeline"`)
	assert.Contains(t, page, `"events":6614`, "the data is in the page")
	assert.Less(t, len(html), 300_000, "points are sampled: the page stays small")

	// The check itself finds what it should.
	for _, bad := range []string{`<script src="https://cdn.example/d3.js">`, `<img src='http://x/y.png'>`, `<a href="//x/y">`,
		`<link rel="stylesheet" href="s.css">`, `background: url(x.png)`, `<image xlink:href="ftp://x">`} {
		assert.NotEmpty(t, fetches.FindAllString(bad, -1), bad)
	}
}

func TestVizSamplesLongTracesKeepingThePeaks(t *testing.T) {
	// A random trace of 30000 events, over many size classes.
	rng := rand.New(rand.NewPCG(1, 2))
	var events []trace.Event
	var live []int64
	next := int64(1)
	for len(events) < 30000 {
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
	for _, policy := range []string{"arena", "bins"} {
		t.Run(policy, func(t *testing.T) {
			pg, err := tracePage(events, policy, newProgress(&bytes.Buffer{}))
			require.NoError(t, err)
			assert.LessOrEqual(t, len(pg.X), maxPoints+1)
			assert.Greater(t, len(pg.X), maxPoints/2)
			require.Len(t, pg.Managed, len(pg.X))
			assert.Len(t, pg.Layers, maxLayers, "the classes past the 9 largest are one layer")
			assert.Contains(t, pg.Layers[maxLayers-1].Name, "other size classes")
			assert.Equal(t, trace.Summarize(events).PeakLiveBytes, pg.peakActive())
			var opts []mempool.Option
			if policy == "arena" {
				opts = append(opts, mempool.WithArena())
			}
			assert.Equal(t, replayPeakManaged(t, events, opts...), pg.peakManaged())
			assert.Equal(t, pg.peakActive(), pg.Map.ActiveBytes, "the map is at the peak")
			assert.True(t, slices.IsSorted(pg.X), "x only grows")
		})
	}
}

func TestVizTraceMapIsAtThePeakWithTheTracesIDs(t *testing.T) {
	events := readEvents(t, writeTemp(t, "t.tsv", handMadeTrace))
	pg, err := tracePage(events, "arena", newProgress(&bytes.Buffer{}))
	require.NoError(t, err)
	assert.True(t, pg.Timed)
	assert.Equal(t, []int64{0, 1000, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000}, pg.X, "x is the events' times, in ns")
	assert.Equal(t, int64(5000), pg.Map.X)
	assert.Equal(t, int64(handMadePeak), pg.Map.ActiveBytes)
	require.Len(t, pg.Map.Segments, 2)
	type block struct {
		id     uint64
		offset int64
		state  string
	}
	var got []block
	for _, seg := range pg.Map.Segments {
		for _, b := range seg.Blocks {
			got = append(got, block{b.ID, b.Offset, b.State})
		}
	}
	assert.Contains(t, got, block{2, 4096, mempool.StateActive})
	assert.Contains(t, got, block{0, 0, mempool.StateInactiveSplit}, "block 1's place, freed")
	assert.Contains(t, got, block{4, 0, mempool.StateActive})
	assert.Contains(t, pg.Map.Caption, "just after event 5, at 5 µs")
	for _, l := range pg.Layers {
		assert.Len(t, l.Bytes, len(pg.X))
	}
	assert.Equal(t, []string{"(1 MiB, 2 MiB]", "(512 KiB, 1 MiB]", "(2 KiB, 4 KiB]", "(512 B, 1 KiB]", "(64 B, 128 B]"}, layerNames(pg))

	// With bins, each block is a segment of its own, and block 1's is held.
	pg, err = tracePage(events, "bins", newProgress(&bytes.Buffer{}))
	require.NoError(t, err)
	var states []string
	for _, seg := range pg.Map.Segments {
		require.Len(t, seg.Blocks, 1)
		states = append(states, fmt.Sprint(seg.Blocks[0].ID, " ", seg.Blocks[0].State))
	}
	assert.Equal(t, []string{"0 held", "2 active", "3 active", "4 active"}, states)
	assert.Equal(t, replayPeakManaged(t, events), pg.peakManaged())
}

func layerNames(pg page) []string {
	var names []string
	for _, l := range pg.Layers {
		names = append(names, l.Name)
	}
	return names
}

func TestSizeClasses(t *testing.T) {
	for _, tc := range []struct {
		size  int64
		class int
		name  string
	}{
		{0, 0, "≤ 1 B"},
		{1, 0, "≤ 1 B"},
		{2, 1, "(1 B, 2 B]"},
		{3, 2, "(2 B, 4 B]"},
		{4096, 12, "(2 KiB, 4 KiB]"},
		{4097, 13, "(4 KiB, 8 KiB]"},
		{3 << 30, 32, "(2 GiB, 4 GiB]"},
	} {
		assert.Equal(t, tc.class, sizeClass(tc.size), "size %d", tc.size)
		assert.Equal(t, tc.name, sizeClassName(sizeClass(tc.size)), "size %d", tc.size)
	}
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
		{"bad JSON", nil, `{"policy": "arena", `, "t.in: reading the snapshot: unexpected EOF"},
		{"JSON that is no snapshot", nil, `{"op": "a"}`, "t.in: a JSON object, but not a pool snapshot"},
		{"blocks that leave a gap", nil, `{"policy":"arena","segments":[{"id":1,"size":8192,"blocks":[{"offset":4096,"size":4096,"state":"held"}]}]}`,
			"t.in: segment 1: block at offset 4096 of 4096 bytes: the blocks do not tile the segment"},
		{"blocks short of the segment", nil, `{"policy":"arena","segments":[{"id":1,"size":8192,"blocks":[{"offset":0,"size":4096,"state":"held"}]}]}`,
			"t.in: segment 1: its blocks cover 4096 of its 8192 bytes"},
		{"unknown state", nil, `{"policy":"arena","segments":[{"id":1,"size":4096,"blocks":[{"offset":0,"size":4096,"state":"lost"}]}]}`,
			`t.in: segment 1: block at offset 0: unknown state "lost"`},
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

func TestRunListsViz(t *testing.T) {
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 0, run([]string{"help"}, &stdout, &stderr))
	assert.Contains(t, stdout.String(), "viz       draw a trace or a pool snapshot")
}

// snapshotFile writes the JSON of a snapshot of a real pool, over nothing,
// after the events of handMadeTrace up to its peak and then the free of
// block 3, with those events as its history (less the first, whose free
// it keeps: a history's first events can be frees of blocks allocated
// before it) and sites on its active blocks. withHistory false leaves
// the history out. It returns the file and the snapshot.
func snapshotFile(t *testing.T, withHistory bool) (string, mempool.Snapshot) {
	t.Helper()
	pool, err := mempool.New(nothing{}, mempool.WithArena(), mempool.WithDropSafety(false))
	require.NoError(t, err)
	events := readEvents(t, writeTemp(t, "t.tsv", handMadeTrace))[:6]
	live := map[int64]*mempool.PooledBuffer{}
	for _, ev := range events {
		if ev.Op == trace.Alloc {
			live[ev.ID], err = pool.Allocate(ev.Size)
		} else {
			err = live[ev.ID].Close()
		}
		require.NoError(t, err)
	}
	snap := pool.Snapshot()
	if withHistory {
		snap.History = events[1:] // a history that missed the allocation of block 1
	}
	for i := range snap.Segments {
		for j := range snap.Segments[i].Blocks {
			if b := &snap.Segments[i].Blocks[j]; b.State == mempool.StateActive {
				b.Site = "solver.go:" + strconv.FormatInt(b.Size, 10)
			}
		}
	}
	b, err := json.Marshal(snap)
	require.NoError(t, err)
	return writeTemp(t, "snap.json", "\n  "+string(b)), snap
}

func TestVizReadsASnapshot(t *testing.T) {
	path, snap := snapshotFile(t, true)
	pg, err := loadPage(path, "arena", newProgress(&bytes.Buffer{}))
	require.NoError(t, err)
	assert.Equal(t, "snapshot", pg.Source)
	assert.Equal(t, 4, pg.Events, "the free of block 1 is left out")
	assert.Nil(t, pg.Managed, "a snapshot knows its managed bytes only at its moment")
	assert.Equal(t, snap.ManagedBytes, pg.Map.ManagedBytes)
	assert.Equal(t, snap.Segments, pg.Map.Segments)
	assert.Equal(t, int64(handMadePeak), pg.peakActive())
	assert.Equal(t, int64(6000), pg.Map.X, "the snapshot is drawn at the history's end")
	assert.Contains(t, strings.Join(pg.Notes, " "), "1 frees of blocks allocated before it are left out")

	path, _ = snapshotFile(t, false)
	pg, err = loadPage(path, "arena", newProgress(&bytes.Buffer{}))
	require.NoError(t, err)
	assert.Zero(t, pg.Events)
	assert.Contains(t, strings.Join(pg.Notes, " "), "The snapshot has no history")
}

// chromium returns the path of a headless-capable Chromium, skipping the
// test if there is none.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	t.Skip("skipping the browser test: Chromium is not installed (make deps installs it)")
	return ""
}

// render opens the HTML file at path in headless Chromium and returns the
// DOM after the page's script ran, and a screenshot 1400 by 1000 pixels.
func render(t *testing.T, browser, path string) (dom string, screenshot []byte) {
	t.Helper()
	abs, err := filepath.Abs(path)
	require.NoError(t, err)
	shot := filepath.Join(t.TempDir(), "shot.png")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-extensions", "--disable-background-networking", "--disable-component-update",
		"--user-data-dir="+t.TempDir(), "--window-size=1400,1000", "--screenshot="+shot, "--dump-dom", "file://"+abs)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, stderr.String())
	screenshot, err = os.ReadFile(shot)
	require.NoError(t, err, stderr.String())
	return string(out), screenshot
}

// startTag returns the start tag of the element with the id in dom.
func startTag(t *testing.T, dom, id string) string {
	t.Helper()
	tag := regexp.MustCompile(`<[a-z]+\b[^>]*\bid="` + regexp.QuoteMeta(id) + `"[^>]*>`).FindString(dom)
	require.NotEmpty(t, tag, "the rendered page has an element #%s", id)
	return tag
}

// attr returns the value of the attribute name of a start tag, or "".
func attr(tag, name string) string {
	m := regexp.MustCompile(`\s` + regexp.QuoteMeta(name) + `="([^"]*)"`).FindStringSubmatch(tag)
	if m == nil {
		return ""
	}
	return m[1]
}

// element returns what is inside the element with the id in dom, between
// its start tag and its end tag (an element of the same name must not be
// nested in it).
func element(t *testing.T, dom, id string) string {
	t.Helper()
	tag := startTag(t, dom, id)
	name := regexp.MustCompile(`^<([a-z]+)`).FindStringSubmatch(tag)[1]
	inner := dom[strings.Index(dom, tag)+len(tag):]
	end := strings.Index(inner, "</"+name+">")
	require.GreaterOrEqual(t, end, 0, "#%s has an end tag", id)
	return inner[:end]
}

func bytesAttr(t *testing.T, dom, id string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(attr(startTag(t, dom, id), "data-bytes"), 10, 64)
	require.NoError(t, err, "#%s's data-bytes", id)
	return n
}

// checkRendered checks what every rendered page has: the script ran to
// its end, the three plots are drawn, and nothing is fetched.
func checkRendered(t *testing.T, dom string, screenshot []byte) {
	t.Helper()
	bodyTag := regexp.MustCompile(`<body[^>]*>`).FindString(dom)
	assert.Equal(t, "ok", attr(bodyTag, "data-rendered"), "the script ran to its end; error: %s", attr(bodyTag, "data-error"))
	assert.Empty(t, fetches.FindAllString(dom, -1), "the rendered page fetches nothing")
	for _, id := range []string{"timeline", "managed", "segments"} {
		assert.NotEmpty(t, attr(startTag(t, dom, id), "viewBox"), "the script sized plot #%s", id)
		assert.Contains(t, element(t, dom, id), "<", "the script drew in plot #%s", id)
	}
	img, err := png.Decode(bytes.NewReader(screenshot))
	require.NoError(t, err)
	assert.Equal(t, 1400, img.Bounds().Dx())
	assert.Equal(t, 1000, img.Bounds().Dy())
}

func TestVizInBrowser(t *testing.T) {
	browser := chromium(t)

	t.Run("cg.tsv", func(t *testing.T) {
		t.Parallel()
		input := filepath.Join(repoRoot, "testdata", "cg.tsv")
		events := readEvents(t, input)
		dom, shot := render(t, browser, viz(t, input))
		checkRendered(t, dom, shot)
		assert.Equal(t, trace.Summarize(events).PeakLiveBytes, bytesAttr(t, dom, "peak-active"))
		assert.Equal(t, replayPeakManaged(t, events, mempool.WithArena()), bytesAttr(t, dom, "peak-managed"))
		timeline := element(t, dom, "timeline")
		assert.Equal(t, "3", attr(startTag(t, dom, "timeline"), "data-layers"), "cg.tsv has sizes of 3 classes")
		assert.Equal(t, 3, strings.Count(timeline, `<path class="layer"`))
		managed := element(t, dom, "managed")
		assert.Contains(t, managed, `<path class="managed"`)
		assert.Contains(t, managed, `<path class="active"`)
		assert.Contains(t, managed, "peak managed 4 MiB")
		segments := element(t, dom, "segments")
		blocks := strings.Count(segments, `<rect class="block"`)
		assert.Positive(t, blocks)
		assert.Equal(t, strconv.Itoa(blocks), attr(startTag(t, dom, "segments"), "data-blocks"))
	})

	t.Run("hand-made timed trace", func(t *testing.T) {
		t.Parallel()
		input := writeTemp(t, "hand.tsv", handMadeTrace)
		dom, shot := render(t, browser, viz(t, input))
		checkRendered(t, dom, shot)
		assert.Equal(t, int64(handMadePeak), bytesAttr(t, dom, "peak-active"))
		assert.Equal(t, "5000", attr(startTag(t, dom, "peak-active"), "data-x"), "at 5 µs")
		assert.Contains(t, element(t, dom, "peak-active"), "at 5 µs")
		assert.Equal(t, replayPeakManaged(t, readEvents(t, input), mempool.WithArena()), bytesAttr(t, dom, "peak-managed"))
		assert.Equal(t, int64(4<<20), bytesAttr(t, dom, "peak-managed"), "a small segment and a large one, 2 MiB each")
		assert.Equal(t, "2", attr(startTag(t, dom, "segments"), "data-segments"))
		segments := element(t, dom, "segments")
		assert.Contains(t, segments, "<title>block 2 · active\nsize 4 KiB (4096 B)\noffset 4096 in segment 1\nrequested 2.93 KiB (3000 B)</title>")
		assert.Contains(t, segments, "<title>free block · inactive split\nsize 4 KiB (4096 B)\noffset 0 in segment 1</title>")
	})

	t.Run("snapshot", func(t *testing.T) {
		t.Parallel()
		path, snap := snapshotFile(t, true)
		dom, shot := render(t, browser, viz(t, path))
		checkRendered(t, dom, shot)
		assert.Equal(t, int64(handMadePeak), bytesAttr(t, dom, "peak-active"), "the history's peak")
		assert.Equal(t, snap.ManagedBytes, bytesAttr(t, dom, "peak-managed"))
		assert.Contains(t, element(t, dom, "peak-managed"), "at the snapshot")
		assert.Contains(t, element(t, dom, "managed"), "managed at the snapshot")
		assert.Contains(t, element(t, dom, "segments"), "\nsite solver.go:")
		assert.Contains(t, element(t, dom, "sites"), "solver.go:")
		assert.Contains(t, element(t, dom, "notes"), "history")

		path, snap = snapshotFile(t, false)
		dom, shot = render(t, browser, viz(t, path))
		checkRendered(t, dom, shot)
		assert.Equal(t, snap.ActiveBytes, bytesAttr(t, dom, "peak-active"))
		assert.Equal(t, snap.ManagedBytes, bytesAttr(t, dom, "peak-managed"))
		assert.Contains(t, element(t, dom, "notes"), "The snapshot has no history")
		assert.Contains(t, element(t, dom, "managed"), `class="bar-managed"`)
	})
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
