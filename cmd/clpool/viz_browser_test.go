package main

// The tests that open viz's pages in headless Chromium, over the DevTools
// protocol (cdp_test.go), and act on them with the mouse: the DOM, the
// canvas and the page's own read-only state (window.clpoolViz) are read
// back after each action. CLPOOL_VIZ_SHOTS=DIR keeps their screenshots in
// DIR.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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

// shot takes a screenshot of the whole page, checks that it is an image
// of the page's width, and keeps it in $CLPOOL_VIZ_SHOTS as name, if set.
func shot(t *testing.T, b *browser, name string, width int) {
	t.Helper()
	path := ""
	if dir := os.Getenv("CLPOOL_VIZ_SHOTS"); dir != "" {
		path = filepath.Join(dir, name)
	}
	img, err := png.Decode(bytes.NewReader(b.screenshot(path)))
	require.NoError(t, err)
	assert.Equal(t, width, img.Bounds().Dx())
}

// point is a place in the viewport, in CSS pixels.
type point struct{ X, Y float64 }

// rendered checks what every page has once drawn: the script ran to its
// end, nothing was thrown or logged as an error, every plot is drawn and
// nothing is fetched.
func rendered(t *testing.T, b *browser) {
	t.Helper()
	assert.Equal(t, "ok", b.evalString(`document.body.dataset.rendered || ""`), "the script ran to its end")
	assert.Empty(t, b.pageProblems(), "no script errors")
	assert.Empty(t, fetches.FindAllString(b.evalString(`document.documentElement.outerHTML`), -1), "the rendered page fetches nothing")
	for _, id := range []string{"timeline", "by-site", "by-queue"} {
		assert.Positive(t, float(t, b.evalString(fmt.Sprintf(`String(document.querySelector("#%s svg").childElementCount)`, id))), "plot #%s is drawn", id)
	}
	assert.NotEmpty(t, b.evalString(`document.getElementById("segments").getAttribute("viewBox") || ""`))
}

// attrOf returns the attribute of the first element the selector finds.
func attrOf(t *testing.T, b *browser, selector, name string) string {
	t.Helper()
	return b.evalString(fmt.Sprintf(`(document.querySelector(%q) || {getAttribute: () => "<none>"}).getAttribute(%q) || ""`, selector, name))
}

func float(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	require.NoError(t, err, "%q", s)
	return v
}

// viewRange returns plot 1's time axis, as drawn.
func viewRange(t *testing.T, b *browser) (float64, float64) {
	t.Helper()
	var v [2]float64
	b.eval(`clpoolViz.view()`, &v)
	assert.Equal(t, v[0], float(t, attrOf(t, b, "#timeline svg", "data-v0")), "the axis is drawn for the view")
	assert.Equal(t, v[1], float(t, attrOf(t, b, "#timeline svg", "data-v1")))
	return v[0], v[1]
}

// xTicks returns the values of plot 1's time axis's labels.
func xTicks(t *testing.T, b *browser) []float64 {
	t.Helper()
	var v []float64
	b.eval(`[...document.querySelectorAll("#timeline svg .xticks text")].map((e) => +e.dataset.value)`, &v)
	return v
}

func TestVizInBrowser(t *testing.T) {
	chrome := chromium(t)
	b := openBrowser(t, chrome, 1400, 1600)

	t.Run("cg.tsv", func(t *testing.T) {
		input := filepath.Join(repoRoot, "testdata", "cg.tsv")
		events := readEvents(t, input)
		b.open(viz(t, input))
		rendered(t, b)
		shot(t, b, "cg.png", 1400)
		assert.Equal(t, strconv.FormatInt(trace.Summarize(events).PeakLiveBytes, 10), attrOf(t, b, "#peak-active", "data-bytes"))
		assert.Equal(t, strconv.FormatInt(replayPeakManaged(t, events, mempool.WithArena()), 10), attrOf(t, b, "#peak-managed", "data-bytes"))
		assert.Positive(t, float(t, attrOf(t, b, "#timeline svg", "data-bands")), "bands are drawn")
		assert.Equal(t, "0", attrOf(t, b, "#timeline svg", "data-v0"))
		assert.Equal(t, strconv.Itoa(len(events)+1), attrOf(t, b, "#timeline svg", "data-v1"), "the axis runs a moment past the last event")
		assert.Contains(t, b.evalString(`document.getElementById("colored-by").textContent`), "size class", "no sites: colored by size class")
		blocks := b.evalString(`String(document.querySelectorAll("#segments rect.block").length)`)
		assert.NotEqual(t, "0", blocks)
		assert.Equal(t, blocks, attrOf(t, b, "#segments", "data-blocks"))
	})

	t.Run("hover, pin, zoom, pan and scrub a sited trace", func(t *testing.T) {
		input := writeTemp(t, "sited.tsv", sitedTrace)
		events := readEvents(t, input)
		pg, err := tracePage(events, "arena", newProgress(&bytes.Buffer{}))
		require.NoError(t, err)
		b.open(viz(t, input))
		rendered(t, b)
		assert.Equal(t, strconv.Itoa(handMadePeak), attrOf(t, b, "#peak-active", "data-bytes"))
		assert.Equal(t, "5000", attrOf(t, b, "#peak-active", "data-x"), "at 5 µs")
		assert.Equal(t, strconv.Itoa(4<<20), attrOf(t, b, "#peak-managed", "data-bytes"), "the trace's own segments: 2 MiB + 2 MiB")
		assert.Contains(t, b.evalString(`document.getElementById("colored-by").textContent`), "call site")

		// Hover block 4 at 5.5 µs: it lies on blocks 2 and 3 (3000 + 700000 bytes).
		var p point
		b.eval(`clpoolViz.point(5500, 703000 + 750000)`, &p)
		b.mouse("mouseMoved", p.X, p.Y, false, 0)
		b.settle()
		tip := b.evalString(`document.getElementById("tooltip").textContent`)
		assert.Contains(t, tip, "block 4 · 1.431 MiB (1,500,000 B)")
		assert.Contains(t, tip, "site kernel.go:99:main.step (inlined)", "the hovered band's site")
		assert.Contains(t, tip, "queue 2")
		assert.Contains(t, tip, "allocated at event 7, at 5 µs")
		assert.Contains(t, tip, "freed at event 11, at 9 µs, after 4 µs")
		assert.Equal(t, "block", b.evalString(`getComputedStyle(document.getElementById("tooltip")).display`))
		assert.Equal(t, "4", attrOf(t, b, "#timeline", "data-hovered"))

		// Block 2's site is a stack. At this scale block 2 is a fifth of a
		// pixel thick: the pointer finds it from a pixel away.
		b.eval(`clpoolViz.point(2500, 1000)`, &p)
		b.mouse("mouseMoved", p.X, p.Y-1, false, 0)
		b.settle()
		tip = b.evalString(`document.getElementById("tooltip").textContent`)
		assert.Contains(t, tip, "block 2 ")
		assert.Contains(t, tip, "stack, innermost first:\n  solver.go:40:main.solve\n  main.go:30:main.main")

		// A click pins block 4; the map shows it pinned.
		b.eval(`clpoolViz.point(5500, 703000 + 750000)`, &p)
		b.click(p.X, p.Y, false)
		assert.Equal(t, "4", attrOf(t, b, "#timeline", "data-pinned"))
		assert.Equal(t, "4", attrOf(t, b, "#pinned", "data-id"))
		assert.Contains(t, b.evalString(`document.getElementById("pinned-text").textContent`), "kernel.go:99:main.step (inlined)")
		assert.Equal(t, "4", attrOf(t, b, "#segments rect.pinned", "data-id"))
		b.mouse("mouseMoved", p.X, p.Y+400, false, 0) // away: the pin stays
		b.settle()
		assert.Equal(t, "4", attrOf(t, b, "#timeline", "data-pinned"))
		shot(t, b, "sited.png", 1400)

		// Brush from 4 µs to 8 µs: the axis shows that range, and its
		// labels lie within it.
		var from, to point
		b.eval(`clpoolViz.point(4000, 0)`, &from)
		b.eval(`clpoolViz.point(8000, 0)`, &to)
		b.drag(from.X, to.X, p.Y-20, false)
		v0, v1 := viewRange(t, b)
		pixel := 10758.0 / float(t, b.evalString(`String(document.querySelector("#timeline svg").getBoundingClientRect().width - 80)`))
		assert.InDelta(t, 4000, v0, 2*pixel, "zoomed from 4 µs")
		assert.InDelta(t, 8000, v1, 2*pixel, "to 8 µs")
		ticks := xTicks(t, b)
		require.NotEmpty(t, ticks)
		assert.GreaterOrEqual(t, ticks[0], v0)
		assert.LessOrEqual(t, ticks[len(ticks)-1], v1)
		assert.Contains(t, b.evalString(`document.getElementById("view-range").textContent`), " of 0.0 – 10.8 µs")
		var g0, g1 float64
		g0 = float(t, attrOf(t, b, "#by-site svg", "data-v0"))
		g1 = float(t, attrOf(t, b, "#by-queue svg", "data-v1"))
		assert.Equal(t, v0, g0, "the grouped plots follow")
		assert.Equal(t, v1, g1)
		assert.Equal(t, "4", attrOf(t, b, "#timeline", "data-pinned"), "zooming is no click")

		// Shift-drag pans left by a quarter of the plot: the view moves
		// by a quarter of its span.
		var w float64
		b.eval(`document.querySelector("#timeline svg").getBoundingClientRect().width - 80`, &w)
		b.drag(from.X+w/2, from.X+w/4, p.Y-20, true)
		p0, p1 := viewRange(t, b)
		assert.InDelta(t, (v1-v0)/4, p0-v0, 2*pixel, "panned")
		assert.InDelta(t, v1-v0, p1-p0, 1e-6, "a pan keeps the span")

		// A double click zooms out.
		b.click(from.X, p.Y-20, true)
		v0, v1 = viewRange(t, b)
		assert.Equal(t, []float64{0, 10758}, []float64{v0, v1})

		// The scrubber: one event back from the peak, then to the peak.
		assert.Equal(t, "7", attrOf(t, b, "#moment", "data-moment"))
		clickOn(t, b, "#prev")
		assert.Equal(t, "6", attrOf(t, b, "#moment", "data-moment"))
		want := stepsAt(t, pg, 6)
		var active, inactive int64
		for _, bl := range want {
			switch bl.State {
			case mempool.StateActive:
				active++
			case mempool.StateInactiveSplit:
				inactive += bl.Size
			}
		}
		assert.Equal(t, strconv.FormatInt(active, 10), b.evalString(`String(document.querySelectorAll("#segments rect.block[data-state=active]").length)`))
		assert.Equal(t, strconv.FormatInt(inactive, 10), attrOf(t, b, "#segments", "data-inactive"))
		assert.Equal(t, strconv.Itoa(3000+700000), attrOf(t, b, "#segments", "data-active"), "blocks 2 and 3, before 4")
		clickOn(t, b, "#to-peak")
		assert.Equal(t, "7", attrOf(t, b, "#moment", "data-moment"))
		assert.Equal(t, strconv.Itoa(handMadePeak), attrOf(t, b, "#segments", "data-active"))
		assert.Empty(t, b.pageProblems())
	})

	t.Run("the URL's fragment keeps the view, the moment and the pin", func(t *testing.T) {
		out := viz(t, writeTemp(t, "sited.tsv", sitedTrace))
		b.openFragment(out, "#view=4000,8000&at=3&pin=4@7")
		rendered(t, b)
		v0, v1 := viewRange(t, b)
		assert.Equal(t, []float64{4000, 8000}, []float64{v0, v1})
		assert.Equal(t, "3", attrOf(t, b, "#moment", "data-moment"))
		assert.Equal(t, "4", attrOf(t, b, "#timeline", "data-pinned"))
		// A step of the scrubber is written back.
		clickOn(t, b, "#next")
		assert.Equal(t, "#view=4000,8000&at=4&pin=4@7", b.evalString(`location.hash`))
	})

	t.Run("a peak narrower than a pixel, and the last state", func(t *testing.T) {
		// 4000 events of 1 MiB blocks, and one of 64 MiB freed at once:
		// at 1400 pixels, the peak is a tenth of a pixel wide. The last
		// event allocates a block that is never freed.
		var sb strings.Builder
		sb.WriteString("op\tid\tsize\n")
		for i := 1; i <= 2000; i++ {
			fmt.Fprintf(&sb, "a\t%d\t%d\nf\t%d\t0\n", i, 1<<20, i)
			if i == 1000 {
				sb.WriteString("a\t9999\t67108864\nf\t9999\t0\n")
			}
		}
		sb.WriteString("a\t10000\t4194304\n")
		b.open(viz(t, writeTemp(t, "spike.tsv", sb.String())))
		rendered(t, b)
		// Below the peak's dot, the canvas is drawn on: the dot stands on
		// a bar, not above nothing.
		cx := float(t, attrOf(t, b, "#timeline svg circle.peak-active", "cx"))
		cy := float(t, attrOf(t, b, "#timeline svg circle.peak-active", "cy"))
		assert.Equal(t, strconv.Itoa(64<<20), attrOf(t, b, "#timeline svg circle.peak-active", "data-bytes"))
		for _, dy := range []float64{6, 20, 100} {
			assert.Greater(t, canvasAlpha(t, b, "#timeline canvas", cx, cy+dy), 200, "the pixel %v below the peak's dot is drawn", dy)
		}
		// The last state, a 4 MiB block live at the end, has a width: the
		// axis runs past the last event.
		var last, end point
		b.eval(`clpoolViz.point(4003, 2 << 20)`, &last)
		b.eval(`clpoolViz.point(4004, 2 << 20)`, &end)
		assert.Greater(t, end.X-last.X, 0.2)
		x0 := float(t, b.evalString(`String(document.querySelector("#timeline canvas").getBoundingClientRect().left)`))
		assert.Greater(t, canvasAlpha(t, b, "#timeline canvas", math.Floor(end.X-x0)-1, end.Y-float(t, b.evalString(`String(document.querySelector("#timeline canvas").getBoundingClientRect().top)`))), 200,
			"the last state is drawn")
	})

	t.Run("snapshot", func(t *testing.T) {
		path := writeTemp(t, "snap.json", fmt.Sprintf(snapshotByHand, `"peak_managed_bytes": 10485760, "peak_active_bytes": 9000000,`))
		b.open(viz(t, path))
		rendered(t, b)
		shot(t, b, "snapshot.png", 1400)
		assert.Equal(t, "10485760", attrOf(t, b, "#peak-managed", "data-bytes"), "the pool's own peak")
		assert.Contains(t, b.evalString(`document.getElementById("peak-managed").textContent`), "10 MiB")
		assert.Equal(t, "9000000", attrOf(t, b, "#peak-active", "data-bytes"))
		v0, _ := viewRange(t, b)
		assert.Equal(t, float64(1000100000-2000), v0, "the axis starts at the history, not at 0")
		ticks := xTicks(t, b)
		require.NotEmpty(t, ticks)
		assert.Greater(t, ticks[0], 1e9-1, "no label before the history")
		assert.Equal(t, "none", b.evalString(`getComputedStyle(document.getElementById("scrubber")).display`), "one moment: no scrubber")
		assert.Contains(t, b.evalString(`document.getElementById("map-caption").textContent`), "at the snapshot")
		assert.Contains(t, b.evalString(`document.getElementById("sites").textContent`), "model.go:5:main.load")
		// Block 2, the history's, is a band with the site and queue the
		// history recorded: above block 100 (20000 bytes) and block 1
		// (3000) between 1000.2 ms and 1000.3 ms.
		var p point
		b.eval(`clpoolViz.point(1000250000, 400000)`, &p)
		b.mouse("mouseMoved", p.X, p.Y, false, 0)
		b.settle()
		tip := b.evalString(`document.getElementById("tooltip").textContent`)
		assert.Contains(t, tip, "block 2 ")
		assert.Contains(t, tip, "stack, innermost first:\n  kernel.go:99:main.step\n  main.go:30:main.main")
		assert.Contains(t, tip, "queue 2")
		assert.Contains(t, tip, "active at the snapshot")
		// Block 100, from before the history, is a band with its site:
		// zoomed on the history's first 0.1 ms, where it is most of the
		// 23000 bytes active, tall enough to point at.
		var from, to point
		b.eval(`clpoolViz.point(1000100000, 0)`, &from)
		b.eval(`clpoolViz.point(1000190000, 0)`, &to)
		b.drag(from.X, to.X, from.Y-50, false)
		b.eval(`clpoolViz.point(1000150000, 10000)`, &p)
		b.mouse("mouseMoved", p.X, p.Y, false, 0)
		b.settle()
		tip = b.evalString(`document.getElementById("tooltip").textContent`)
		assert.Contains(t, tip, "site model.go:5:main.load")
		assert.Contains(t, tip, "queue 1")
		assert.Contains(t, tip, "allocated before the history began")
		assert.Contains(t, tip, "active at the snapshot")
	})

	t.Run("a trace of segments only", func(t *testing.T) {
		b.open(viz(t, writeTemp(t, "segments.tsv", segmentsOnly)))
		rendered(t, b) // the script threw on steps.ops, null
	})

	t.Run("block ids from 0 and below", func(t *testing.T) {
		for name, tc := range map[string]struct {
			text string
			id   string // the block alone in moment 1, active in the map
		}{
			"from0.tsv":    {"a 0 100\na 1 200\nf 0 0\n", "0"},
			"negative.tsv": {"a -1 100\nf -1 0\n", "-1"},
		} {
			b.open(viz(t, writeTemp(t, name, tc.text)))
			rendered(t, b) // the page's check that its steps lead to the map failed
			var p point
			b.eval(`clpoolViz.point(1.5, 50)`, &p)
			b.mouse("mouseMoved", p.X, p.Y, false, 0)
			b.settle()
			assert.Contains(t, b.evalString(`document.getElementById("tooltip").textContent`), "block "+tc.id+" ", name)
			assert.Equal(t, "active", attrOf(t, b, fmt.Sprintf(`#segments rect.block[data-id="%s"]`, tc.id), "data-state"), name)
		}
	})

	t.Run("very many blocks live at once are summarized", func(t *testing.T) {
		// 6000 blocks, freed oldest first: as bands, each free would move
		// every band above it, 18 million points in all.
		var sb strings.Builder
		var total int64
		sb.WriteString("op\tid\tsize\n")
		for i := 1; i <= 6000; i++ {
			fmt.Fprintf(&sb, "a\t%d\t%d\n", i, (i%50+1)<<10)
			total += int64(i%50+1) << 10
		}
		for i := 1; i <= 6000; i++ {
			fmt.Fprintf(&sb, "f\t%d\t0\n", i)
		}
		b.open(viz(t, writeTemp(t, "fifo.tsv", sb.String())))
		rendered(t, b)
		summarized := float(t, b.evalString(`String(clpoolViz.summarized())`))
		assert.Greater(t, summarized, 1000.0)
		assert.Less(t, summarized, 6000.0, "the largest blocks are still bands")
		var p point
		b.eval(fmt.Sprintf(`clpoolViz.point(6000.5, %d)`, total-total/200), &p)
		b.mouse("mouseMoved", p.X, p.Y, false, 0)
		b.settle()
		assert.Contains(t, b.evalString(`document.getElementById("tooltip").textContent`), "smallest allocations (up to ")
		b.eval(fmt.Sprintf(`clpoolViz.point(6000.5, %d)`, 10<<10), &p)
		b.mouse("mouseMoved", p.X, p.Y, false, 0)
		b.settle()
		assert.Contains(t, b.evalString(`document.getElementById("tooltip").textContent`), "block ", "at the bottom, a band of its own")
		assert.Empty(t, b.pageProblems())
	})

	t.Run("200 segments at 800 pixels", func(t *testing.T) {
		narrow := openBrowser(t, chrome, 800, 1200)
		narrow.open(viz(t, writeTemp(t, "many.json", manySegments(200))))
		rendered(t, narrow)
		shot(t, narrow, "segments-800.png", 800)
		layoutOK(t, narrow, 200)
		labels := float(t, narrow.evalString(`String(document.querySelectorAll("#segments text.seglabel").length)`))
		assert.GreaterOrEqual(t, labels, 100.0, "most segments have a label")

		// Zoom the map on its first quarter: the segments there widen,
		// labels grow and still none overlaps.
		r := struct{ Left, Width, Top float64 }{}
		narrow.eval(`(() => { const r = document.getElementById("segments").getBoundingClientRect(); return {left: r.left, width: r.width, top: r.top}; })()`, &r)
		narrow.drag(r.Left+2, r.Left+r.Width/4, r.Top+20, false)
		var mv [2]float64
		narrow.eval(`clpoolViz.mapView()`, &mv)
		assert.InDelta(t, r.Width/4-2, mv[1]-mv[0], 2, "zoomed to the quarter dragged across")
		layoutOK(t, narrow, -1)
		assert.Greater(t, float(t, narrow.evalString(`String([...document.querySelectorAll("#segments text.seglabel")].filter((e) => e.textContent.includes("MiB")).length)`)), 10.0,
			"zoomed in, labels have room for the sizes")
		shot(t, narrow, "segments-800-zoomed.png", 800)
		narrow.click(r.Left+r.Width/2, r.Top+20, true)
		narrow.eval(`clpoolViz.mapView()`, &mv)
		assert.Equal(t, 0.0, mv[0], "a double click zooms the map out")
		layoutOK(t, narrow, 200)
	})
}

// clickOn clicks the middle of the element the selector finds.
func clickOn(t *testing.T, b *browser, selector string) {
	t.Helper()
	var p point
	b.eval(fmt.Sprintf(`(() => { const r = document.querySelector(%q).getBoundingClientRect(); return {x: r.left + r.width / 2, y: r.top + r.height / 2}; })()`, selector), &p)
	b.click(p.X, p.Y, false)
}

// canvasAlpha returns the alpha of the canvas's pixel at (x, y), in CSS
// pixels from its corner.
func canvasAlpha(t *testing.T, b *browser, selector string, x, y float64) int {
	t.Helper()
	var a int
	b.eval(fmt.Sprintf(`(() => { const c = document.querySelector(%q), d = devicePixelRatio || 1;
		return c.getContext("2d").getImageData(Math.floor(%f * d), Math.floor(%f * d), 1, 1).data[3]; })()`, selector, x, y), &a)
	return a
}

// layoutOK checks the segment map's layout in the page: every segment in
// view is at least 2 pixels wide and inside the map, no two overlap, and
// no label overlaps another or reaches past its segment. want is how many
// segments are in view, or -1 for any.
func layoutOK(t *testing.T, b *browser, want int) {
	t.Helper()
	type box struct{ X, Y, W, H float64 }
	var got struct {
		Width  float64
		Segs   []box
		Labels []box
		Of     []int // the segment each label belongs to
	}
	b.eval(`(() => {
		const svg = document.getElementById("segments"), width = svg.viewBox.baseVal.width;
		const groups = [...svg.querySelectorAll("g.segment")].filter((g) => !g.dataset.gone);
		const segs = groups.map((g) => { const r = g.querySelector("rect.seg").getBBox(); return {x: r.x, y: r.y, w: r.width, h: r.height}; });
		const labels = [], of = [];
		groups.forEach((g, i) => { const l = g.querySelector("text.seglabel"); if (l) { const r = l.getBBox(); labels.push({x: r.x, y: r.y, w: r.width, h: r.height}); of.push(i); } });
		return {width, segs, labels, of};
	})()`, &got)
	if want >= 0 {
		require.Len(t, got.Segs, want, "every segment is drawn")
	}
	overlap := func(a, b box) bool { return a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H }
	for i, s := range got.Segs {
		assert.GreaterOrEqual(t, s.W, 2.0, "segment %d is visible", i)
		assert.GreaterOrEqual(t, s.H, 6.0, "segment %d is visible", i)
		if want >= 0 {
			assert.GreaterOrEqual(t, s.X, -0.01, "segment %d is inside the map", i)
			assert.LessOrEqual(t, s.X+s.W, got.Width+0.01, "segment %d is inside the map", i)
		}
		for j := i + 1; j < len(got.Segs); j++ {
			assert.False(t, overlap(s, got.Segs[j]), "segments %d and %d overlap", i, j)
		}
	}
	for i, l := range got.Labels {
		s := got.Segs[got.Of[i]]
		assert.GreaterOrEqual(t, l.X, math.Max(s.X, 0)-0.5, "label %d starts within its segment", i)
		assert.LessOrEqual(t, l.X+l.W, s.X+s.W+0.5, "label %d ends within its segment", i)
		for j := i + 1; j < len(got.Labels); j++ {
			assert.False(t, overlap(l, got.Labels[j]), "labels %d and %d overlap", i, j)
		}
		for j, s := range got.Segs {
			assert.False(t, overlap(l, s), "label %d overlaps segment %d", i, j)
		}
	}
}

// manySegments returns the JSON of a snapshot of n segments of mixed
// sizes (2 MiB small ones, 20 MiB large ones, a few of 512 KiB and one of
// 1 GiB), each half active.
func manySegments(n int) string {
	s := mempool.Snapshot{Policy: "arena", Segments: []mempool.SegmentSnapshot{}}
	for i := 1; i <= n; i++ {
		size := int64(2 << 20)
		switch {
		case i == 7:
			size = 1 << 30
		case i%10 == 3:
			size = 20 << 20
		case i%25 == 0:
			size = 512 << 10
		}
		s.Segments = append(s.Segments, mempool.SegmentSnapshot{ID: int64(i), Size: size, Small: size <= 2<<20, Blocks: []mempool.BlockSnapshot{
			{Offset: 0, Size: size / 2, Requested: size/2 - 100, State: mempool.StateActive, ID: uint64(1000 + i), Site: fmt.Sprintf("layer%d.go:%d:main.forward", i%7, i)},
			{Offset: size / 2, Size: size / 2, State: mempool.StateInactiveSplit},
		}})
		s.ManagedBytes += size
		s.ActiveBytes += size/2 - 100
	}
	raw, _ := json.Marshal(s)
	return string(raw)
}

func TestVizOfMLPStaysResponsive(t *testing.T) {
	chrome := chromium(t)
	input := filepath.Join(repoRoot, "testdata", "mlp.tsv")
	out := viz(t, input)
	st, err := os.Stat(out)
	require.NoError(t, err)
	assert.Less(t, st.Size(), int64(4<<20), "the page of 26,951 allocations and their segments' steps")

	b := openBrowser(t, chrome, 1400, 1600)
	b.open(out)
	rendered(t, b)
	shot(t, b, "mlp.png", 1400)
	renderMs := float(t, attrOf(t, b, "body", "data-render-ms"))
	t.Logf("mlp.tsv: %.0f ms to render", renderMs)
	assert.Less(t, renderMs, 10000.0, "the page renders in seconds")
	nodes := float(t, b.evalString(`String(document.getElementsByTagName("*").length)`))
	assert.Less(t, nodes, 3000.0, "a canvas, not an element a band")
	assert.Equal(t, "26951", b.evalString(`String(clpoolViz.allocations())`))

	// A redraw of every plot, a hover and a step of the scrubber each take
	// a fraction of a second.
	var ms float64
	b.eval(`(() => { const t = performance.now(); clpoolViz.redrawNow(); return performance.now() - t; })()`, &ms)
	t.Logf("mlp.tsv: %.0f ms to redraw", ms)
	assert.Less(t, ms, 1500.0)
	var p point
	b.eval(`clpoolViz.point(30000, 50 << 20)`, &p)
	b.eval(fmt.Sprintf(`(() => { const s = document.querySelector("#timeline svg"), t = performance.now();
		s.dispatchEvent(new MouseEvent("mousemove", {clientX: %f, clientY: %f, bubbles: true}));
		return performance.now() - t; })()`, p.X, p.Y), &ms)
	t.Logf("mlp.tsv: %.1f ms to hover", ms)
	assert.Less(t, ms, 200.0)
	assert.Contains(t, b.evalString(`document.getElementById("tooltip").textContent`), "block ")
	b.eval(`(() => { const t = performance.now(); document.getElementById("next").click(); return performance.now() - t; })()`, &ms)
	t.Logf("mlp.tsv: %.1f ms to step the scrubber", ms)
	assert.Less(t, ms, 500.0)

	// Zoomed on a thousand events, the bands are wide enough to see.
	var from, to point
	b.eval(`clpoolViz.point(20000, 0)`, &from)
	b.eval(`clpoolViz.point(21000, 0)`, &to)
	b.drag(from.X, to.X, from.Y-100, false)
	v0, v1 := viewRange(t, b)
	assert.InDelta(t, 20000, v0, 60)
	assert.InDelta(t, 21000, v1, 60)
	shot(t, b, "mlp-zoomed.png", 1400)
	assert.Empty(t, b.pageProblems())
}
