package policy_test

import (
	"testing"

	"github.com/clpool/clpool/mempool/internal/policy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s45bConsolidating returns a grower whose pool is consolidating (see
// policy.IdleDivisor): a 64 MiB phase freed (FreeHeld), a wholly free
// 8 MiB segment, then a busy period that grew the pool by a little.
func s45bConsolidating(t *testing.T) *grower {
	const mib = 1 << 20
	g := newGrower(policy.DefaultPreferredSegment)
	p, get := g.p, g.get
	require.Nil(t, p.Put(get(64*mib)))
	g.freeHeld()
	require.Nil(t, p.Put(get(8*mib)))
	x, y := get(6*mib), get(4*mib)
	require.Nil(t, p.Put(x))
	require.Nil(t, p.Put(y))
	require.NoError(t, p.Check())
	require.True(t, p.Consolidating(), "the recipe makes a consolidating pool")
	return g
}

// Arenas.Replacing's doc: it "reports whether Get declined the last
// request for a segment that replaces the wholly free ones: NewSegment
// sizes it, and BeforeGrow gives up every wholly free segment, until
// Add". A request larger than the replacement is not declined (see
// consolidation), but after a declined one that got no Add (nor a block)
// the pending replacement is still set (arenas.go GetOn: pending is
// cleared only on a block handed out, and Add): Replacing is true for it,
// and BeforeGrow (arenas.go: "if p.pending > 0 { return p.takeAll() }")
// gives up both wholly free segments (12 MiB) for its ordinary segment,
// where the same pool that declined nothing before keeps them (the 64 MiB
// peak's slack). Its Add then ends the consolidation (lastGrew = false):
// the segments are gone and no replacement comes. (In mempool a declined
// request's first miss calls BeforeGrow at once, so this needs a declined
// request that never reached it: the limit's "no segment fits" path.)
func TestHostileS45bPendingReplacementOutlivesTheDeclinedRequest(t *testing.T) {
	const mib = 1 << 20
	const larger = 20 * mib // more than the replacement (the 10 MiB peak and an eighth)

	twin := s45bConsolidating(t)
	require.Nil(t, twin.p.Get(larger))
	require.False(t, twin.p.Replacing())
	keptByTwin := len(twin.p.BeforeGrow(larger))

	g := s45bConsolidating(t)
	require.Nil(t, g.p.Get(1*mib), "declined for the replacement")
	require.True(t, g.p.Replacing())
	require.Nil(t, g.p.Get(larger), "no free block fits 20 MiB")
	assert.False(t, g.p.Replacing(), "Replacing after a request that was not declined for the replacement (it does not serve 20 MiB)")
	gone := g.p.BeforeGrow(larger)
	var bytes int64
	for _, s := range gone {
		bytes += s.Size
	}
	assert.Equal(t, keptByTwin, len(gone), "BeforeGrow(20 MiB) gave up %d wholly free segments (%d bytes); the same pool without the earlier declined request gives up %d", len(gone), bytes, keptByTwin)
}
