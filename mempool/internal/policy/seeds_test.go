package policy_test

import (
	"math/rand/v2"
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
// getting worse. It logs a reference beside them: best fit in one unbounded
// range (trace.BestFit), with no segments and no cache, over the same
// seeds.
func TestArenaRandomMixedOverSeeds(t *testing.T) {
	if testing.Short() {
		t.Skip("12 replays of 20,000 allocations")
	}
	const seeds = 12
	var alone, cached, bestFit float64
	for s := uint64(1); s <= seeds; s++ {
		ev := randomMixed(rand.New(rand.NewPCG(s, 2)), 20000)
		plan := float64(trace.Plan(ev, 256).Size)
		bestFit += float64(trace.BestFit(ev, 256)) / plan
		alone += float64(simulate(t, ev, policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)).peakManaged) / plan
		p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
		cached += float64(simulateCached(t, ev, p, p.Round).peakManaged) / plan
	}
	alone, cached, bestFit = alone/seeds, cached/seeds, bestFit/seeds
	t.Logf("mean over %d seeds: arena %.3fx the plan, behind the pool's cache %.3fx; best fit in one unbounded range %.3fx", seeds, alone, cached, bestFit)
	assert.LessOrEqual(t, alone, 1.17)  // 1.153 today
	assert.LessOrEqual(t, cached, 1.18) // 1.160 today
	// Segments, the growth step and the cache cost the arena little over
	// plain best fit (1.148x today): the rest is best fit's own.
	assert.LessOrEqual(t, cached-bestFit, 0.02)
}

// TestArenaOverShapesAndSeeds replays seeds of the synthetic generators
// beside the ones in testdata (which any change of placement moves by as
// much as a seed does: BENCHMARKS.md, arena v2) behind the pool's cache,
// and holds each shape's mean to bounds that keep it from getting worse:
// small pools (0.5, 1.5 and 4.2 MB, 8 seeds each), a state remade beside
// a scratch array of random size (8 seeds), and particle arrays remade as
// their number grows beside a neighbour list of random size (3 seeds of
// 20k, 60k and 150k particles). It logs each shape's mean, worst, and
// how many traces meet issue 22's goal (see goal), and the mean of best fit
// in one unbounded range (trace.BestFit).
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
		var sum, worst, bestFit float64
		met := 0
		for _, gen := range sh.gen {
			ev := gen()
			p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
			r := simulateCached(t, ev, p, p.Round)
			plan := float64(trace.Plan(ev, 256).Size)
			ratio := float64(r.peakManaged) / plan
			bestFit += float64(trace.BestFit(ev, 256)) / plan
			sum += ratio
			worst = max(worst, ratio)
			if ratio <= goalRatio && r.segments <= goalSegments(r.allocs) {
				met++
			}
		}
		mean := sum / float64(len(sh.gen))
		t.Logf("%s: mean %.3fx the plan, worst %.3fx; %d of %d within the goal; best fit in one unbounded range %.3fx",
			sh.name, mean, worst, met, len(sh.gen), bestFit/float64(len(sh.gen)))
		assert.LessOrEqual(t, mean, sh.bound, sh.name)
	}
}
