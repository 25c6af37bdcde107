package policy_test

// A hostile review of the documentation found these docs saying what the
// code did not do; the docs were corrected, and each test pins the
// corrected wording (each failed against the wording before).

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/mempool/internal/policy"
)

// Arenas.GetAnyOn: "An oversize request gets only what GetOn gives it, a
// wholly free oversize segment: it never takes a block cut from
// another." (It said: any segment's block that fits.)
func TestDocsGetAnyOnOversizeTakesNoOrdinaryBlock(t *testing.T) {
	const kib = 1 << 10
	p := policy.NewArenas[int](512, 4, 256*kib, policy.DefaultPreferredSegment)
	a := p.Add(p.NewSegment(8*kib), 8*kib) // the first segment, 512 KiB, ordinary
	require.False(t, a.Seg.Oversize)
	require.True(t, p.Oversize(300*kib))
	assert.Nil(t, p.GetAnyOn(300*kib, 0), "504 KiB free in an ordinary segment: not for an oversize request")
	require.NoError(t, p.Check())
}

// The tiny-segment constants: "each one after adds half the tiny
// segments' bytes, and at least the first one's". (It said: half.) With
// a 4 KiB alignment the first is 32 KiB, and so is the second.
func TestDocsSecondTinySegmentAtLeastTheFirst(t *testing.T) {
	const align = 4096
	p := policy.NewArenas[int](align, 4, 0, policy.DefaultPreferredSegment)
	first := p.NewSegment(1)
	require.Equal(t, int64(policy.TinySegmentBlocks*align), first.Size)
	p.Add(first, 1)
	for p.Get(1) != nil {
	}
	assert.Equal(t, first.Size, p.SegmentSize(1))
}
