package trace_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
)

// TestBestFitByHand places a few blocks by hand: a freed gap serves the
// next block that fits, the smaller of two gaps that fit comes first, and
// the range comes down as its top block goes; where foresight helps, the
// plan takes less.
func TestBestFitByHand(t *testing.T) {
	// 0: 1, 1024: 2, 1280: 3, 1792: 4; then gaps of 1024 and 512, and
	// 300 bytes (512) in 3's gap; 4 goes, the top comes down to 1792;
	// 1000 bytes (1024) in 1 and 2's merged gap.
	ev := parseEvents(t, "a1:1024, a2:256, a3:512, a4:256, f1, f3, a5:300, f4, f2, a6:1000")
	assert.Equal(t, int64(2048), trace.BestFit(ev, 256))
	ev = append(ev, parseEvents(t, "a7:2048")...)
	assert.Equal(t, int64(1792+2048), trace.BestFit(ev, 256), "on the top, down to 1792")

	ev = parseEvents(t, "a1:256, a2:512, f1, a3:512")
	assert.Equal(t, int64(1280), trace.BestFit(ev, 256), "1's gap is too small for 3")
	assert.Equal(t, int64(1024), trace.Plan(ev, 256).Size, "the plan puts 1 where 3 goes later")
}

// BestFit reads events as Plan does: a free of an id not live is ignored,
// and an allocation of a live id leaves the block it replaces live.
func TestBestFitReadsEventsAsPlanDoes(t *testing.T) {
	assert.Equal(t, int64(512), trace.BestFit(parseEvents(t, "a1:256, f9, a2:256, f2, f2"), 256))
	assert.Equal(t, int64(768), trace.BestFit(parseEvents(t, "a1:256, a1:256, f1, a2:256, a3:256"), 256),
		"the first block of id 1 stays; the second's place serves 2, and 3 goes on top")
	assert.Equal(t, int64(256), trace.BestFit(parseEvents(t, "a1:0, f1, a2:1"), 256), "empty blocks take align bytes")
	assert.Zero(t, trace.BestFit(nil, 256))
	assert.Equal(t, int64(256), trace.BestFit([]trace.Event{
		{Op: trace.SegmentAlloc, ID: 1, Size: 1 << 20}, {Op: trace.Alloc, ID: 1, Size: 100}, {Op: trace.SegmentFree, ID: 1},
	}, 256), "a pool's segments are no blocks")
	assert.Equal(t, int64(math.MaxInt64), trace.BestFit([]trace.Event{
		{Op: trace.Alloc, ID: 1, Size: math.MaxInt64}, {Op: trace.Alloc, ID: 2, Size: math.MaxInt64}, {Op: trace.Alloc, ID: 3, Size: 1},
	}, 256), "saturated")
	assert.Panics(t, func() { trace.BestFit(nil, 0) })
}

// On random traces BestFit holds at least the rounded live peak, and at
// most every block side by side.
func TestBestFitBounds(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var ev []trace.Event
		var live []int64
		var liveBytes, peakLive, all int64
		sizes := map[int64]int64{}
		for id := int64(1); id <= 60; id++ {
			n := 1 + r.Int64N(5000)
			rounded := (n + 255) &^ 255
			ev = append(ev, trace.Event{Op: trace.Alloc, ID: id, Size: n})
			live, sizes[id] = append(live, id), rounded
			liveBytes += rounded
			all += rounded
			peakLive = max(peakLive, liveBytes)
			for len(live) > 0 && r.IntN(2) == 0 {
				i := r.IntN(len(live))
				ev = append(ev, trace.Event{Op: trace.Free, ID: live[i]})
				liveBytes -= sizes[live[i]]
				live = append(live[:i], live[i+1:]...)
			}
		}
		got := trace.BestFit(ev, 256)
		assert.GreaterOrEqual(t, got, peakLive)
		assert.LessOrEqual(t, got, all)
	}
}

// BenchmarkBestFitMLP is BestFit over the mlp trace (26,951 blocks), beside
// BenchmarkPlanMLP.
func BenchmarkBestFitMLP(b *testing.B) {
	events, err := trace.ReadFile("../testdata/mlp.tsv")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		trace.BestFit(events, 256)
	}
}
