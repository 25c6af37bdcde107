package array_test

// Session s38d ports of PyOpenCL's test/test_array.py over a MemoryPool
// (test_mem_pool_with_arrays, test_copy, test_slice, test_get_async) and
// of PyOpenCL issue #634 (memory grew in a loop of `y = x**2`), against
// clpool's arrays over a mempool.Pool of either policy: pool.Allocate is
// PyOpenCL's allocator=mem_pool, Array.Allocator its .allocator, and
// Empty(q, n, x.Allocator()) its empty_like.

import (
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var s38dPolicies = map[string][]mempool.Option{"bins": nil, "arena": {mempool.WithArena()}}

func s38dForPolicies(t *testing.T, fn func(t *testing.T, q *cl.CommandQueue, pool *mempool.Pool, opts []mempool.Option)) {
	for _, name := range []string{"bins", "arena"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(mempool.LimitEnv, "")
			q := cltest.Queue(t)
			fn(t, q, pooltest.New(t, q, s38dPolicies[name]...), s38dPolicies[name])
		})
	}
}

func s38dClose[T array.Elem](t *testing.T, as ...*array.Array[T]) {
	t.Helper()
	for _, a := range as {
		require.NoError(t, a.Close())
	}
}

// PyOpenCL test_mem_pool_with_arrays: arange and to_device with
// allocator=mem_pool, and a result of an operation on such an array, all
// come from the pool (a_dev.allocator is mem_pool); so does empty_like
// with the array's allocator. Values are checked too.
func TestPeersS38dPyOpenCLMemPoolWithArrays(t *testing.T) {
	s38dForPolicies(t, func(t *testing.T, q *cl.CommandQueue, pool *mempool.Pool, _ []mempool.Option) {
		const n = 2000
		a, err := array.Arange[float32](q, n, 0, 1, pool.Allocate)
		require.NoError(t, err)
		host := make([]float32, n)
		for i := range host {
			host[i] = float32(i)
		}
		b0, err := array.FromHost(q, host, pool.Allocate)
		require.NoError(t, err)
		four, err := array.Full[float32](q, n, 4000, pool.Allocate)
		require.NoError(t, err)
		assert.Equal(t, 3, pool.ActiveBlocks(), "arange, to_device and full came from the pool")
		b, err := array.Add(b0, four)
		require.NoError(t, err)
		assert.Equal(t, 4, pool.ActiveBlocks(), "b_dev.allocator is mem_pool: the sum came from the pool")
		require.NotNil(t, b.Allocator())
		like, err := array.Empty[float32](q, n, b.Allocator())
		require.NoError(t, err)
		assert.Equal(t, 5, pool.ActiveBlocks(), "empty_like with the array's allocator")
		got, err := b.Get()
		require.NoError(t, err)
		ga, err := a.Get()
		require.NoError(t, err)
		for i := range got {
			require.Equal(t, float32(i)+4000, got[i], "b[%d]", i)
			require.Equal(t, float32(i), ga[i], "a[%d]", i)
		}
		s38dClose(t, a, b0, four, b, like)
		assert.Zero(t, pool.ActiveBlocks())
	})
}

// PyOpenCL test_copy: a copy of a pooled array is an array of its own
// (arr.data != arr_copy.data), on the same queue, from the same pool; a
// write to it leaves the original as it was. Also the copy of a view.
func TestPeersS38dPyOpenCLCopy(t *testing.T) {
	s38dForPolicies(t, func(t *testing.T, q *cl.CommandQueue, pool *mempool.Pool, _ []mempool.Option) {
		x, err := array.Arange[int32](q, 100, 0, 1, pool.Allocate)
		require.NoError(t, err)
		c, err := x.Copy()
		require.NoError(t, err)
		assert.Equal(t, 2, pool.ActiveBlocks(), "the copy came from the pool")
		assert.Same(t, q, c.Queue(), "arr_copy.queue is queue1")
		require.NoError(t, c.Fill(-7))
		gx, err := x.Get()
		require.NoError(t, err)
		gc, err := c.Get()
		require.NoError(t, err)
		for i := range gx {
			require.Equal(t, int32(i), gx[i], "x[%d] after a write to the copy", i)
			require.Equal(t, int32(-7), gc[i])
		}
		v, err := x.Slice(37, 61)
		require.NoError(t, err)
		cv, err := v.Copy()
		require.NoError(t, err)
		assert.Equal(t, 24, cv.Len())
		assert.False(t, cv.Buffer() == v.Buffer() && cv.Offset() == v.Offset(), "a copy of a view is memory of its own")
		require.NoError(t, cv.IScale(2))
		gv, err := cv.Get()
		require.NoError(t, err)
		for i := range gv {
			require.Equal(t, int32(2*(37+i)), gv[i])
		}
		gx, err = x.Get()
		require.NoError(t, err)
		assert.Equal(t, int32(40), gx[40], "the view's source is unchanged")
		s38dClose(t, x, c, v, cv)
		assert.Zero(t, pool.ActiveBlocks())
	})
}

// PyOpenCL test_slice, over a pool (an arena's blocks start at an offset
// in their segment, and a view adds its own): 2*a[start:end] for random
// windows; a[start:end] = 2*b[start:end] from the host; and
// a[start:end] = 2*b_gpu[start:end] on the device. Each temporary is
// closed as soon as it is read.
func TestPeersS38dPyOpenCLSlice(t *testing.T) {
	s38dForPolicies(t, func(t *testing.T, q *cl.CommandQueue, pool *mempool.Pool, _ []mempool.Option) {
		const n = 20000
		rng := rand.New(rand.NewPCG(38, 4))
		ha, hb := make([]float32, n), make([]float32, n)
		for i := range ha {
			ha[i], hb[i] = rng.Float32(), rng.Float32()
		}
		// A small block first, so that an arena's arrays are not at offset 0.
		pad, err := array.Zeros[float32](q, 3, pool.Allocate)
		require.NoError(t, err)
		a, err := array.FromHost(q, ha, pool.Allocate)
		require.NoError(t, err)
		b, err := array.FromHost(q, hb, pool.Allocate)
		require.NoError(t, err)
		window := func() (int, int) {
			s := rng.IntN(n)
			return s, s + rng.IntN(n-s)
		}
		for i := range 20 {
			s, e := window()
			v, err := a.Slice(s, e)
			require.NoError(t, err)
			r, err := array.Scale(2, v)
			require.NoError(t, err)
			got, err := r.Get()
			require.NoError(t, err)
			s38dClose(t, v, r)
			for j := range got {
				require.Equal(t, 2*ha[s+j], got[j], "round %d: 2*a[%d:%d] at %d", i, s, e, j)
			}
		}
		check := func(when string) {
			got, err := a.Get()
			require.NoError(t, err)
			for j := range got {
				require.Equal(t, ha[j], got[j], "%s: a[%d]", when, j)
			}
		}
		for i := range 20 {
			s, e := window()
			v, err := a.Slice(s, e)
			require.NoError(t, err)
			src := make([]float32, e-s)
			for j := range src {
				src[j] = 2 * hb[s+j]
				ha[s+j] = src[j]
			}
			require.NoError(t, v.SetFrom(src))
			require.NoError(t, v.Close())
			check("host to window " + string(rune('a'+i)))
		}
		for i := range 20 {
			s, e := window()
			va, err := a.Slice(s, e)
			require.NoError(t, err)
			vb, err := b.Slice(s, e)
			require.NoError(t, err)
			require.NoError(t, va.Fill(0))
			require.NoError(t, va.IAxpy(2, vb))
			s38dClose(t, va, vb)
			for j := s; j < e; j++ {
				ha[j] = 2 * hb[j]
			}
			check("device to window " + string(rune('a'+i)))
		}
		s38dClose(t, pad, a, b)
		assert.Zero(t, pool.ActiveBlocks())
	})
}

// PyOpenCL test_get_async: b = a + a**5 + 1 built from temporaries, read
// back. Here each temporary is closed right after the operation that
// reads it is enqueued (the pool's contract), so the pool hands it to the
// next operation while the queue may still be reading it: the result must
// be the host's all the same.
func TestPeersS38dPyOpenCLGetAfterTemporaries(t *testing.T) {
	s38dForPolicies(t, func(t *testing.T, q *cl.CommandQueue, pool *mempool.Pool, _ []mempool.Option) {
		n := cltest.Size(q, 1<<12, 1<<18)
		rng := rand.New(rand.NewPCG(5, 5))
		ha := make([]float32, n)
		for i := range ha {
			ha[i] = rng.Float32()
		}
		a, err := array.FromHost(q, ha, pool.Allocate)
		require.NoError(t, err)
		for round := range 3 {
			p2, err := array.Mul(a, a)
			require.NoError(t, err)
			p4, err := array.Mul(p2, p2)
			require.NoError(t, err)
			require.NoError(t, p2.Close())
			p5, err := array.Mul(p4, a)
			require.NoError(t, err)
			require.NoError(t, p4.Close())
			s, err := array.Add(a, p5)
			require.NoError(t, err)
			require.NoError(t, p5.Close())
			one, err := array.Full[float32](q, n, 1, pool.Allocate)
			require.NoError(t, err)
			bgpu, err := array.Add(s, one)
			require.NoError(t, err)
			s38dClose(t, s, one)
			got := make([]float32, n)
			require.NoError(t, bgpu.GetInto(got))
			require.NoError(t, bgpu.Close())
			var sum float64
			for i, x := range ha {
				want := float64(x) + math.Pow(float64(x), 5) + 1
				sum += math.Abs(float64(got[i]) - want)
			}
			assert.Less(t, sum/float64(n), 1e-5, "round %d: mean error", round)
			assert.Equal(t, 1, pool.ActiveBlocks(), "round %d: only a is live", round)
		}
		require.NoError(t, a.Close())
	})
}

// PyOpenCL issue #634: memory grew in a loop of `y = x**2`. Over a pool,
// with each previous y closed, the loop reaches a steady state at once:
// no device allocation and no managed byte more after its second round.
func TestPeersS38dPyOpenCLLoopIsSteady(t *testing.T) {
	for _, name := range []string{"bins", "arena"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(mempool.LimitEnv, "")
			q := cltest.Queue(t)
			pool, count := pooltest.NewOver(t, q, nil, s38dPolicies[name]...)
			x, err := array.Arange[float32](q, cltest.Size(q, 1<<12, 1<<18), 0, 1e-3, pool.Allocate)
			require.NoError(t, err)
			var y *array.Array[float32]
			var allocs, managed int64
			for i := range 50 {
				ny, err := array.Mul(x, x)
				require.NoError(t, err)
				if y != nil {
					require.NoError(t, y.Close())
				}
				y = ny
				if i == 1 {
					allocs, managed = count.Stats().Allocs, pool.ManagedBytes()
				}
				if i > 1 {
					require.Equal(t, allocs, count.Stats().Allocs, "round %d: a device allocation", i)
					require.Equal(t, managed, pool.ManagedBytes(), "round %d: managed bytes grew", i)
				}
			}
			got, err := y.Get()
			require.NoError(t, err)
			assert.InDelta(t, float64(1e-3*1e-3*100*100), float64(got[100]), 1e-6)
			s38dClose(t, x, y)
		})
	}
}

// PyOpenCL issue #634 with the results dropped, not closed (Python's
// `y = x**2` drops the previous y): under a limit that holds x and four
// results, 40 rounds never fail, since the out-of-memory ladder runs the
// garbage collector before it gives up (documented, PyOpenCL's order),
// and every dropped result comes back.
func TestPeersS38dPyOpenCLDroppedResultsUnderLimit(t *testing.T) {
	for _, name := range []string{"bins", "arena"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(mempool.LimitEnv, "")
			q := cltest.Queue(t)
			n := cltest.Size(q, 1<<12, 1<<18) // 1 MiB of float32, but on a simulator
			block := mempool.AllocSize(mempool.BinNumber(4*int64(n), 4), 4)
			opts := append(append([]mempool.Option(nil), s38dPolicies[name]...), mempool.WithLimit(5*block+(64<<10)))
			pool := pooltest.New(t, q, opts...)
			x, err := array.Arange[float32](q, n, 0, 1, pool.Allocate)
			require.NoError(t, err)
			for i := range 40 {
				y, err := array.Mul(x, x)
				require.NoError(t, err, "round %d: a dropped result was not reclaimed", i)
				_ = y // dropped unclosed
			}
			require.NoError(t, q.Finish())
			deadline := time.Now().Add(time.Minute) // the finalizers of the last rounds, run by the collector
			for pool.ActiveBlocks() > 1 && time.Now().Before(deadline) {
				runtime.GC()
				time.Sleep(10 * time.Millisecond)
			}
			assert.Equal(t, 1, pool.ActiveBlocks(), "only x is live")
			require.NoError(t, x.Close())
		})
	}
}

// A reduction over a pool (PyOpenCL's sum/dot with allocator=pool)
// allocates its temporaries from the pool; when the pool's limit leaves no
// room for them, the reduction fails with the pool's out-of-memory error
// and leaves the pool and the array as they were; with the limit lifted it
// gives the right sum, and its temporaries are back.
func TestPeersS38dPyOpenCLReductionOutOfMemory(t *testing.T) {
	s38dForPolicies(t, func(t *testing.T, q *cl.CommandQueue, pool *mempool.Pool, _ []mempool.Option) {
		const n = 1 << 18
		x, err := array.Full[int32](q, n, 3, pool.Allocate)
		require.NoError(t, err)
		quietArr(t, pool)
		require.NoError(t, pool.FreeHeld())
		require.NoError(t, pool.SetLimit(pool.ManagedBytes()))
		_, err = array.Sum(x)
		require.Error(t, err, "no room under the limit for the reduction's temporaries")
		assert.True(t, errors.Is(err, mempool.ErrOutOfMemory), "%v", err)
		assert.Equal(t, 1, pool.ActiveBlocks(), "the failed reduction gave back what it took")
		require.NoError(t, pool.SetLimit(0))
		s, err := array.Sum(x)
		require.NoError(t, err)
		assert.Equal(t, int32(3*n), s)
		d, err := array.Dot(x, x)
		require.NoError(t, err)
		assert.Equal(t, int32(9*n), d)
		assert.Equal(t, 1, pool.ActiveBlocks(), "the reductions' temporaries are back")
		require.NoError(t, x.Close())
	})
}

// quietArr turns a pool's queue caches off (a registered hook does).
func quietArr(t *testing.T, p *mempool.Pool) {
	remove := p.AddHook(mempool.HookFunc(func(mempool.Event) {}))
	t.Cleanup(remove)
}
