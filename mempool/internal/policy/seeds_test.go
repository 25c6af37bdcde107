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
// getting worse; best fit in one unbounded segment needs 1.13x on average
// (see shortfalls).
func TestArenaRandomMixedOverSeeds(t *testing.T) {
	if testing.Short() {
		t.Skip("12 replays of 20,000 allocations")
	}
	const seeds = 12
	var alone, cached float64
	for s := uint64(1); s <= seeds; s++ {
		ev := randomMixed(rand.New(rand.NewPCG(s, 2)), 20000)
		plan := float64(trace.Plan(ev, 256).Size)
		alone += float64(simulate(t, ev, policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)).peakManaged) / plan
		p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
		cached += float64(simulateCached(t, ev, p, p.Round).peakManaged) / plan
	}
	alone, cached = alone/seeds, cached/seeds
	t.Logf("mean over %d seeds: arena %.3fx the plan, behind the pool's cache %.3fx", seeds, alone, cached)
	assert.LessOrEqual(t, alone, 1.17)  // 1.159 today
	assert.LessOrEqual(t, cached, 1.18) // 1.162 today
}
