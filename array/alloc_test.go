package array_test

import (
	"math"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
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
