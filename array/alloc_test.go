package array_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 12, item 1: a length whose bytes overflow int64, or exceed the
// device's largest buffer, is refused before the allocator is asked. (n·8
// for n = 1<<61 wrapped to 0 bytes: the allocator returned no memory, and
// a Fill then aborted POCL, or a Close panicked.)
func TestImpossibleLengthsAreRefusedBeforeAllocating(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	count := allocator.NewCounting(d)
	calls := 0
	alloc := func(size int64) (*cl.Buffer, error) { calls++; return count.Allocate(size) }
	largest := q.Device().MaxMemAllocSize

	for _, c := range []struct {
		name string
		make func() (any, error)
	}{
		{"Empty float64, n·8 wraps to 0", func() (any, error) { return array.Empty[float64](q, 1<<61, alloc) }},
		{"Empty float32, n·4 wraps to 0", func() (any, error) { return array.Empty[float32](q, 1<<62, alloc) }},
		{"Empty int64, n·8 wraps to 16 bytes", func() (any, error) { return array.Empty[int64](q, 1<<61+2, alloc) }},
		{"Full uint32, MaxInt elements", func() (any, error) { return array.Full[uint32](q, math.MaxInt, 1, alloc) }},
		{"Arange float64, one element past the device's largest buffer", func() (any, error) {
			return array.Arange[float64](q, int(largest/8)+1, 0, 1, alloc)
		}},
		{"Empty int32, negative", func() (any, error) { return array.Empty[int32](q, -1, alloc) }},
		{"Zeros float32, MinInt", func() (any, error) { return array.Zeros[float32](q, math.MinInt, alloc) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls = 0
			a, err := c.make()
			require.ErrorIs(t, err, cl.ErrInvalidBufferSize)
			assert.Nil(t, a)
			assert.Zero(t, calls, "the allocator was not asked")
		})
	}
	assert.Equal(t, allocator.CountingStats{}, count.Stats())
}

// Issue 12, item 2: an array over a Budget or a Counting gives its memory
// back through that allocator's Free, temporaries and views included. (It
// used to release the buffer directly: the budget kept the bytes for good
// and refused every later request, and the count reported leaks.)
func TestArraysFreeThroughTheirAllocator(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	const budget = 3000 // x, y and a result of 250 float32 (1000 bytes each)
	for _, c := range []struct {
		name  string
		alloc func() (allocator.Allocator, func() (live int64, counts allocator.CountingStats))
	}{
		{"Budget", func() (allocator.Allocator, func() (int64, allocator.CountingStats)) {
			b := allocator.NewBudget(imm, budget)
			return b, func() (int64, allocator.CountingStats) { return b.Live(), allocator.CountingStats{} }
		}},
		{"Counting", func() (allocator.Allocator, func() (int64, allocator.CountingStats)) {
			c := allocator.NewCounting(imm)
			return c, func() (int64, allocator.CountingStats) { return c.Stats().LiveBytes, c.Stats() }
		}},
		{"Counting over a Budget", func() (allocator.Allocator, func() (int64, allocator.CountingStats)) {
			b := allocator.NewBudget(imm, budget)
			c := allocator.NewCounting(b)
			return c, func() (int64, allocator.CountingStats) { return b.Live(), c.Stats() }
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, state := c.alloc()
			for round := range 5 { // each round fits the budget only if the last gave everything back
				x, err := array.Full[float32](q, 250, 1, a.Allocate)
				require.NoError(t, err, "round %d", round)
				y, err := array.Scale(2, x)
				require.NoError(t, err, "round %d", round)
				z, err := array.Add(x, y)
				require.NoError(t, err, "round %d", round)
				require.NoError(t, x.Close())
				require.NoError(t, y.Close())
				s, err := array.Sum(z) // temporaries: 4 partial results and the final one
				require.NoError(t, err, "round %d", round)
				assert.Equal(t, float32(750), s)
				view, err := z.Slice(10, 20)
				require.NoError(t, err)
				require.NoError(t, z.Close())
				live, _ := state()
				assert.Equal(t, int64(1000), live, "the view holds z's memory")
				require.NoError(t, view.Close())
			}
			live, counts := state()
			assert.Zero(t, live)
			assert.Zero(t, counts.Live, "no leak")
			assert.Equal(t, counts.Allocs, counts.Frees)
			assert.Zero(t, counts.BadFrees)
		})
	}
}

// Issue 21, item 1 (torch's test_raises_oom): an array larger than the
// device's largest buffer, 4 TiB, fails as pool.Allocate of the same size
// does, with an error matching the out-of-memory sentinels
// (mempool.ErrOutOfMemory is allocator.ErrOutOfMemory), whichever
// allocator the array was to come from; it still matches
// cl.ErrInvalidBufferSize, names the call, and asks no allocator. A
// negative length is no out-of-memory.
func TestOverSizeArraysAreOutOfMemory(t *testing.T) {
	q := cltest.Queue(t)
	pool := pooltest.New(t, q)
	const tib4 = 4 << 40
	require.Less(t, q.Device().MaxMemAllocSize, int64(tib4), "the device's largest buffer is under 4 TiB")

	_, err := pool.Allocate(tib4)
	require.ErrorIs(t, err, mempool.ErrOutOfMemory, "as the pool refuses it")
	require.ErrorIs(t, err, allocator.ErrOutOfMemory)

	calls := 0
	raw := func(size int64) (*cl.Buffer, error) { calls++; return nil, errors.New("not to be asked") }
	for _, c := range []struct {
		name, prefix string
		make         func() (any, error)
	}{
		{"Empty float32 from the pool", "array: Empty: ", func() (any, error) { return array.Empty[float32](q, tib4/4, pool.Allocate) }},
		{"Empty float64 from a raw allocator", "array: Empty: ", func() (any, error) { return array.Empty[float64](q, tib4/8, raw) }},
		{"Zeros uint32, default allocator", "array: Zeros: ", func() (any, error) { return array.Zeros[uint32](q, tib4/4, array.Alloc(nil)) }},
		{"Full int32 whose bytes overflow int64", "array: Full: ", func() (any, error) { return array.Full[int32](q, math.MaxInt, 7, raw) }},
		{"Arange float32 from the pool", "array: Arange: ", func() (any, error) { return array.Arange[float32](q, tib4/4, 0, 1, pool.Allocate) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			calls = 0
			a, err := c.make()
			assert.Nil(t, a)
			require.ErrorIs(t, err, mempool.ErrOutOfMemory)
			require.ErrorIs(t, err, allocator.ErrOutOfMemory)
			require.ErrorIs(t, err, cl.ErrInvalidBufferSize, "as before")
			assert.True(t, strings.HasPrefix(err.Error(), c.prefix), "%q names the call", err)
			assert.Contains(t, err.Error(), "more than the device's largest buffer")
			assert.Zero(t, calls, "the allocator was not asked")
		})
	}
	assert.Zero(t, pool.ActiveBlocks())

	_, err = array.Empty[float32](q, -1, raw)
	require.ErrorIs(t, err, cl.ErrInvalidBufferSize)
	assert.False(t, errors.Is(err, allocator.ErrOutOfMemory), "a negative length is a misuse, not an out-of-memory")
}
