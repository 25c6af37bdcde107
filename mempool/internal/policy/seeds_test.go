package policy_test

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/clpool/clpool/mempool/internal/policy"
	"github.com/clpool/clpool/trace"
)

// TestArenaRandomMixedOverSeeds holds the arena, alone and behind the
// pool's cache, to its mean over seeds of the random-mixed generator,
// not only to the one seed kept in testdata: a change of placement moves
// one trace by as much as a seed does (BENCHMARKS.md, arena v2, fourth
// round), so a rule is judged on the mean. The bounds keep it from
// getting worse. It logs the floor beside them: best fit in one unbounded
// range (bestFitUnbounded), with no segments and no cache, over the same
// seeds.
func TestArenaRandomMixedOverSeeds(t *testing.T) {
	if testing.Short() {
		t.Skip("12 replays of 20,000 allocations")
	}
	const seeds = 12
	var alone, cached, floor float64
	for s := uint64(1); s <= seeds; s++ {
		ev := randomMixed(rand.New(rand.NewPCG(s, 2)), 20000)
		plan := float64(trace.Plan(ev, 256).Size)
		floor += float64(bestFitUnbounded(ev, 256)) / plan
		alone += float64(simulate(t, ev, policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)).peakManaged) / plan
		p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
		cached += float64(simulateCached(t, ev, p, p.Round).peakManaged) / plan
	}
	alone, cached, floor = alone/seeds, cached/seeds, floor/seeds
	t.Logf("mean over %d seeds: arena %.3fx the plan, behind the pool's cache %.3fx; best fit in one unbounded range %.3fx", seeds, alone, cached, floor)
	assert.LessOrEqual(t, alone, 1.17)  // 1.159 today
	assert.LessOrEqual(t, cached, 1.18) // 1.160 today
	// Segments, the growth step and the cache cost the arena little over
	// the floor (1.148x today): the rest is best fit's own.
	assert.LessOrEqual(t, cached-floor, 0.02)
}

// TestArenaOverShapesAndSeeds replays seeds of the synthetic generators
// beside the ones in testdata (which any change of placement moves by as
// much as a seed does: BENCHMARKS.md, arena v2) behind the pool's cache,
// and holds each shape's mean to bounds that keep it from getting worse:
// small pools (0.5, 1.5 and 4.2 MB, 8 seeds each), a state remade beside
// a scratch array of random size (8 seeds), and particle arrays remade as
// their number grows beside a neighbour list of random size (3 seeds of
// 20k, 60k and 150k particles). It logs each shape's mean, worst, and
// how many traces meet issue 22's goal (see goal), and the floor of best fit
// in one unbounded range (bestFitUnbounded).
func TestArenaOverShapesAndSeeds(t *testing.T) {
	if testing.Short() {
		t.Skip("57 replays")
	}
	type shape struct {
		name  string
		bound float64 // on the mean of peak managed / plan
		gen   []func() []trace.Event
	}
	var small, remade, particles []func() []trace.Event
	for s := uint64(10); s < 18; s++ {
		small = append(small,
			func() []trace.Event { return arrayProgram(s, 500_000, 4, 300, 50) },
			func() []trace.Event { return arrayProgram(s+100, 1_500_000, 5, 300, 50) },
			func() []trace.Event { return arrayProgram(s+200, 4_200_000, 6, 300, 50) })
	}
	for s := uint64(1); s <= 8; s++ {
		remade = append(remade, func() []trace.Event { return remadeScratch(rand.New(rand.NewPCG(s, 6)), 250) })
	}
	for s := uint64(1); s <= 3; s++ {
		for _, n := range []int64{20_000, 60_000, 150_000} {
			particles = append(particles, func() []trace.Event { return particlesGrow(rand.New(rand.NewPCG(s, 8)), n, 400) })
		}
	}
	shapes := []shape{
		{"small pools", 1.09, small},             // 1.078 today (1.116 before a small arena gave stale cached blocks back at a miss)
		{"state beside a scratch", 2.10, remade}, // 2.041 today (2.175 before the top cut)
		{"particles that grow", 1.40, particles}, // 1.359 today (1.554 before the top cut)
	}
	for _, sh := range shapes {
		var sum, worst, floor float64
		met := 0
		for _, gen := range sh.gen {
			ev := gen()
			p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
			r := simulateCached(t, ev, p, p.Round)
			plan := float64(trace.Plan(ev, 256).Size)
			ratio := float64(r.peakManaged) / plan
			floor += float64(bestFitUnbounded(ev, 256)) / plan
			sum += ratio
			worst = max(worst, ratio)
			if ratio <= goalRatio && r.segments <= goalSegments(r.allocs) {
				met++
			}
		}
		mean := sum / float64(len(sh.gen))
		t.Logf("%s: mean %.3fx the plan, worst %.3fx; %d of %d within the goal; best fit in one unbounded range %.3fx",
			sh.name, mean, worst, met, len(sh.gen), floor/float64(len(sh.gen)))
		assert.LessOrEqual(t, mean, sh.bound, sh.name)
	}
}

// TestBestFitUnbounded checks the floor's placement on a few blocks: a
// freed gap serves the next block that fits, the smallest of two gaps
// that fit comes first, and the range shrinks as its last block goes.
func TestBestFitUnbounded(t *testing.T) {
	var e events
	a, b := e.alloc(1024), e.alloc(256)
	c, d := e.alloc(512), e.alloc(256) // 0: a, 1024: b, 1280: c, 1792: d; 2048 in all
	e.free(a, c)                       // gaps of 1024 and 512
	e.alloc(300)                       // 512 bytes, in c's gap: no growth
	e.free(d, b)
	e.alloc(1000) // 1024 bytes in a's gap
	assert.Equal(t, int64(2048), bestFitUnbounded(e.ev, 256))
	e.alloc(2048) // at the top, down to 1792 since d went
	assert.Equal(t, int64(1792+2048), bestFitUnbounded(e.ev, 256))
}

// bestFitUnbounded places events' blocks (sizes rounded up to align) in
// one range with no end, each in the smallest free gap that fits (the
// lowest of equal ones), else at the top of the range, which shrinks when
// its last block goes, and returns the most the range reached: what best
// fit needs with no segment bounds, cache or growth step.
func bestFitUnbounded(events []trace.Event, align int64) (peak int64) {
	type gap struct{ off, end int64 }
	var gaps []gap // by offset, never touching each other or the top
	var top int64
	at := map[int64]gap{}
	for _, e := range events {
		if e.Op == trace.Free {
			b := at[e.ID]
			delete(at, e.ID)
			i, _ := slices.BinarySearchFunc(gaps, b.off, func(g gap, off int64) int { return cmp.Compare(g.off, off) })
			gaps = slices.Insert(gaps, i, b)
			if i+1 < len(gaps) && gaps[i+1].off == b.end {
				gaps[i].end = gaps[i+1].end
				gaps = slices.Delete(gaps, i+1, i+2)
			}
			if i > 0 && gaps[i-1].end == b.off {
				gaps[i-1].end = gaps[i].end
				gaps = slices.Delete(gaps, i, i+1)
			}
			if last := len(gaps) - 1; last >= 0 && gaps[last].end == top {
				top = gaps[last].off
				gaps = gaps[:last]
			}
			continue
		}
		n := max(policy.Round(e.Size, align), align)
		best := -1
		for i, g := range gaps {
			if g.end-g.off >= n && (best < 0 || g.end-g.off < gaps[best].end-gaps[best].off) {
				best = i
			}
		}
		if best < 0 {
			at[e.ID] = gap{top, top + n}
			top += n
			peak = max(peak, top)
			continue
		}
		at[e.ID] = gap{gaps[best].off, gaps[best].off + n}
		if gaps[best].off += n; gaps[best].off == gaps[best].end {
			gaps = slices.Delete(gaps, best, best+1)
		}
	}
	return peak
}
