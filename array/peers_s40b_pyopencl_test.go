package array_test

// Session s40b ports of PyOpenCL's test/test_array.py and
// test/test_algorithm.py (creation, zero-size arrays, arithmetic with
// arrays and scalars, arange, reductions, NaN handling) and of
// test_wrapper.py's test_mempool, over each kind of allocator an array
// may have: the built-in default (pyopencl.array with no allocator), a
// raw allocator.Immediate (ImmediateAllocator), and mempool pools of
// either policy (MemoryPool(ImmediateAllocator(queue))). Scalars become
// Full arrays (7 + a is Add(Full(7), a)); a/s for a float scalar s is Div
// by Full(s). Parts of PyOpenCL's tests that need what clpool has not
// (complex types, dtype promotion, n-d shapes, events, out-of-order
// queues, with_queue) are left out.

import (
	"math"
	"math/rand/v2"
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

// s40bAllocs runs fn once per allocator kind, each on a queue of its own;
// pools and the counting allocator check at the end that every block and
// buffer came back.
func s40bAllocs(t *testing.T, fn func(t *testing.T, q *cl.CommandQueue, alloc array.Alloc)) {
	for _, name := range []string{"default", "immediate", "bins", "arena"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(mempool.LimitEnv, "")
			q := cltest.Queue(t)
			var alloc array.Alloc
			switch name {
			case "immediate":
				imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
				require.NoError(t, err)
				c := pooltest.Counting(t, imm)
				alloc = func(n int64) (array.Block, error) {
					b, err := c.Allocate(n)
					if err != nil {
						return nil, err
					}
					return b, nil
				}
			case "bins":
				alloc = s40bPoolAlloc(pooltest.New(t, q))
			case "arena":
				alloc = s40bPoolAlloc(pooltest.New(t, q, mempool.WithArena()))
			}
			fn(t, q, alloc)
		})
	}
}

func s40bPoolAlloc(p *mempool.Pool) array.Alloc {
	return func(n int64) (array.Block, error) {
		b, err := p.Allocate(n)
		if err != nil {
			return nil, err
		}
		return b, nil
	}
}

func s40bClose[T array.Elem](t *testing.T, as ...*array.Array[T]) {
	t.Helper()
	for _, a := range as {
		require.NoError(t, a.Close())
	}
}

func s40bGet[T array.Elem](t *testing.T, a *array.Array[T]) []T {
	t.Helper()
	got, err := a.Get()
	require.NoError(t, err)
	return got
}

func s40bRandom[T float32 | float64](rng *rand.Rand, n int) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = T(rng.Float64())
	}
	return out
}

// test_zero_size_array: zeros of shape 0, b.fill(1), c = a + b, c.get()
// and to_device(c_host) all work, over every allocator, and allocate
// nothing; so do a copy, a view, a sum (0, as numpy's) and the update in
// place.
func TestS40bPortZeroSizeArray(t *testing.T) {
	s40bAllocs(t, func(t *testing.T, q *cl.CommandQueue, alloc array.Alloc) {
		asked := 0
		counted := array.Alloc(func(n int64) (array.Block, error) {
			asked++
			if alloc == nil {
				return array.DefaultAllocator()(n)
			}
			return alloc(n)
		})
		a, err := array.Zeros[float32](q, 0, counted)
		require.NoError(t, err)
		b, err := array.Zeros[float32](q, 0, counted)
		require.NoError(t, err)
		require.NoError(t, b.Fill(1))
		c, err := array.Add(a, b)
		require.NoError(t, err)
		assert.Equal(t, 0, c.Len())
		host := s40bGet(t, c)
		assert.NotNil(t, host)
		assert.Empty(t, host)
		d, err := array.FromHost(q, host, counted)
		require.NoError(t, err)
		assert.Equal(t, 0, d.Len())
		e, err := d.Copy()
		require.NoError(t, err)
		v, err := e.Slice(0, 0)
		require.NoError(t, err)
		s, err := array.Sum(v)
		require.NoError(t, err)
		assert.Zero(t, s)
		require.NoError(t, c.IAxpy(2, a))
		assert.Nil(t, c.Buffer())
		assert.Zero(t, asked, "a zero-size array asked its allocator")
		s40bClose(t, a, b, c, d, e, v)
	})
}

// test_negative_dim_rejection: a negative length is refused (ValueError
// there, an error matching cl.ErrInvalidBufferSize here), before the
// allocator is asked.
func TestS40bPortNegativeDimRejection(t *testing.T) {
	s40bAllocs(t, func(t *testing.T, q *cl.CommandQueue, alloc array.Alloc) {
		asked := false
		spy := array.Alloc(func(n int64) (array.Block, error) { asked = true; return alloc(n) })
		for _, n := range []int{-10, -1} {
			a, err := array.Empty[float64](q, n, spy)
			assert.Nil(t, a)
			assert.ErrorIs(t, err, cl.ErrInvalidBufferSize, "n=%d", n)
			_, err = array.Zeros[float64](q, n, spy)
			assert.ErrorIs(t, err, cl.ErrInvalidBufferSize, "n=%d", n)
		}
		assert.False(t, asked)
	})
}

// test_len, test_multiply, test_multiply_array, test_addition_array,
// test_addition_scalar, test_subtract_array, test_subtract_scalar,
// test_divide_scalar, test_divide_array, test_divide_inplace_array.
func TestS40bPortArithmetic(t *testing.T) {
	s40bAllocs(t, func(t *testing.T, q *cl.CommandQueue, alloc array.Alloc) {
		ten := []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
		a, err := array.FromHost(q, ten, alloc)
		require.NoError(t, err)
		assert.Equal(t, 10, a.Len(), "test_len")

		// test_multiply: scalar * random array, sizes 10 and 50000, exact.
		rng := rand.New(rand.NewPCG(40, 2))
		for _, sz := range []int{10, cltest.Size(q, 5000, 50000)} {
			h := s40bRandom[float32](rng, sz)
			r, err := array.FromHost(q, h, alloc)
			require.NoError(t, err)
			m, err := array.Scale(2, r)
			require.NoError(t, err)
			got := s40bGet(t, m)
			for i := range h {
				require.Equal(t, 2*h[i], got[i], "test_multiply sz=%d [%d]", sz, i)
			}
			s40bClose(t, r, m)
		}

		// test_multiply_array, test_addition_array.
		b, err := array.FromHost(q, ten, alloc)
		require.NoError(t, err)
		sq, err := array.Mul(b, a)
		require.NoError(t, err)
		twice, err := array.Add(a, a)
		require.NoError(t, err)
		gsq, gtw := s40bGet(t, sq), s40bGet(t, twice)
		for i, v := range ten {
			assert.Equal(t, v*v, gsq[i])
			assert.Equal(t, v+v, gtw[i])
		}

		// test_addition_scalar and test_subtract_scalar: 7 + a, a - 7, 7 - a.
		seven, err := array.Full[float32](q, 10, 7, alloc)
		require.NoError(t, err)
		p7, err := array.Add(seven, a)
		require.NoError(t, err)
		m7, err := array.Sub(a, seven)
		require.NoError(t, err)
		r7, err := array.Sub(seven, a)
		require.NoError(t, err)
		g1, g2, g3 := s40bGet(t, p7), s40bGet(t, m7), s40bGet(t, r7)
		for i, v := range ten {
			assert.Equal(t, 7+v, g1[i])
			assert.Equal(t, v-7, g2[i])
			assert.Equal(t, 7-v, g3[i])
		}
		s40bClose(t, a, b, sq, twice, seven, p7, m7, r7)

		// test_subtract_array, same-type pairs: a - b and b - a.
		s40bSubtract[float32](t, q, alloc)
		s40bSubtract[int32](t, q, alloc)
		s40bSubtract[int64](t, q, alloc)
		s40bSubtract[float64](t, q, alloc)

		// test_divide_scalar and test_divide_array (float types): within 1e-3.
		s40bDivide[float32](t, q, alloc)
		s40bDivide[float64](t, q, alloc)

		// test_divide_inplace_array: a /= b with b all 10; for integers
		// numpy's a /= b is refused (true division), so pyopencl's
		// result is compared with integer division, exact.
		s40bDivideInPlace[uint32](t, q, alloc)
		s40bDivideInPlace[int32](t, q, alloc)
		s40bDivideInPlace[float32](t, q, alloc)
		s40bDivideInPlace[float64](t, q, alloc)
	})
}

func s40bSubtract[T float32 | float64 | int32 | int64](t *testing.T, q *cl.CommandQueue, alloc array.Alloc) {
	t.Helper()
	ha, hb := make([]T, 10), make([]T, 10)
	for i := range ha {
		ha[i], hb[i] = T(i+1), T(10*(i+1))
	}
	a, err := array.FromHost(q, ha, alloc)
	require.NoError(t, err)
	b, err := array.FromHost(q, hb, alloc)
	require.NoError(t, err)
	d1, err := array.Sub(a, b)
	require.NoError(t, err)
	d2, err := array.Sub(b, a)
	require.NoError(t, err)
	g1, g2 := s40bGet(t, d1), s40bGet(t, d2)
	for i := range ha {
		assert.Equal(t, ha[i]-hb[i], g1[i], "%T a-b [%d]", ha[i], i)
		assert.Equal(t, hb[i]-ha[i], g2[i], "%T b-a [%d]", ha[i], i)
	}
	s40bClose(t, a, b, d1, d2)
}

// s40bTens returns 10, 20, ..., 100 and an array of them (test_divide's).
func s40bTens[T uint32 | int32 | float32 | float64](t *testing.T, q *cl.CommandQueue, alloc array.Alloc) ([]T, *array.Array[T]) {
	t.Helper()
	h := make([]T, 10)
	for i := range h {
		h[i] = T(10 * (i + 1))
	}
	a, err := array.FromHost(q, h, alloc)
	require.NoError(t, err)
	return h, a
}

func s40bDivide[T float32 | float64](t *testing.T, q *cl.CommandQueue, alloc array.Alloc) {
	t.Helper()
	ha, a := s40bTens[T](t, q, alloc)
	s, err := array.Full[T](q, 10, 40, alloc)
	require.NoError(t, err)
	ten, err := array.Full[T](q, 10, 10, alloc)
	require.NoError(t, err)
	as, err := array.Div(a, s) // a / s
	require.NoError(t, err)
	sa, err := array.Div(s, a) // s / a
	require.NoError(t, err)
	ab, err := array.Div(a, ten)
	require.NoError(t, err)
	ba, err := array.Div(ten, a)
	require.NoError(t, err)
	g1, g2, g3, g4 := s40bGet(t, as), s40bGet(t, sa), s40bGet(t, ab), s40bGet(t, ba)
	for i, v := range ha {
		x := float64(v)
		assert.InDelta(t, x/40, float64(g1[i]), 1e-3, "a/s [%d]", i)
		assert.InDelta(t, 40/x, float64(g2[i]), 1e-3, "s/a [%d]", i)
		assert.InDelta(t, x/10, float64(g3[i]), 1e-3, "a/b [%d]", i)
		assert.InDelta(t, 10/x, float64(g4[i]), 1e-3, "b/a [%d]", i)
	}
	s40bClose(t, a, s, ten, as, sa, ab, ba)
}

func s40bDivideInPlace[T uint32 | int32 | float32 | float64](t *testing.T, q *cl.CommandQueue, alloc array.Alloc) {
	t.Helper()
	ha, a := s40bTens[T](t, q, alloc)
	b, err := array.Full[T](q, 10, 10, alloc)
	require.NoError(t, err)
	require.NoError(t, a.IDiv(b))
	got := s40bGet(t, a)
	for i := range ha {
		assert.Equal(t, T(i+1), got[i], "%T a/=b [%d]", got[i], i)
	}
	s40bClose(t, a, b)
}

// test_nan_arithmetic: a*b of NaN-contaminated vectors (a tenth of the
// elements NaN) is NaN exactly where the host's is.
func TestS40bPortNanArithmetic(t *testing.T) {
	s40bAllocs(t, func(t *testing.T, q *cl.CommandQueue, alloc array.Alloc) {
		n := cltest.Size(q, 1<<12, 1<<18) // PyOpenCL: 1<<20; a quarter keeps it fast under -race
		rng := rand.New(rand.NewPCG(42, 0))
		mk := func() []float32 {
			h := make([]float32, n)
			for i := range h {
				h[i] = float32(rng.NormFloat64())
			}
			for range n / 10 {
				h[rng.IntN(n)] = float32(math.NaN())
			}
			return h
		}
		ha, hb := mk(), mk()
		a, err := array.FromHost(q, ha, alloc)
		require.NoError(t, err)
		b, err := array.FromHost(q, hb, alloc)
		require.NoError(t, err)
		ab, err := array.Mul(a, b)
		require.NoError(t, err)
		got := s40bGet(t, ab)
		for i := range ha {
			want := ha[i] * hb[i]
			require.Equal(t, want != want, got[i] != got[i], "isnan at %d", i)
		}
		s40bClose(t, a, b, ab)
	})
}

// test_arange (5000 float32, exact) and test_take's arange(0, 600000, 3)
// (float32, exact: every value is below 2^24); an int64 arange past
// 2^32 as well.
func TestS40bPortArange(t *testing.T) {
	s40bAllocs(t, func(t *testing.T, q *cl.CommandQueue, alloc array.Alloc) {
		a, err := array.Arange[float32](q, 5000, 0, 1, alloc)
		require.NoError(t, err)
		for i, v := range s40bGet(t, a) {
			require.Equal(t, float32(i), v, "arange(5000)[%d]", i)
		}
		n := cltest.Size(q, 20000, 200000)
		b, err := array.Arange[float32](q, n, 0, 3, alloc)
		require.NoError(t, err)
		for i, v := range s40bGet(t, b) {
			require.Equal(t, float32(3*i), v, "arange(0, %d, 3)[%d]", 3*n, i)
		}
		c, err := array.Arange[int64](q, 1000, 1<<40, 1<<33, alloc)
		require.NoError(t, err)
		for i, v := range s40bGet(t, c) {
			require.Equal(t, int64(1)<<40+int64(i)<<33, v, "int64 arange [%d]", i)
		}
		s40bClose(t, a, b)
		require.NoError(t, c.Close())
	})
}

// test_sum: the sum of 200000 random float32, and of the slices [:],
// [1000:3000], [1000:-3000] and [1000:], within 1e-4 of the host's.
func TestS40bPortSum(t *testing.T) {
	s40bAllocs(t, func(t *testing.T, q *cl.CommandQueue, alloc array.Alloc) {
		n := cltest.Size(q, 20000, 200000)
		h := s40bRandom[float32](rand.New(rand.NewPCG(1, 2)), n)
		a, err := array.FromHost(q, h, alloc)
		require.NoError(t, err)
		for _, w := range [][2]int{{0, n}, {1000, 3000}, {1000, n - 3000}, {1000, n}} {
			v, err := a.Slice(w[0], w[1])
			require.NoError(t, err)
			got, err := array.Sum(v)
			require.NoError(t, err)
			var want float64
			for _, x := range h[w[0]:w[1]] {
				want += float64(x)
			}
			assert.Less(t, math.Abs(float64(got)-want)/math.Abs(want), 1e-4, "sum of [%d:%d]: %v, want %v", w[0], w[1], got, want)
			require.NoError(t, v.Close())
		}
		require.NoError(t, a.Close())
	})
}

// test_minmax: min and max of 200000 random float64, float32 and int32
// equal the host's exactly.
func TestS40bPortMinMax(t *testing.T) {
	s40bAllocs(t, func(t *testing.T, q *cl.CommandQueue, alloc array.Alloc) {
		n := cltest.Size(q, 20000, 200000)
		rng := rand.New(rand.NewPCG(3, 4))
		s40bMinMax(t, q, alloc, s40bRandom[float64](rng, n))
		s40bMinMax(t, q, alloc, s40bRandom[float32](rng, n))
		ints := make([]int32, n)
		for i := range ints {
			ints[i] = int32(rng.Uint32())
		}
		s40bMinMax(t, q, alloc, ints)
	})
}

func s40bMinMax[T float32 | float64 | int32](t *testing.T, q *cl.CommandQueue, alloc array.Alloc, h []T) {
	t.Helper()
	lo, hi := h[0], h[0]
	for _, v := range h {
		lo, hi = min(lo, v), max(hi, v)
	}
	a, err := array.FromHost(q, h, alloc)
	require.NoError(t, err)
	gmin, err := array.Min(a)
	require.NoError(t, err)
	gmax, err := array.Max(a)
	require.NoError(t, err)
	assert.Equal(t, lo, gmin, "%T min", lo)
	assert.Equal(t, hi, gmax, "%T max", hi)
	require.NoError(t, a.Close())
}

// test_dot (real types): dot(a, b) of 200000 random elements within 1e-4
// of the host's, for float32 and float64.
func TestS40bPortDot(t *testing.T) {
	s40bAllocs(t, func(t *testing.T, q *cl.CommandQueue, alloc array.Alloc) {
		n := cltest.Size(q, 20000, 200000)
		rng := rand.New(rand.NewPCG(5, 6))
		s40bDot(t, q, alloc, s40bRandom[float32](rng, n), s40bRandom[float32](rng, n))
		s40bDot(t, q, alloc, s40bRandom[float64](rng, n), s40bRandom[float64](rng, n))
	})
}

func s40bDot[T float32 | float64](t *testing.T, q *cl.CommandQueue, alloc array.Alloc, ha, hb []T) {
	t.Helper()
	var want float64
	for i := range ha {
		want += float64(ha[i]) * float64(hb[i])
	}
	a, err := array.FromHost(q, ha, alloc)
	require.NoError(t, err)
	b, err := array.FromHost(q, hb, alloc)
	require.NoError(t, err)
	got, err := array.Dot(a, b)
	require.NoError(t, err)
	assert.Less(t, math.Abs(float64(got)-want)/math.Abs(want), 1e-4, "%T dot %v, want %v", got, got, want)
	s40bClose(t, a, b)
}

// test_empty_reductions_vs_numpy: numpy's sum of an empty float64 array
// is 0; its max and min raise ValueError (ErrEmpty here).
func TestS40bPortEmptyReductions(t *testing.T) {
	s40bAllocs(t, func(t *testing.T, q *cl.CommandQueue, alloc array.Alloc) {
		x, err := array.FromHost(q, []float64{}, alloc)
		require.NoError(t, err)
		s, err := array.Sum(x)
		require.NoError(t, err)
		assert.Zero(t, s)
		_, err = array.Max(x)
		assert.ErrorIs(t, err, array.ErrEmpty)
		_, err = array.Min(x)
		assert.ErrorIs(t, err, array.ErrEmpty)
		d, err := array.Dot(x, x)
		require.NoError(t, err)
		assert.Zero(t, d)
		require.NoError(t, x.Close())
	})
}

// test_reduction_nan_handling (without initial): sum, max and min of
// [nan, nan] and of [nan, 1.] are NaN, as numpy's.
func TestS40bPortReductionNaN(t *testing.T) {
	s40bAllocs(t, func(t *testing.T, q *cl.CommandQueue, alloc array.Alloc) {
		nan := math.NaN()
		for _, h := range [][]float64{{nan, nan}, {nan, 1}, {1, nan}} {
			x, err := array.FromHost(q, h, alloc)
			require.NoError(t, err)
			for name, f := range map[string]func(*array.Array[float64]) (float64, error){
				"sum": array.Sum[float64], "max": array.Max[float64], "min": array.Min[float64],
			} {
				got, err := f(x)
				require.NoError(t, err)
				assert.True(t, math.IsNaN(got), "%s of %v: %v", name, h, got)
			}
			require.NoError(t, x.Close())
		}
	})
}

// test_arrays_with_svm_allocators, for buffers: arrays on queue from the
// pool's allocator bound to queue, and arrays on queue2 from one bound
// to queue2 (pool.On(queue2)), give the same a+b; arange(queue, 2000)
// and to_device(arange(2000)) + 4000, as there. Where PyOpenCL warns
// (InconsistentOpenCLQueueWarning) for empty(queue2, allocator=alloc),
// clpool orders the block for queue2: the array works.
func TestS40bPortArraysOnTwoQueues(t *testing.T) {
	s38dForPolicies(t, func(t *testing.T, q *cl.CommandQueue, pool *mempool.Pool, _ []mempool.Option) {
		q2 := cltest.SecondQueue(t, q, 0)
		alloc2 := pool.On(q2).Allocate
		host := make([]float32, 2000)
		for i := range host {
			host[i] = float32(i)
		}
		sum := func(q *cl.CommandQueue, mk func() (*array.Array[float32], *array.Array[float32])) []float32 {
			a, b0 := mk()
			four, err := array.Full[float32](q, 2000, 4000, a.Allocator())
			require.NoError(t, err)
			b, err := array.Add(b0, four)
			require.NoError(t, err)
			ab, err := array.Add(a, b)
			require.NoError(t, err)
			assert.Same(t, q, ab.Queue())
			got := s40bGet(t, ab)
			s40bClose(t, a, b0, four, b, ab)
			return got
		}
		r1 := sum(q, func() (*array.Array[float32], *array.Array[float32]) {
			a, err := array.Arange[float32](q, 2000, 0, 1, pool.Allocate)
			require.NoError(t, err)
			b, err := array.FromHost(q, host, pool.Allocate)
			require.NoError(t, err)
			return a, b
		})
		r2 := sum(q2, func() (*array.Array[float32], *array.Array[float32]) {
			a, err := array.Arange[float32](q2, 2000, 0, 1, alloc2)
			require.NoError(t, err)
			b, err := array.FromHost(q2, host, alloc2)
			require.NoError(t, err)
			return a, b
		})
		assert.Equal(t, r1, r2)
		for i, v := range r1 {
			require.Equal(t, float32(2*i+4000), v)
		}
		e, err := array.Empty[float32](q2, 2000, pool.Allocate) // the pool's queue is q
		require.NoError(t, err)
		require.NoError(t, e.Fill(3))
		g := s40bGet(t, e)
		assert.Equal(t, float32(3), g[1999])
		require.NoError(t, e.Close())
	})
}

// test_mempool (test_wrapper.py), with arrays: 100 arrays each of 2^6
// and 2^7 bytes from a pool, at most the last ten open; after the rest
// are closed and the pool stops holding, it manages nothing.
func TestS40bPortMempoolOfArrays(t *testing.T) {
	s38dForPolicies(t, func(t *testing.T, q *cl.CommandQueue, pool *mempool.Pool, _ []mempool.Option) {
		var open []*array.Array[uint32]
		for e := 12 - 6; e < 12-4; e++ {
			for range 100 {
				a, err := array.Empty[uint32](q, (1<<e)/4, pool.Allocate)
				require.NoError(t, err)
				open = append(open, a)
				if len(open) > 10 {
					require.NoError(t, open[0].Close())
					open = open[1:]
				}
			}
		}
		assert.Equal(t, 10, pool.ActiveBlocks())
		s40bClose(t, open...)
		require.NoError(t, pool.StopHolding())
		assert.Zero(t, pool.ManagedBytes())
		// Allocate still works after StopHolding, and frees at Close.
		a, err := array.Full[uint32](q, 64, 5, pool.Allocate)
		require.NoError(t, err)
		assert.Equal(t, uint32(5), s40bGet(t, a)[63])
		require.NoError(t, a.Close())
		assert.Zero(t, pool.ManagedBytes())
	})
}
