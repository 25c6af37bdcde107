package array_test

import (
	"sync"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// counting returns a Counting allocator over an Immediate one on q; when
// the test ends it checks that every allocation was freed once.
func counting(t *testing.T, q *cl.CommandQueue) *allocator.Counting {
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	return pooltest.Counting(t, imm)
}

// builtInDefault puts the built-in default back when the test ends,
// whatever the test set.
func builtInDefault(t *testing.T) {
	t.Cleanup(func() { array.SetDefaultAllocator(array.Alloc(nil)) })
}

// Issue 12, item 17: constructors given no allocator (nil) use the
// package's default; out of the box, plain buffers of the queue's context,
// released at Close.
func TestDefaultAllocatorBuiltIn(t *testing.T) {
	q := cltest.Queue(t)
	builtInDefault(t)
	require.Nil(t, array.DefaultAllocator(), "nothing set: the built-in default")

	x, err := array.Arange[float32](q, 4, 0, 1, array.Alloc(nil))
	require.NoError(t, err)
	y, err := array.Scale(2, x) // results use the array's allocator: the same
	require.NoError(t, err)
	z, err := array.Zeros[float32, array.Block](q, 4, nil) // the other way to write nil
	require.NoError(t, err)
	var bufs []*cl.Buffer
	for _, a := range []*array.Array[float32]{x, y, z} {
		buf := a.Buffer()
		require.NotNil(t, buf)
		assert.Same(t, q.Context(), buf.Context())
		assert.Equal(t, int64(16), buf.Size(), "a buffer of its own, of the array's size")
		assert.Equal(t, cl.MemReadWrite, buf.Flags())
		assert.NotNil(t, a.Allocator())
		bufs = append(bufs, buf)
	}
	got, err := y.Get()
	require.NoError(t, err)
	assert.Equal(t, []float32{0, 2, 4, 6}, got)
	for i, a := range []*array.Array[float32]{x, y, z} {
		require.NoError(t, a.Close())
		assert.True(t, bufs[i].Released(), "released at Close")
	}
}

func TestSetDefaultAllocator(t *testing.T) {
	q := cltest.Queue(t)
	builtInDefault(t)
	pool := pooltest.New(t, q)
	count := counting(t, q)

	prev := array.SetDefaultAllocator(count.Allocate)
	assert.Nil(t, prev, "the built-in default was in effect")
	require.NotNil(t, array.DefaultAllocator())

	x, err := array.Full[float64](q, 10, 1, array.Alloc(nil))
	require.NoError(t, err)
	y, err := array.FromHost(q, []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, array.DefaultAllocator())
	require.NoError(t, err)
	z, err := array.Add(x, y)
	require.NoError(t, err)
	s, err := array.Sum(z) // two temporaries
	require.NoError(t, err)
	assert.Equal(t, float64(55), s)
	assert.Equal(t, int64(5), count.Stats().Allocs, "x, y, z and the temporaries came from the default")
	assert.Equal(t, 3, count.Stats().Live)

	w, err := array.Zeros[float64](q, 10, pool.Allocate)
	require.NoError(t, err)
	assert.Equal(t, int64(5), count.Stats().Allocs, "an allocator given overrides the default")
	assert.Equal(t, 1, pool.ActiveBlocks())

	// Replacing the default changes what later arrays get, not the arrays
	// made before: their results still come from the allocator they were
	// made with.
	previous := array.SetDefaultAllocator(pool.Allocate)
	require.NotNil(t, previous)
	v, err := array.Scale(2, x)
	require.NoError(t, err)
	assert.Equal(t, int64(6), count.Stats().Allocs)
	u, err := array.Zeros[float64](q, 10, array.Alloc(nil))
	require.NoError(t, err)
	assert.Equal(t, 2, pool.ActiveBlocks())
	r, err := array.Zeros[float64](q, 10, previous) // the value returned is the allocator that was set
	require.NoError(t, err)
	assert.Equal(t, int64(7), count.Stats().Allocs)

	assert.NotNil(t, array.SetDefaultAllocator(array.Alloc(nil)), "it returns the pool's")
	assert.Nil(t, array.DefaultAllocator(), "nil restores the built-in default")

	for _, a := range []*array.Array[float64]{x, y, z, w, v, u, r} {
		require.NoError(t, a.Close())
	}
	assert.Zero(t, count.Stats().Live)
}

// A default allocator that hands out memory of another context than the
// array's queue is refused, and the memory goes back.
func TestDefaultAllocatorOfAnotherContext(t *testing.T) {
	q := cltest.Queue(t)
	other := cltest.Queue(t) // a context of its own
	require.NotSame(t, q.Context(), other.Context())
	builtInDefault(t)
	pool := pooltest.New(t, q)
	array.SetDefaultAllocator(pool.Allocate)

	a, err := array.Zeros[int32](other, 4, array.Alloc(nil))
	assert.Nil(t, a)
	require.ErrorIs(t, err, array.ErrContextMismatch)
	assert.Zero(t, pool.ActiveBlocks(), "the block went back")
}

// The default is safe to set and use from many goroutines; the race
// detector checks it. Every array's memory goes back to the allocator it
// came from.
func TestDefaultAllocatorConcurrentUse(t *testing.T) {
	q := cltest.Queue(t)
	builtInDefault(t)
	counts := []*allocator.Counting{counting(t, q), counting(t, q)}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 20 {
				if w == 0 {
					array.SetDefaultAllocator(counts[i%2].Allocate)
					continue
				}
				x, err := array.Full[float32](q, 100, float32(w), array.Alloc(nil))
				if !assert.NoError(t, err) {
					return
				}
				s, err := array.Sum(x)
				assert.NoError(t, err)
				assert.Equal(t, float32(100*w), s)
				assert.NoError(t, x.Close())
			}
		})
	}
	wg.Wait()
}
