package policy_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/clpool/clpool/mempool/internal/policy"
	"github.com/clpool/clpool/trace"
)

// scoreTrace is one workload of the score: its family, a name within it,
// and its generator.
type scoreTrace struct {
	family, name string
	events       func() []trace.Event
}

// scoreTraces are the 167 workloads the arena's placement rules are
// judged on (BENCHMARKS.md, "the 167-trace score"): the 15 of testdata;
// 96 seeds of random mixed sizes; 24 small array programs (0.5, 1.5 and
// 4.2 MB live); 8 states remade beside a scratch array; 9 particle
// simulations that grow, then shrink; states growing 0.1, 0.2 and 0.3% a
// step; 12 seeds of huge arrays among boundary sizes.
func scoreTraces(tb testing.TB) []scoreTrace {
	var out []scoreTrace
	names := []string{"cg.tsv", "cg-go.tsv", "mlp.tsv", "particles.tsv", "batches.tsv"}
	for _, s := range syntheticTraces() {
		names = append(names, s.file)
	}
	for _, name := range names {
		out = append(out, scoreTrace{"testdata", name, func() []trace.Event { return readTrace(tb, name) }})
	}
	for s := uint64(100); s < 196; s++ {
		out = append(out, scoreTrace{"random-mixed", fmt.Sprint(s), func() []trace.Event { return randomMixed(rand.New(rand.NewPCG(s, s*7+1)), 20000) }})
	}
	for _, live := range []int64{500_000, 1_500_000, 4_200_000} {
		for s := uint64(10); s < 18; s++ {
			out = append(out, scoreTrace{"small", fmt.Sprint(live, "/", s), func() []trace.Event { return arrayProgram(s, live, 6, 300, 50) }})
		}
	}
	for s := uint64(1); s <= 8; s++ {
		out = append(out, scoreTrace{"remade", fmt.Sprint(s), func() []trace.Event { return remadeScratch(rand.New(rand.NewPCG(s, s+1)), 250) }})
	}
	for s := uint64(1); s <= 9; s++ {
		out = append(out, scoreTrace{"particles", fmt.Sprint(s), func() []trace.Event { return particlesGrow(rand.New(rand.NewPCG(s, s+1)), 60_000, 400) }})
	}
	for _, rate := range []float64{0.001, 0.002, 0.003} {
		out = append(out, scoreTrace{"state-grow", fmt.Sprint(rate), func() []trace.Event { return stateGrow(rate, 600) }})
	}
	for s := uint64(1); s <= 12; s++ {
		out = append(out, scoreTrace{"huge", fmt.Sprint(s), func() []trace.Event { return hugeAmongBoundaries(rand.New(rand.NewPCG(s, s+2)), 8000) }})
	}
	return out
}

// scoreTally sums a family's figures (or all of them).
type scoreTally struct {
	n, over, overDevices, within int
	sum                          float64 // of peak managed over the plan
}

func (t *scoreTally) add(ratio float64, segments, allocs int) {
	overDevices := segments > goalSegments(allocs)
	t.n++
	t.sum += ratio
	if ratio > goalRatio {
		t.over++
	}
	if overDevices {
		t.overDevices++
	}
	if ratio <= goalRatio && !overDevices {
		t.within++
	}
}

// BenchmarkArenaScore replays the score's workloads (scoreTraces) through
// the arena behind the pool's cache (simulateCached, the pool's figures)
// and reports the mean peak managed over the clairvoyant plan
// ("x-plan"), how many workloads are within both of issue 22's goals
// (1.15x the plan, device allocations at most 1% of allocations), and
// each family's mean. It measures memory, not time: one round is the
// figure (-benchtime 1x); -v logs each workload's.
func BenchmarkArenaScore(b *testing.B) {
	traces := scoreTraces(b)
	type result struct {
		ratio            float64
		segments, allocs int
	}
	results := make([]result, len(traces))
	for b.Loop() {
		var wg sync.WaitGroup
		work := make(chan int)
		for range 2 {
			wg.Go(func() {
				for i := range work {
					ev := traces[i].events()
					p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
					r := simulateCached(b, ev, p, p.Round)
					results[i] = result{float64(r.peakManaged) / float64(trace.Plan(ev, 256).Size), r.segments, r.allocs}
				}
			})
		}
		for i := range traces {
			work <- i
		}
		close(work)
		wg.Wait()
	}
	families := map[string]*scoreTally{}
	var order []string
	var all scoreTally
	for i, tr := range traces {
		f := families[tr.family]
		if f == nil {
			f = &scoreTally{}
			families[tr.family] = f
			order = append(order, tr.family)
		}
		r := results[i]
		f.add(r.ratio, r.segments, r.allocs)
		all.add(r.ratio, r.segments, r.allocs)
		b.Logf("%s %s: %.3fx the plan, %d segments of %d allocations", tr.family, tr.name, r.ratio, r.segments, r.allocs)
	}
	for _, name := range order {
		f := families[name]
		b.Logf("%-12s %3d workloads: mean %.4fx the plan, %3d over 1.15x, %2d over 1%% device allocations, %3d within both",
			name, f.n, f.sum/float64(f.n), f.over, f.overDevices, f.within)
		b.ReportMetric(f.sum/float64(f.n), name+"-x-plan")
	}
	b.ReportMetric(all.sum/float64(all.n), "x-plan")
	b.ReportMetric(float64(all.within), "within")
	b.ReportMetric(0, "ns/op")
}
