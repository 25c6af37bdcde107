package mempool

import (
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/require"
)

// core.go: "stale []mem // releaseStale's scratch list, empty between
// calls". releaseStale zeroes the entries it released but never reslices:
// after it released two sub-buffers, the list holds two (zero) entries.
func TestHostileS34cStaleScratchEmptyBetweenCalls(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	p, err := New(imm, WithArena(), WithoutQueueCaches())
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close()) }()
	SetParking(p, false)
	var bs []*PooledBuffer
	for range 3 {
		b, err := p.Allocate(64 << 10)
		require.NoError(t, err)
		require.NotNil(t, b.Buffer())
		bs = append(bs, b)
	}
	for _, b := range bs {
		require.NoError(t, b.Close())
	}
	big, err := p.Allocate(1 << 20) // not a waiting size: the waiting blocks merge, their sub-buffers go stale and are released
	require.NoError(t, err)
	defer func() { require.NoError(t, big.Close()) }()
	p.lock()
	n := len(p.stale)
	p.mu.Unlock()
	require.Zero(t, n, "core.stale: \"empty between calls\" -- it holds %d zeroed entries", n)
}
