package policy_test

import (
	"testing"

	"github.com/clpool/clpool/mempool/internal/policy"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
)

// s43bRun replays ev through the arena alone and behind the pool's cache,
// and returns both, with the plan's size.
func s43bRun(t *testing.T, ev []trace.Event) (alone, cached simResult, plan float64) {
	plan = float64(trace.Plan(ev, 256).Size)
	alone = simulate(t, ev, policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment))
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	cached = simulateCached(t, ev, p, p.Round)
	t.Logf("alone %.4fx the plan, %d segments; behind the cache %.4fx, %d; of %d allocations",
		float64(alone.peakManaged)/plan, alone.segments, float64(cached.peakManaged)/plan, cached.segments, alone.allocs)
	return alone, cached, plan
}

// A state of five arrays that keep their size (24,001,000 and 8,000,300
// bytes, not multiples of 4 KiB), remade every step, beside a scratch
// array that grows 0.5% a step: each time the scratch outgrows its
// segment, BeforeGrow gives up the state's wholly free segments, and
// every array remade at its old size gets 1/8 more (outgrew matches the
// given-up segment 1,560 bytes above the block, then, once it has the
// headroom, within the 1/4 window of a large request), so the headroom
// never goes. 068fcf8^: 0.9988x the plan, 82 segments; 068fcf8: 1.3633x,
// 74 (both alone and behind the cache).
func TestHostileS43bSameSizeStateBesideGrowingScratch(t *testing.T) {
	odd := []float64{24e6 + 1000, 24e6 + 1000, 24e6 + 1000, 8e6 + 300, 8e6 + 300}
	ev := s43bState(odd, 300, func(int, int) float64 { return 1 }, func(step int) int64 { return int64(30e6 * pow(1.005, step)) })
	alone, cached, plan := s43bRun(t, ev)
	assert.LessOrEqual(t, float64(alone.peakManaged)/plan, goalRatio)
	assert.LessOrEqual(t, float64(cached.peakManaged)/plan, goalRatio)
}

// A state that shrinks 0.05% a step beside a scratch array that grows 1%
// a step: the arrays, smaller than the segments given up, get 1/8 more.
// 068fcf8^: 0.9651x the plan, 73 segments; 068fcf8: 1.1761x, 71.
func TestHostileS43bShrinkingStateBesideGrowingScratch(t *testing.T) {
	state := []float64{24e6, 24e6, 24e6, 8e6, 8e6}
	ev := s43bState(state, 300, func(int, int) float64 { return 1 - 0.0005 }, func(step int) int64 { return int64(30e6 * (1 + 0.01*float64(step))) })
	alone, cached, plan := s43bRun(t, ev)
	assert.LessOrEqual(t, float64(alone.peakManaged)/plan, goalRatio)
	assert.LessOrEqual(t, float64(cached.peakManaged)/plan, goalRatio)
}

// synth-state-grow (0.2% a step) with a 100 KB temporary made and freed
// before each step's remake, in a small segment that a small array keeps
// in use: behind the pool's cache, the temporary's block waits in the
// cache when the state's first array misses, the pool drains its caches
// (Put) between BeforeGrow and sizing the segment again, and 068fcf8's
// Put cleared p.gone: no array of the step got the headroom. 068fcf8^: 296
// segments alone and behind the cache; 068fcf8: 113 alone, 1,670 behind
// the cache (of 3,607 allocations). With the temporary made between the
// arrays (a Put between them, even alone): 068fcf8^ 296 and 296;
// 068fcf8: 257 alone, 2,552 behind the cache.
func TestHostileS43bStateGrowBehindTheCacheWithATemporary(t *testing.T) {
	for _, between := range []bool{false, true} {
		ev := s43bStateTempOf(0.002, 600, 100_000, between)
		alone, cached, _ := s43bRun(t, ev)
		assert.LessOrEqual(t, cached.segments, 300, "between %v: device allocations behind the pool's cache", between)
		assert.LessOrEqual(t, cached.segments, alone.segments*11/10, "between %v: the pool's cache costs the headroom (see TestArenaOutgrowsThroughThePoolsCache)", between)
	}
}

// A batch program: each round a work buffer 5% larger than the last
// (which makes BeforeGrow give up the wholly free segments), then 40
// arrays of the same sizes as every round (1-8 MiB, not multiples of 4
// KiB), all freed. The 40 arrays get 1/8 more each round though none
// grew. 068fcf8^: 1.0293x the plan, 68 segments; 068fcf8: 1.0841x, 127.
func TestHostileS43bBurstOfSameSizesAfterBeforeGrow(t *testing.T) {
	ev := s43bBurst(3, 40, 30, 20e6, 1.05, 0)
	alone, _, plan := s43bRun(t, ev)
	assert.LessOrEqual(t, float64(alone.peakManaged)/plan, 1.05)
	assert.LessOrEqual(t, alone.segments, 75)
}
