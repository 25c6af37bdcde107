package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A hit whose request is not of a waiting block's size first merges the
// blocks waiting unmerged (Arena.GetOn -> Flush): a merge drops the
// sub-buffer of a waiting block, and with parking off (New on NVIDIA's
// driver) that hit releases it, under the lock, though the block it hands
// out is split by nobody (it has exactly the request's size). Found by
// review s34c: releaseStale's comment said "a hit that splits no cached
// block makes none", and Buffer's that a later Allocate reusing the block
// "makes no OpenCL call"; both now say what happens.
func TestHostileS34cHitWithoutSplitReleasesASubBuffer(t *testing.T) {
	f := newFixture(t, nil, mempool.WithArena(), mempool.WithoutQueueCaches())
	mempool.SetParking(f.pool, false)
	alloc := func(n int64) *mempool.PooledBuffer {
		b, err := f.pool.Allocate(n)
		require.NoError(t, err)
		return b
	}
	x, y, z, w, v := alloc(16<<10), alloc(64<<10), alloc(64<<10), alloc(64<<10), alloc(64<<10)
	require.Equal(t, x.Base(), v.Base(), "one segment")
	xOff := x.Offset()
	xSub := x.Buffer()
	require.NotNil(t, xSub)
	require.NoError(t, x.Close())
	require.NoError(t, w.Close())
	big := alloc(128 << 10) // not a waiting size: x and w merge (alone, each between active blocks) and are indexed
	require.NotEqual(t, xOff, big.Offset())

	sub := z.Buffer()
	require.NotNil(t, sub)
	require.NoError(t, f.q.WriteBuffer(sub, 0, []byte{1}))
	require.NoError(t, f.q.Finish())
	require.NoError(t, z.Close()) // waits unmerged, with its sub-buffer, beside the free w
	require.False(t, sub.Released())

	hit := alloc(16 << 10) // a hit: x's free 16 KiB block, exactly, no split
	assert.Equal(t, xOff, hit.Offset(), "served by x's block as it is")
	assert.Same(t, xSub, hit.Buffer(), "x's sub-buffer was kept with the block")
	assert.True(t, sub.Released(), "z's sub-buffer, merged away by the hit's Flush, is released in that hit")

	for _, b := range []*mempool.PooledBuffer{hit, y, v, big} {
		require.NoError(t, b.Close())
	}
}
