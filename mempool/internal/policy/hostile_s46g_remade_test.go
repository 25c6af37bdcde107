package policy_test

import (
	"math/rand/v2"
	"testing"

	"github.com/clpool/clpool/mempool/internal/policy"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
)

// A state of five arrays remade every step beside a scratch array of
// random size (16-32 MiB): when a scratch array outgrew the pool,
// BeforeGrow gave up the state's wholly free segments, the state's next
// arrays took the tail of the scratch array's own segment, and pinned it
// for the next, larger scratch array: 1.93x, 2.61x and 2.56x the plan on
// these seeds. findOwned now declines that tail to an array remade at
// the size of a given-up segment's occupant while the scratch array is in
// use.
func TestRemadeStateStaysOutOfTheScratchSegment(t *testing.T) {
	for _, s := range []uint64{2, 3, 5} {
		ev := remadeScratch(rand.New(rand.NewPCG(s, s+1)), 250)
		p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
		r := simulateCached(t, ev, p, p.Round)
		assert.LessOrEqual(t, float64(r.peakManaged)/float64(trace.Plan(ev, 256).Size), goalRatio, "seed %d", s)
		assert.LessOrEqual(t, r.segments, 30, "seed %d: device allocations of %d", s, r.allocs)
	}
}
