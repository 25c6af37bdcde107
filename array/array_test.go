package array_test

import (
	"math"
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

// checkOps runs every operation on arrays of T and compares with the CPU.
// With view > 0, x and y are views into larger arrays, x at offset view
// and y at 2·view, whose own arrays are closed at once (the views keep the
// memory).
func checkOps[T array.Elem](t *testing.T, q *cl.CommandQueue, alloc array.Alloc, n int, xs, ys []T, tol float64, view int) {
	near := func(want, got T, what string, i int) {
		t.Helper()
		if math.Abs(float64(want)-float64(got)) > tol*math.Max(1, math.Abs(float64(want))) {
			t.Fatalf("%s[%d] = %v, want %v", what, i, got, want)
		}
	}
	upload := func(vals []T, at int) *array.Array[T] {
		if at == 0 {
			a, err := array.FromHost(q, vals, alloc)
			require.NoError(t, err)
			return a
		}
		host := make([]T, at+len(vals)+3)
		for i := range host {
			host[i] = 7 // around the view: must not leak into results
		}
		copy(host[at:], vals)
		base, err := array.FromHost(q, host, alloc)
		require.NoError(t, err)
		v, err := base.Slice(at, at+len(vals))
		require.NoError(t, err)
		require.NoError(t, base.Close())
		return v
	}
	x := upload(xs, view)
	defer x.Close()
	y := upload(ys, 2*view)
	defer y.Close()
	require.Equal(t, n, x.Len())

	type binop struct {
		name string
		dev  func(a, b *array.Array[T]) (*array.Array[T], error)
		cpu  func(a, b T) T
	}
	for _, op := range []binop{
		{"add", array.Add[T], func(a, b T) T { return a + b }},
		{"sub", array.Sub[T], func(a, b T) T { return a - b }},
		{"mul", array.Mul[T], func(a, b T) T { return a * b }},
		{"div", array.Div[T], func(a, b T) T { return a / b }},
	} {
		z, err := op.dev(x, y)
		require.NoError(t, err, op.name)
		got, err := z.Get()
		require.NoError(t, err)
		for i := range got {
			near(op.cpu(xs[i], ys[i]), got[i], op.name, i)
		}
		require.NoError(t, z.Close())
	}
	a := T(3)
	z, err := array.Scale(a, x)
	require.NoError(t, err)
	got, _ := z.Get()
	for i := range got {
		near(a*xs[i], got[i], "scale", i)
	}
	require.NoError(t, z.Close())
	z, err = array.Axpy(a, x, y)
	require.NoError(t, err)
	got, _ = z.Get()
	for i := range got {
		near(a*xs[i]+ys[i], got[i], "axpy", i)
	}
	require.NoError(t, z.Close())
	z, err = array.Tridiag(T(1), T(2), T(1), x)
	require.NoError(t, err)
	got, _ = z.Get()
	for i := range got {
		want := 2 * xs[i]
		if i > 0 {
			want += xs[i-1]
		}
		if i+1 < n {
			want += xs[i+1]
		}
		near(want, got[i], "tridiag", i)
	}
	require.NoError(t, z.Close())

	// In place: w = x; w += y; w *= y; w -= y; w /= y; w = 3w; w += 3x.
	w, err := x.Copy()
	require.NoError(t, err)
	require.NoError(t, w.IAdd(y))
	require.NoError(t, w.IMul(y))
	require.NoError(t, w.ISub(y))
	require.NoError(t, w.IDiv(y))
	require.NoError(t, w.IScale(a))
	require.NoError(t, w.IAxpy(a, x))
	got, _ = w.Get()
	for i := range got {
		v := ((xs[i]+ys[i])*ys[i] - ys[i]) / ys[i]
		near(a*v+a*xs[i], got[i], "in place", i)
	}
	require.NoError(t, w.Close())

	var sum, dot T
	hi, lo := xs[0], xs[0]
	for i := range xs {
		sum += xs[i]
		dot += xs[i] * ys[i]
		hi, lo = max(hi, xs[i]), min(lo, xs[i])
	}
	s, err := array.Sum(x)
	require.NoError(t, err)
	near(sum, s, "sum", 0)
	d, err := array.Dot(x, y)
	require.NoError(t, err)
	near(dot, d, "dot", 0)
	m, err := array.Max(x)
	require.NoError(t, err)
	assert.Equal(t, hi, m)
	m, err = array.Min(x)
	require.NoError(t, err)
	assert.Equal(t, lo, m)
}

func TestOperationsMatchTheCPU(t *testing.T) {
	q := cltest.Queue(t)
	pool := pooltest.New(t, q)
	arena := pooltest.New(t, q, mempool.WithArena())
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	n := cltest.Size(q, 300, 100_003) // not a multiple of any group size
	xs := make([]float64, n)
	ys := make([]float64, n)
	for i := range xs {
		xs[i] = float64(i%97) - 40
		ys[i] = float64(i%13) + 1 // never zero: it divides
	}
	allocs := map[string]array.Alloc{
		"pool": func(s int64) (array.Block, error) { return pool.Allocate(s) },
		"raw":  func(s int64) (array.Block, error) { return imm.Allocate(s) },
		// Blocks at offsets in shared segments: every kernel, transfer
		// and copy must honour Base and Offset.
		"arena": func(s int64) (array.Block, error) { return arena.Allocate(s) },
	}
	abs := make([]float64, n)
	for i := range xs {
		abs[i] = math.Abs(xs[i])*4 + 50 // uint32: keep x - y and friends positive
	}
	for name, alloc := range allocs {
		for _, view := range []int{0, 5} {
			if view > 0 {
				name += "/views"
			}
			t.Run(name+"/float32", func(t *testing.T) { checkOps(t, q, alloc, n, conv[float32](xs), conv[float32](ys), 1e-4, view) })
			t.Run(name+"/float64", func(t *testing.T) { checkOps(t, q, alloc, n, xs, ys, 1e-12, view) })
			t.Run(name+"/int32", func(t *testing.T) { checkOps(t, q, alloc, n, conv[int32](xs), conv[int32](ys), 0, view) })
			t.Run(name+"/int64", func(t *testing.T) { checkOps(t, q, alloc, n, conv[int64](xs), conv[int64](ys), 0, view) })
			t.Run(name+"/uint32", func(t *testing.T) { checkOps(t, q, alloc, n, conv[uint32](abs), conv[uint32](ys), 0, view) })
		}
	}
	assert.Positive(t, pool.Stats().Hits, "the pool served temporaries again")
	as := arena.Stats()
	assert.Positive(t, as.Hits)
	assert.Less(t, as.DeviceAllocs, as.Hits, "arrays shared segments")
}

func conv[T array.Elem](xs []float64) []T {
	out := make([]T, len(xs))
	for i, x := range xs {
		out[i] = T(x)
	}
	return out
}

func TestConstructors(t *testing.T) {
	q := cltest.Queue(t)
	pool := pooltest.New(t, q)

	z, err := array.Zeros[float32](q, 5, pool.Allocate)
	require.NoError(t, err)
	got, err := z.Get()
	require.NoError(t, err)
	assert.Equal(t, []float32{0, 0, 0, 0, 0}, got)
	require.NoError(t, z.Close())

	f, err := array.Full[int64](q, 3, 7, pool.Allocate)
	require.NoError(t, err)
	gotI, _ := f.Get()
	assert.Equal(t, []int64{7, 7, 7}, gotI)
	require.NoError(t, f.Close())

	r, err := array.Arange[float64](q, 4, 1, 0.5, pool.Allocate)
	require.NoError(t, err)
	gotF, _ := r.Get()
	assert.Equal(t, []float64{1, 1.5, 2, 2.5}, gotF)
	c, err := r.Copy()
	require.NoError(t, err)
	require.NoError(t, r.Fill(9))
	gotF, _ = c.Get()
	assert.Equal(t, []float64{1, 1.5, 2, 2.5}, gotF, "a copy is independent")
	require.NoError(t, r.Close())
	require.NoError(t, c.Close())

	// The same expression with a raw allocator compiles and works.
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	raw, err := array.Zeros[uint32](q, 2, imm.Allocate)
	require.NoError(t, err)
	assert.NotNil(t, raw.Buffer())
	require.NoError(t, raw.Close())
	assert.Nil(t, raw.Buffer())
}

func TestEmptyArrays(t *testing.T) {
	q := cltest.Queue(t)
	pool := pooltest.New(t, q)
	e, err := array.Zeros[float32](q, 0, pool.Allocate)
	require.NoError(t, err)
	assert.Zero(t, pool.ActiveBlocks(), "no memory for nothing")
	got, err := e.Get()
	require.NoError(t, err)
	assert.Empty(t, got)
	s, err := array.Sum(e)
	require.NoError(t, err)
	assert.Zero(t, s)
	_, err = array.Max(e)
	assert.ErrorIs(t, err, array.ErrEmpty)
	z, err := array.Add(e, e)
	require.NoError(t, err)
	assert.Zero(t, z.Len())
	require.NoError(t, z.Close())
	require.NoError(t, e.Close())
	_, err = array.Zeros[float32](q, -1, pool.Allocate)
	assert.ErrorIs(t, err, cl.ErrInvalidBufferSize)
}

func TestMisuse(t *testing.T) {
	q := cltest.Queue(t)
	pool := pooltest.New(t, q)
	a, err := array.Zeros[float32](q, 4, pool.Allocate)
	require.NoError(t, err)
	defer a.Close()
	b, err := array.Zeros[float32](q, 5, pool.Allocate)
	require.NoError(t, err)
	defer b.Close()

	_, err = array.Add(a, b)
	assert.ErrorIs(t, err, array.ErrLengthMismatch)
	assert.ErrorContains(t, err, "y has 5 elements, x has 4")
	_, err = array.Dot(a, b)
	assert.ErrorIs(t, err, array.ErrLengthMismatch)
	assert.ErrorIs(t, a.IAxpy(2, b), array.ErrLengthMismatch)

	q2 := cltest.Queue(t)
	other, err := array.Zeros[float32](q2, 4, func(n int64) (*cl.Buffer, error) { return q2.Context().CreateBuffer(cl.MemReadWrite, n) })
	require.NoError(t, err)
	_, err = array.Add(a, other)
	assert.ErrorIs(t, err, array.ErrContextMismatch)
	require.NoError(t, other.Close())

	c, err := a.Copy()
	require.NoError(t, err)
	require.NoError(t, c.Close())
	assert.ErrorIs(t, c.Close(), array.ErrClosed)
	_, err = c.Get()
	assert.ErrorIs(t, err, array.ErrClosed)
	_, err = array.Add(a, c)
	assert.ErrorIs(t, err, array.ErrClosed)
	_, err = array.Sum(c)
	assert.ErrorIs(t, err, array.ErrClosed)
	assert.ErrorIs(t, c.Fill(1), array.ErrClosed)
	_, err = c.Copy()
	assert.ErrorIs(t, err, array.ErrClosed)
	assert.True(t, c.Closed())
}

func TestAllocationFailureIsReturned(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	p, err := mempool.New(allocator.NewBudget(imm, 1000))
	require.NoError(t, err)
	defer p.Close()
	x, err := array.Zeros[float32](q, 200, p.Allocate) // 800 bytes
	require.NoError(t, err)
	_, err = array.Add(x, x) // another 800 do not fit
	assert.ErrorIs(t, err, mempool.ErrOutOfMemory)
	require.NoError(t, x.Close())
	assert.Zero(t, p.ActiveBlocks())
}

// TestEveryTemporaryGoesThroughTheAllocator counts what a reduction takes
// from the pool: its partial and final results, given back at once.
func TestEveryTemporaryGoesThroughTheAllocator(t *testing.T) {
	q := cltest.Queue(t)
	pool := pooltest.New(t, q)
	var calls int
	counted := func(n int64) (*mempool.PooledBuffer, error) { calls++; return pool.Allocate(n) }
	x, err := array.Full[float32](q, 1000, 1, counted)
	require.NoError(t, err)
	require.Equal(t, 1, calls)
	s, err := array.Sum(x)
	require.NoError(t, err)
	assert.Equal(t, float32(1000), s)
	assert.Equal(t, 3, calls, "partial results and the final one")
	assert.Equal(t, 1, pool.ActiveBlocks(), "the temporaries are back")
	y, err := array.Scale(2, x)
	require.NoError(t, err)
	z, err := array.Add(x, y)
	require.NoError(t, err)
	assert.Equal(t, 5, calls, "results come from the same allocator")
	for _, a := range []*array.Array[float32]{x, y, z} {
		require.NoError(t, a.Close())
	}
}

func TestConcurrentArraysShareKernels(t *testing.T) {
	q := cltest.Queue(t)
	pool := pooltest.New(t, q)
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				x, err := array.Full[float32](q, 257, float32(w), pool.Allocate)
				if !assert.NoError(t, err) {
					return
				}
				y, err := array.Axpy(float32(i), x, x)
				if !assert.NoError(t, err) {
					return
				}
				s, err := array.Sum(y)
				assert.NoError(t, err)
				assert.Equal(t, float32(257*w*(i+1)), s)
				assert.NoError(t, x.Close())
				assert.NoError(t, y.Close())
			}
		}()
	}
	wg.Wait()
}

// Arrays on different queues of one context are refused, and an array
// whose memory a pool allocated for another queue records its own.
func TestArraysOnDifferentQueues(t *testing.T) {
	q := cltest.Queue(t)
	q2, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
	require.NoError(t, err)
	defer q2.Release()
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	pool, err := mempool.New(imm)
	require.NoError(t, err)
	defer pool.Close()

	a, err := array.Full[float32](q, 4, 1, pool.On(q).Allocate)
	require.NoError(t, err)
	defer a.Close()
	b, err := array.Full[float32](q2, 4, 2, pool.Allocate) // allocated for q, used on q2
	require.NoError(t, err)
	_, err = array.Add(a, b)
	assert.ErrorIs(t, err, array.ErrQueueMismatch)
	assert.ErrorIs(t, a.IAdd(b), array.ErrQueueMismatch)
	require.NoError(t, b.Close())

	// b's block was given back with q2's commands recorded: q's next
	// request for it is ordered after them.
	c, err := array.Zeros[float32](q, 4, pool.On(q).Allocate)
	require.NoError(t, err)
	defer c.Close()
	qs := pool.Stats().Queues
	require.Len(t, qs, 2)
	assert.Equal(t, int64(1), qs[0].Handovers, "ordered after q2's fill")
	got, err := c.Get()
	require.NoError(t, err)
	assert.Equal(t, []float32{0, 0, 0, 0}, got)
}
