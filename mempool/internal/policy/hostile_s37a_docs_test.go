package policy_test

import (
	"testing"

	"github.com/clpool/clpool/mempool/internal/policy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// findOwned's doc, as commit 108ec60 extended it, said "If no ordinary
// block fits, it takes the own segment's block whatever its size, and
// GetOn cuts the request from its top" (review s37a): GetOn cuts from the
// top only when the own segment is more than ownSpan (8) times the
// request; a request of at least an eighth of the segment, with no
// ordinary block to take, is cut from the bottom of the own segment's
// block, as the doc now says.
func TestHostileS37aFindOwnedDocTopCutIsConditional(t *testing.T) {
	const mib = 1 << 20
	p := policy.NewArenas[int](512, 4, 0, 256*mib)
	seg := p.NewSegment(8 * mib)
	require.True(t, seg.Own())
	require.Nil(t, p.Put(p.Add(seg, 8*mib)))
	large := p.Get(6 * mib) // bottom of the wholly free own segment: a 2 MiB tail
	require.NotNil(t, large)
	require.Same(t, seg, large.Seg)

	n := int64(1536 << 10) // 1.5 MiB: over OwnMin, at least 1/8 of the segment, fits the tail only
	require.GreaterOrEqual(t, n, p.OwnMin())
	b := p.Get(n)
	require.NotNil(t, b, "no ordinary block fits: the own segment's tail serves it")
	require.Same(t, seg, b.Seg)
	require.NoError(t, p.Check())
	assert.Equal(t, large.Off+large.Size, b.Off,
		"findOwned's doc: a request of at least 1/ownSpan of the own segment is cut from the bottom of its block")
	p.Put(b)
	p.Put(large)
}
