package policy_test

import (
	"testing"

	"github.com/clpool/clpool/mempool/internal/policy"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
)

// A state of five arrays growing 0.3% a step, remade every step: each
// array alternates between two segments, so when it is remade the
// segment given up held the array of two steps before, 0.6% smaller,
// past regrown's window of 1/192 (0.52%): no headroom, and a new segment
// for 1,001 of the 3,005 requests, where 0.2% a step took 110. The
// window of regrown is now the growth over two steps (1/96): 160.
func TestStateGrowingAStepKeepsItsHeadroom(t *testing.T) {
	for _, c := range []struct {
		rate     float64
		segments int
	}{{0.002, 110}, {0.003, 160}} {
		ev := stateGrow(c.rate, 600)
		p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
		r := simulateCached(t, ev, p, p.Round)
		assert.LessOrEqual(t, r.segments, c.segments, "rate %v: device allocations of %d", c.rate, r.allocs)
		assert.LessOrEqual(t, float64(r.peakManaged)/float64(trace.Plan(ev, 256).Size), goalRatio, "rate %v", c.rate)
	}
}
