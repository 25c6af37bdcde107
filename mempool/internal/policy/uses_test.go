package policy_test

import (
	"testing"

	"github.com/clpool/clpool/mempool/internal/policy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Exact bins prefer, among the newest blocks of a bin, one that only the
// asking queue may still use.
func TestBinsPreferTheAskingQueue(t *testing.T) {
	p := policy.NewBins[int](4)
	a := p.Add(p.NewSegment(4096), 4096)
	b := p.Add(p.NewSegment(4096), 4096)
	a.Uses = []policy.Use{{Queue: 1, Seq: 3}}
	b.Uses = []policy.Use{{Queue: 2, Seq: 5}}
	p.Put(a)
	p.Put(b) // newest
	assert.Same(t, a, p.GetOn(4096, 1), "queue 1's block, though not the newest")
	assert.Same(t, b, p.GetOn(4096, 1), "else the newest")
}

// A merged block may still be used by the queues of both parts; a split
// keeps the uses on both sides.
func TestArenaMergesAndSplitsUses(t *testing.T) {
	a := policy.NewArena[int](512, 4)
	s := &policy.Segment[int]{Size: 1 << 20}
	x := a.Add(s, 512)
	y := a.Get(512)
	z := a.Get(512) // keeps x and y from merging with the rest
	x.Uses = append(x.Uses, policy.Use{Queue: 1, Seq: 2})
	y.Uses = append(y.Uses, policy.Use{Queue: 2, Seq: 7}, policy.Use{Queue: 1, Seq: 4})
	a.Put(x)
	a.Put(y)
	require.NoError(t, a.Check())
	m := a.Get(1024)
	require.NotNil(t, m)
	assert.Equal(t, int64(0), m.Off, "x and y merged")
	assert.ElementsMatch(t, []policy.Use{{Queue: 1, Seq: 4}, {Queue: 2, Seq: 7}}, m.Uses, "the later use of each queue")
	assert.False(t, m.Only(1))
	m.Uses = m.Uses[:0]
	assert.True(t, m.Only(1), "no uses: anyone may take it")
	a.Put(m)
	a.Put(z)
	require.NoError(t, a.Check())
}
