package array_test

import (
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FAILED on 7bb0ffd: the s32a fix refuses a staging block shorter than asked with an
// error matching cl.ErrInvalidBufferSize ("the staging allocator's block
// has %d bytes, not the %d asked for") only when the block tells its Size
// (a pooled block) and its pinned memory reaches past the request. A raw
// *cl.Buffer of half the size, from the Staging's own Pinned (through a
// Counting), and a block of a pool of exact bins over it (whose segment is
// its bin's size), are refused with "the staging allocator's memory is not
// the pinned memory of the Staging's allocator.Pinned": wrong (it is that
// Pinned's memory), and matching no sentinel. Nothing leaks either way.
func TestHostileS32dStagingShortRawBlockError(t *testing.T) {
	q := cltest.Queue(t)
	p, err := allocator.NewPinned(q)
	require.NoError(t, err)
	c := allocator.NewCounting(p)
	x, err := array.Arange[float32](q, 64, 0, 1, array.Alloc(nil))
	require.NoError(t, err)
	defer x.Close()

	pool, err := mempool.New(c)
	require.NoError(t, err)
	defer func() { require.NoError(t, pool.Close()) }()
	for name, alloc := range map[string]func(int64) (array.Block, error){
		"raw": func(size int64) (array.Block, error) { return c.Allocate(size / 2) },
		"bins pool": func(size int64) (array.Block, error) {
			return pool.Allocate(size / 2)
		},
	} {
		short, err := array.NewStaging(p, alloc)
		require.NoError(t, err)
		_, err = array.NewPinnedSlice[float32](short, 64)
		require.Error(t, err, name)
		assert.ErrorIs(t, err, cl.ErrInvalidBufferSize, "%s: %v", name, err)
		assert.NotContains(t, err.Error(), "is not the pinned memory", name)
		err = x.GetPinned(short, make([]float32, 64))
		require.Error(t, err, name)
		assert.ErrorIs(t, err, cl.ErrInvalidBufferSize, "%s: %v", name, err)
	}
	assert.Zero(t, pool.ActiveBlocks())
	require.NoError(t, pool.FreeHeld())
	s := c.Stats()
	assert.Zero(t, s.Live, "%+v", s)
	assert.Zero(t, s.BadFrees, "%+v", s)
	assert.Zero(t, p.Live())
}

// PASSES (exploration): a panicking staging allocator, one that hands out
// memory of another Pinned, and one over an arena pool that hands out a
// short block: each transfer fails with an error, and every block taken
// is given back (Counting: nothing live, no bad free).
func TestHostileS32dStagingNoLeaks(t *testing.T) {
	q := cltest.Queue(t)
	p, err := allocator.NewPinned(q)
	require.NoError(t, err)
	other, err := allocator.NewPinned(q)
	require.NoError(t, err)
	c, co := allocator.NewCounting(p), allocator.NewCounting(other)
	pool, err := mempool.New(c, mempool.WithArena())
	require.NoError(t, err)
	defer func() { require.NoError(t, pool.Close()) }()
	x, err := array.Arange[int32](q, 64, 0, 1, array.Alloc(nil))
	require.NoError(t, err)
	defer x.Close()
	for name, alloc := range map[string]func(int64) (array.Block, error){
		"panic":         func(int64) (array.Block, error) { panic("boom") },
		"another":       func(size int64) (array.Block, error) { return co.Allocate(size) },
		"arena short":   func(size int64) (array.Block, error) { return pool.Allocate(size - 4) },
		"nil, nil":      func(int64) (array.Block, error) { return nil, nil },
		"typed nil":     func(int64) (array.Block, error) { return (*mempool.PooledBuffer)(nil), nil },
		"closed pooled": func(size int64) (array.Block, error) { b, err := pool.Allocate(size); _ = b.Close(); return b, err },
	} {
		s, err := array.NewStaging(p, alloc)
		require.NoError(t, err)
		err = x.GetPinned(s, make([]int32, 64))
		assert.Error(t, err, name)
		err = x.SetPinned(s, make([]int32, 64))
		assert.Error(t, err, name)
		ps, err := array.NewPinnedSlice[int32](s, 64)
		assert.Error(t, err, name)
		assert.Nil(t, ps, name)
		t.Logf("%s: %v", name, err)
	}
	assert.Zero(t, pool.ActiveBlocks())
	require.NoError(t, pool.FreeHeld())
	for name, s := range map[string]allocator.CountingStats{"p": c.Stats(), "other": co.Stats()} {
		assert.Zero(t, s.Live, "%s %+v", name, s)
		assert.Zero(t, s.BadFrees, "%s %+v", name, s)
	}
	got, err := x.Get()
	require.NoError(t, err)
	assert.Equal(t, int32(63), got[63], "the array is unchanged")
}
