package array_test

// Session s40b hostile edges of arrays over limited memory: an arena pool
// with a limit over an allocator.Budget (CPU runtimes never report
// out-of-memory, so the Budget plays the device), sizes too large for
// any device, and arrays over a pool whose Close happened.

import (
	"errors"
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

// Arrays of 256 KiB from an arena pool over a Budget, until the first
// refusal: once with the pool's limit (1 MiB) below the Budget (4 MiB),
// once with the Budget (1 MiB) below the limit (4 MiB), where the
// device's refusal is the Budget's. Expected either way: about four
// arrays fit, the refusal matches ErrOutOfMemory (allocator's and
// mempool's, one value) and names the call; a reduction, whose
// temporaries find no room, fails alike and leaves the pool as it was;
// after one array is closed the refused array fits, and after another
// the reduction works; nothing leaks.
func TestS40bPortArenaPoolOverBudgetOutOfMemory(t *testing.T) {
	const mib = 1 << 20
	for name, lim := range map[string][2]int64{"limit first": {1 * mib, 4 * mib}, "budget first": {4 * mib, 1 * mib}} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(mempool.LimitEnv, "")
			q := cltest.Queue(t)
			var budget *allocator.Budget
			pool, count := pooltest.NewOver(t, q, func(a allocator.Allocator) allocator.Allocator {
				budget = allocator.NewBudget(a, lim[1])
				return budget
			}, mempool.WithArena(), mempool.WithLimit(lim[0]))
			const n = 256 << 10 / 4
			var xs []*array.Array[float32]
			var err error
			for len(xs) < 64 {
				var x *array.Array[float32]
				x, err = array.Full[float32](q, n, float32(len(xs)+1), pool.Allocate)
				if err != nil {
					break
				}
				xs = append(xs, x)
			}
			require.Error(t, err, "64 arrays of 256 KiB under 1 MiB")
			assert.True(t, errors.Is(err, allocator.ErrOutOfMemory), "%v", err)
			assert.True(t, errors.Is(err, mempool.ErrOutOfMemory), "%v", err)
			assert.Contains(t, err.Error(), "array: Full")
			assert.GreaterOrEqual(t, len(xs), 3)
			assert.LessOrEqual(t, len(xs), 4)
			active := pool.ActiveBlocks()
			_, err = array.Sum(xs[0])
			if err != nil { // no room for the temporaries
				assert.True(t, errors.Is(err, mempool.ErrOutOfMemory), "Sum: %v", err)
				assert.Equal(t, active, pool.ActiveBlocks(), "the failed Sum gave back what it took")
			}
			require.NoError(t, xs[len(xs)-1].Close())
			xs = xs[:len(xs)-1]
			x, err := array.Full[float32](q, n, 9, pool.Allocate)
			require.NoError(t, err, "after a Close, the refused array fits")
			require.NoError(t, xs[len(xs)-1].Close()) // room for the temporaries
			xs = xs[:len(xs)-1]
			s, err := array.Sum(x)
			require.NoError(t, err, "and so do a reduction's temporaries")
			assert.Equal(t, float32(9*n), s)
			s, err = array.Sum(xs[0])
			require.NoError(t, err)
			assert.Equal(t, float32(n), s)
			require.NoError(t, x.Close())
			s40bClose(t, xs...)
			assert.LessOrEqual(t, budget.Live(), lim[1])
			assert.LessOrEqual(t, int64(count.Stats().Live), int64(4), "at most the held segments")
		})
	}
}

// test_zeros_large_array's size, 2^28+1 float64 (2 GiB and 8 bytes),
// over a Budget of 1 MiB and over an arena pool limited to 1 MiB: a
// clean out-of-memory error, nothing allocated, nothing leaked; a small
// array still works after. And lengths whose bytes overflow int64.
func TestS40bPortZerosLargeArrayOutOfMemory(t *testing.T) {
	t.Setenv(mempool.LimitEnv, "")
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	c := pooltest.Counting(t, imm)
	budget := allocator.NewBudget(c, 1<<20)
	pool := pooltest.New(t, q, mempool.WithArena(), mempool.WithLimit(1<<20))
	allocs := map[string]array.Alloc{
		"budget": func(n int64) (array.Block, error) {
			b, err := budget.Allocate(n)
			if err != nil {
				return nil, err
			}
			return b, nil
		},
		"arena": s40bPoolAlloc(pool),
	}
	for name, alloc := range allocs {
		for _, n := range []int{1<<28 + 1, 1 << 60, 1<<63 - 1} {
			a, err := array.Zeros[float64](q, n, alloc)
			assert.Nil(t, a, "%s n=%d", name, n)
			require.Error(t, err, "%s n=%d", name, n)
			assert.True(t, errors.Is(err, allocator.ErrOutOfMemory), "%s n=%d: %v", name, n, err)
		}
		a, err := array.Zeros[float64](q, 1000, alloc)
		require.NoError(t, err, name)
		s, err := array.Sum(a)
		require.NoError(t, err)
		assert.Zero(t, s)
		require.NoError(t, a.Close())
	}
	assert.Zero(t, budget.Live())
	assert.Zero(t, pool.ActiveBlocks())
}

// An array over a pool whose Close happened (pyopencl: a MemoryPool
// freed with arrays alive): the array and its views keep their memory;
// Get, Fill, IScale and SetFrom (no allocation) work; every call that
// allocates (Copy, Add, Sum's temporaries, a new array) fails with
// ErrPoolClosed, not a panic and not a hang; a zero-size array needs no
// allocation and works; the last Close frees the memory.
func TestS40bPortArraysOverClosedPool(t *testing.T) {
	for _, name := range []string{"bins", "arena"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(mempool.LimitEnv, "")
			q := cltest.Queue(t)
			opts := append(append([]mempool.Option(nil), s38dPolicies[name]...), mempool.WithLimit(8<<20))
			pool, count := pooltest.NewOver(t, q, nil, opts...)
			x, err := array.Arange[int32](q, 4096, 0, 1, pool.Allocate)
			require.NoError(t, err)
			v, err := x.Slice(100, 200)
			require.NoError(t, err)
			require.NoError(t, pool.Close())
			require.NoError(t, v.IScale(3))
			got := s40bGet(t, x)
			assert.Equal(t, int32(300), got[100])
			assert.Equal(t, int32(99), got[99])
			require.NoError(t, v.SetFrom(make([]int32, 100)))
			require.NoError(t, x.Fill(5))
			for name, call := range map[string]func() error{
				"Copy":  func() error { _, err := x.Copy(); return err },
				"Add":   func() error { _, err := array.Add(v, v); return err },
				"Sum":   func() error { _, err := array.Sum(x); return err },
				"Dot":   func() error { _, err := array.Dot(v, v); return err },
				"Zeros": func() error { _, err := array.Zeros[int32](q, 4, pool.Allocate); return err },
			} {
				err := call()
				assert.True(t, errors.Is(err, mempool.ErrPoolClosed), "%s: %v", name, err)
			}
			z, err := array.Zeros[int32](q, 0, pool.Allocate)
			require.NoError(t, err)
			require.NoError(t, z.Close())
			w, err := v.Slice(10, 20)
			require.NoError(t, err)
			require.NoError(t, x.Close())
			require.NoError(t, v.Close())
			assert.Equal(t, []int32{5, 5, 5, 5, 5, 5, 5, 5, 5, 5}, s40bGet(t, w), "a view outlives its base over a closed pool")
			live := count.Stats().Live
			assert.Positive(t, live, "the view still holds the memory")
			require.NoError(t, w.Close())
			assert.Zero(t, count.Stats().Live, "the last Close freed it")
			assert.Zero(t, pool.ManagedBytes())
		})
	}
}
