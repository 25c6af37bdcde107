package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s34aSubs allocates n blocks of size, makes each one's sub-buffer
// (Buffer) and writes a byte through it, and returns the blocks and
// their sub-buffers.
func s34aSubs(t *testing.T, f *fixture, n int, size int64) ([]*mempool.PooledBuffer, []*cl.Buffer) {
	t.Helper()
	var bs []*mempool.PooledBuffer
	var subs []*cl.Buffer
	for range n {
		b, err := f.pool.Allocate(size)
		require.NoError(t, err)
		sub := b.Buffer()
		require.NotNil(t, sub)
		require.NoError(t, f.q.WriteBuffer(sub, 0, []byte{1}))
		bs = append(bs, b)
		subs = append(subs, sub)
	}
	require.NoError(t, f.q.Finish())
	return bs, subs
}

// With parking off, the core releases an arena's stale sub-buffers "in the
// hold of the lock that made them stale" (core.releaseStale; commit
// 20259f8: "The core releases stale sub-buffers in the hold of the lock
// that made them stale"). A request that no segment under the limit can
// serve still merges the blocks waiting unmerged (Arena.GetOn flushes the
// quick lists), dropping their sub-buffers, and then fails: decide's
// "never" path returns without releaseStale, so the sub-buffers of ranges
// that no longer exist stay live until some later hold.
func TestHostileS34aStaleKeptAfterRefusedRequest(t *testing.T) {
	f := newFixture(t, nil, mempool.WithArena(), mempool.WithoutQueueCaches(), mempool.WithLimit(4<<20))
	mempool.SetParking(f.pool, false)
	bs, subs := s34aSubs(t, f, 2, 64<<10)
	for _, b := range bs {
		require.NoError(t, b.Close()) // they wait unmerged, each with its sub-buffer
	}
	for _, s := range subs {
		require.False(t, s.Released(), "the blocks' ranges have not changed yet")
	}
	_, err := f.pool.Allocate(4<<20 + 1) // no segment under the limit: refused
	require.Error(t, err)
	// The two blocks merged with the free rest of their segment: does a
	// block of their ranges still exist?
	st := f.pool.Stats()
	t.Logf("after the refusal: held blocks %d", st.HeldBlocks)
	for i, s := range subs {
		assert.True(t, s.Released(), "sub-buffer %d: its range merged away in the refused request's hold, yet it is still live", i)
	}
}

// PASSES (parking on, the default on POCL, set here as NVIDIA's driver has
// it off): the merged blocks' sub-buffers are parked, as before the change.
func TestHostileS34aParkedKeptAfterRefusedRequest(t *testing.T) {
	f := newFixture(t, nil, mempool.WithArena(), mempool.WithoutQueueCaches(), mempool.WithLimit(4<<20))
	mempool.SetParking(f.pool, true)
	bs, subs := s34aSubs(t, f, 2, 64<<10)
	for _, b := range bs {
		require.NoError(t, b.Close())
	}
	_, err := f.pool.Allocate(4<<20 + 1)
	require.Error(t, err)
	for i, s := range subs {
		assert.False(t, s.Released(), "sub-buffer %d parked", i)
	}
}
