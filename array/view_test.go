package array_test

import (
	"testing"

	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSliceSharesMemory(t *testing.T) {
	q := cltest.Queue(t)
	pool := pooltest.New(t, q)
	base, err := array.Arange[int32](q, 10, 0, 1, pool.Allocate)
	require.NoError(t, err)
	defer base.Close()

	v, err := base.Slice(2, 8)
	require.NoError(t, err)
	defer v.Close()
	w, err := v.Slice(1, 4) // a view of a view: base[3:6]
	require.NoError(t, err)
	defer w.Close()
	assert.Equal(t, 6, v.Len())
	assert.Equal(t, 2, v.Offset())
	assert.Equal(t, 3, w.Offset())
	assert.Same(t, base.Buffer(), w.Buffer(), "views hand out their base's buffer")

	got, err := w.Get()
	require.NoError(t, err)
	assert.Equal(t, []int32{3, 4, 5}, got)

	require.NoError(t, w.Fill(-1))
	require.NoError(t, v.IScale(10))
	got, err = base.Get()
	require.NoError(t, err)
	assert.Equal(t, []int32{0, 1, 20, -10, -10, -10, 60, 70, 8, 9}, got, "writes through a view land in its window only")

	c, err := w.Copy()
	require.NoError(t, err)
	defer c.Close()
	assert.Zero(t, c.Offset(), "a copy is an array of its own")
	got, err = c.Get()
	require.NoError(t, err)
	assert.Equal(t, []int32{-10, -10, -10}, got)
	s, err := array.Sum(w)
	require.NoError(t, err)
	assert.Equal(t, int32(-30), s)
}

func TestSliceBounds(t *testing.T) {
	q := cltest.Queue(t)
	pool := pooltest.New(t, q)
	base, err := array.Zeros[float32](q, 4, pool.Allocate)
	require.NoError(t, err)
	for _, b := range [][2]int{{-1, 2}, {3, 2}, {0, 5}, {5, 5}} {
		_, err := base.Slice(b[0], b[1])
		assert.ErrorIs(t, err, array.ErrOutOfRange, "[%d:%d]", b[0], b[1])
	}
	empty, err := base.Slice(4, 4)
	require.NoError(t, err)
	assert.Zero(t, empty.Len())
	assert.Nil(t, empty.Buffer(), "an empty view holds no memory")
	got, err := empty.Get()
	require.NoError(t, err)
	assert.Empty(t, got)
	require.NoError(t, empty.Close())

	require.NoError(t, base.Close())
	assert.Zero(t, pool.ActiveBlocks(), "refused slices took no reference")
	_, err = base.Slice(0, 1)
	assert.ErrorIs(t, err, array.ErrClosed)
}

// The memory goes back when the array and all its views are closed, in any
// order; a view outlives the array it was sliced from.
func TestViewsKeepTheMemory(t *testing.T) {
	q := cltest.Queue(t)
	pool := pooltest.New(t, q)
	base, err := array.Arange[float64](q, 8, 0, 1, pool.Allocate)
	require.NoError(t, err)
	a, err := base.Slice(0, 4)
	require.NoError(t, err)
	b, err := base.Slice(4, 8)
	require.NoError(t, err)

	require.NoError(t, base.Close())
	assert.ErrorIs(t, base.Close(), array.ErrClosed)
	assert.Nil(t, base.Buffer())
	assert.Equal(t, 1, pool.ActiveBlocks(), "the views hold the block")
	got, err := b.Get()
	require.NoError(t, err)
	assert.Equal(t, []float64{4, 5, 6, 7}, got)

	require.NoError(t, a.Close())
	assert.Equal(t, 1, pool.ActiveBlocks())
	require.NoError(t, b.Close())
	assert.Zero(t, pool.ActiveBlocks(), "the last Close gave the block back")
	assert.ErrorIs(t, b.Close(), array.ErrClosed, "and a second one changes nothing")
	assert.Zero(t, pool.ActiveBlocks())
}

func TestInPlaceOverlapIsRefused(t *testing.T) {
	q := cltest.Queue(t)
	pool := pooltest.New(t, q)
	base, err := array.Arange[float32](q, 10, 0, 1, pool.Allocate)
	require.NoError(t, err)
	defer base.Close()
	view := func(lo, hi int) *array.Array[float32] {
		v, err := base.Slice(lo, hi)
		require.NoError(t, err)
		t.Cleanup(func() { v.Close() })
		return v
	}
	a, shifted, apart, same := view(0, 5), view(2, 7), view(5, 10), view(0, 5)

	assert.ErrorIs(t, a.IAdd(shifted), array.ErrOverlap)
	assert.ErrorIs(t, a.IAxpy(2, shifted), array.ErrOverlap)
	got, err := base.Get()
	require.NoError(t, err)
	assert.Equal(t, []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, got, "a refused update changes nothing")

	require.NoError(t, a.IAdd(apart), "disjoint windows of one array")
	require.NoError(t, a.IAdd(same), "the same window: each element reads only itself")
	sum, err := array.Add(a, shifted) // not in place: the result is new memory
	require.NoError(t, err)
	defer sum.Close()
	got, err = base.Get()
	require.NoError(t, err)
	assert.Equal(t, []float32{10, 14, 18, 22, 26, 5, 6, 7, 8, 9}, got)
	got, err = sum.Get()
	require.NoError(t, err)
	assert.Equal(t, []float32{28, 36, 44, 27, 32}, got, "a + base[2:7]")
}
