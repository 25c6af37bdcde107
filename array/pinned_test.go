package array_test

import (
	"sync"
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

// stagings returns a Staging over a pinned pool and one that allocates a
// pinned buffer per transfer, both through one Counting; when the test
// ends it checks that every pinned buffer was freed, once.
func stagings(t *testing.T, q *cl.CommandQueue) map[string]*array.Staging {
	t.Helper()
	pinned, err := allocator.NewPinned(q)
	require.NoError(t, err)
	count := pooltest.Counting(t, pinned)
	pool, err := mempool.New(count, mempool.WithArena())
	require.NoError(t, err)
	pooled, err := array.NewStaging(pinned, pool.Allocate)
	require.NoError(t, err)
	raw, err := array.NewStaging(pinned, count.Allocate)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.Zero(t, pool.ActiveBlocks(), "every staging block was given back")
		require.NoError(t, pool.Close())
		assert.Zero(t, pinned.Live())
	})
	return map[string]*array.Staging{"pool": pooled, "per transfer": raw}
}

// checkPinned compares GetPinned with Get, and SetPinned with FromHost,
// on n elements of T, for a whole array and for a view inside one.
func checkPinned[T array.Elem](t *testing.T, q *cl.CommandQueue, s *array.Staging, alloc array.Alloc, n int) {
	t.Helper()
	a, err := array.Arange[T](q, n+10, 1, 3, alloc)
	require.NoError(t, err)
	defer a.Close()
	view, err := a.Slice(5, 5+n)
	require.NoError(t, err)
	defer view.Close()

	// The whole array first: the view's SetPinned then overwrites part of it.
	for _, c := range []struct {
		name string
		x    *array.Array[T]
	}{{"whole", a}, {"view", view}} {
		name, x := c.name, c.x
		want, err := x.Get()
		require.NoError(t, err)
		got := make([]T, x.Len())
		require.NoError(t, x.GetPinned(s, got), name)
		require.Equal(t, want, got, "%s: GetPinned differs from Get", name)

		src := make([]T, x.Len())
		for i := range src {
			src[i] = T(2*i + 1)
		}
		require.NoError(t, x.SetPinned(s, src), name)
		back, err := x.Get()
		require.NoError(t, err)
		require.Equal(t, src, back, "%s: SetPinned differs from the data set", name)
	}
	all, err := a.Get()
	require.NoError(t, err)
	for i := range all {
		// SetPinned of the view wrote [5, 5+n); the whole array's own
		// SetPinned wrote the rest.
		want := T(2*i + 1)
		if i >= 5 && i < 5+n {
			want = T(2*(i-5) + 1)
		}
		require.Equal(t, want, all[i], "element %d: the view's SetPinned wrote outside it", i)
	}
}

func TestPinnedTransfersMatchOrdinary(t *testing.T) {
	q := cltest.Queue(t)
	n := cltest.Size(q, 1000, 1<<18)
	for name, s := range stagings(t, q) {
		t.Run(name, func(t *testing.T) {
			checkPinned[float32](t, q, s, nil, n)
			checkPinned[float64](t, q, s, nil, n)
			checkPinned[int32](t, q, s, nil, 3)
			checkPinned[int64](t, q, s, nil, n)
			pool := pooltest.New(t, q, mempool.WithArena())
			checkPinned[uint32](t, q, s, func(size int64) (array.Block, error) { return pool.Allocate(size) }, n)
		})
	}
}

func TestPinnedMisuse(t *testing.T) {
	q := cltest.Queue(t)
	s := stagings(t, q)["pool"]
	x, err := array.Zeros[float32](q, 8, array.Alloc(nil))
	require.NoError(t, err)
	defer x.Close()

	assert.ErrorIs(t, x.GetPinned(s, make([]float32, 7)), array.ErrLengthMismatch)
	assert.ErrorIs(t, x.SetPinned(s, make([]float32, 9)), array.ErrLengthMismatch)
	assert.ErrorContains(t, x.GetPinned(nil, make([]float32, 8)), "array: GetPinned: nil Staging")
	var nilArray *array.Array[float32]
	assert.ErrorIs(t, nilArray.GetPinned(s, nil), array.ErrNilArray)

	empty, err := array.Zeros[float32](q, 0, array.Alloc(nil))
	require.NoError(t, err)
	assert.NoError(t, empty.GetPinned(s, nil))
	assert.NoError(t, empty.SetPinned(s, []float32{}))
	require.NoError(t, empty.Close())
	assert.ErrorIs(t, empty.GetPinned(s, nil), array.ErrClosed)

	pinned, err := allocator.NewPinned(q)
	require.NoError(t, err)
	_, err = array.NewStaging[*cl.Buffer](nil, pinned.Allocate)
	assert.Error(t, err)
	_, err = array.NewStaging[*cl.Buffer](pinned, nil)
	assert.Error(t, err)

	// Memory that is not the Pinned's is refused, and given back.
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	count := allocator.NewCounting(imm)
	wrong, err := array.NewStaging(pinned, count.Allocate)
	require.NoError(t, err)
	err = x.GetPinned(wrong, make([]float32, 8))
	assert.ErrorContains(t, err, "array: GetPinned: the staging allocator's memory is not the pinned memory")
	assert.Zero(t, count.Stats().Live, "the wrong block was freed")
	assert.Zero(t, pinned.Live())

	// An allocator's error is the transfer's.
	capped, err := array.NewStaging(pinned, allocator.NewBudget(pinned, 16).Allocate)
	require.NoError(t, err)
	err = x.SetPinned(capped, make([]float32, 8))
	assert.ErrorIs(t, err, cl.ErrMemObjectAllocationFailure)
	assert.ErrorContains(t, err, "array: SetPinned: allocating 32 bytes of staging memory")
}

// Goroutines transfer their own arrays through one pooled Staging at once
// (run with -race).
func TestPinnedConcurrent(t *testing.T) {
	q := cltest.Queue(t)
	s := stagings(t, q)["pool"]
	const workers = 4
	n := cltest.Size(q, 256, 1<<14)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			x, err := array.Full[int32](q, n, int32(w), array.Alloc(nil))
			if !assert.NoError(t, err) {
				return
			}
			defer x.Close()
			got := make([]int32, n)
			for r := range 5 {
				src := make([]int32, n)
				for i := range src {
					src[i] = int32(w*1000 + r)
				}
				if !assert.NoError(t, x.SetPinned(s, src)) || !assert.NoError(t, x.GetPinned(s, got)) {
					return
				}
				assert.Equal(t, src, got)
			}
		})
	}
	wg.Wait()
}

// A PinnedSlice is the host side of GetInto and SetFrom, whose results are
// those of Get and FromHost; so are those of GetInto and SetFrom with Go
// memory.
func TestPinnedSlice(t *testing.T) {
	q := cltest.Queue(t)
	n := cltest.Size(q, 1000, 1<<18)
	for name, s := range stagings(t, q) {
		t.Run(name, func(t *testing.T) {
			a, err := array.Arange[float64](q, n+3, 0.5, 2, array.Alloc(nil))
			require.NoError(t, err)
			defer a.Close()
			x, err := a.Slice(3, n+3)
			require.NoError(t, err)
			defer x.Close()
			want, err := x.Get()
			require.NoError(t, err)

			ps, err := array.NewPinnedSlice[float64](s, n)
			require.NoError(t, err)
			require.Len(t, ps.Data(), n)
			require.NoError(t, x.GetInto(ps.Data()))
			require.Equal(t, want, ps.Data())
			for i := range ps.Data() {
				ps.Data()[i] = float64(-i)
			}
			require.NoError(t, x.SetFrom(ps.Data()))
			got, err := x.Get()
			require.NoError(t, err)
			require.Equal(t, ps.Data(), got)
			require.NoError(t, ps.Close())
			assert.Nil(t, ps.Data())
			assert.ErrorIs(t, ps.Close(), array.ErrClosed)

			goMem := make([]float64, n)
			require.NoError(t, x.GetInto(goMem))
			require.Equal(t, got, goMem)
			for i := range goMem {
				goMem[i] = float64(i)
			}
			require.NoError(t, x.SetFrom(goMem))
			got, err = x.Get()
			require.NoError(t, err)
			require.Equal(t, goMem, got)
			head, err := a.Slice(0, 3)
			require.NoError(t, err)
			defer head.Close()
			first, err := head.Get()
			require.NoError(t, err)
			assert.Equal(t, []float64{0.5, 2.5, 4.5}, first, "SetFrom of the view wrote only the view")
		})
	}
}

func TestPinnedSliceMisuse(t *testing.T) {
	q := cltest.Queue(t)
	s := stagings(t, q)["pool"]
	_, err := array.NewPinnedSlice[int32](nil, 4)
	assert.ErrorContains(t, err, "nil Staging")
	_, err = array.NewPinnedSlice[int32](s, 0)
	assert.ErrorIs(t, err, cl.ErrInvalidBufferSize)
	_, err = array.NewPinnedSlice[int64](s, 1<<62)
	assert.ErrorIs(t, err, cl.ErrInvalidBufferSize)

	x, err := array.Zeros[int32](q, 4, array.Alloc(nil))
	require.NoError(t, err)
	assert.ErrorIs(t, x.GetInto(make([]int32, 3)), array.ErrLengthMismatch)
	assert.ErrorIs(t, x.SetFrom(make([]int32, 5)), array.ErrLengthMismatch)
	require.NoError(t, x.Close())
	assert.ErrorIs(t, x.GetInto(make([]int32, 4)), array.ErrClosed)
	assert.ErrorIs(t, x.SetFrom(make([]int32, 4)), array.ErrClosed)
}
