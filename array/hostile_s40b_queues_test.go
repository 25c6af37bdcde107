package array_test

// Session s40b hostile edges of arrays and queues: arrays whose blocks
// come from a pool whose queue is another (in order, or out of order)
// and are reused there while a kernel on the array's queue still reads
// them; arrays of a raw allocator freed under a running kernel.

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s40bSlowReadAt is cltest.SlowRead with each array's element offset, so
// that it reads the array's own elements in an arena's segment too.
const s40bSlowReadAt = `
kernel void slow_read_at(volatile global const int *x, long xo, global int *out, long oo, int iters) {
	int i = get_global_id(0);
	int acc = 0;
	for (int k = 0; k < iters; k++) acc += x[xo + i];
	out[oo + i] = acc;
}`

// s40bSlowRead enqueues on x's queue a kernel that reads x iters times
// into out (both of int32, on x's queue), and flushes it.
func s40bSlowRead(t *testing.T, x, out *array.Array[int32], iters int) {
	t.Helper()
	q := x.Queue()
	prog, err := q.Context().BuildProgram(s40bSlowReadAt, "")
	require.NoError(t, err)
	t.Cleanup(func() { prog.Release() })
	k, err := prog.Kernel("slow_read_at")
	require.NoError(t, err)
	t.Cleanup(func() { k.Release() })
	require.NoError(t, k.SetArgs(x.Buffer(), int64(x.Offset()), out.Buffer(), int64(out.Offset()), int32(iters)))
	require.NoError(t, q.EnqueueKernel(k, []int{x.Len()}, nil))
	require.NoError(t, q.Flush())
}

// An array moved to other queues, as pyopencl users do with with_queue:
// clpool has no with_queue; an array lives on the queue it was made on.
// Arrays on in-order q2 and q3 take their blocks from a pool whose queue,
// q1, is out of order (pool.Allocate: the blocks are for q1); a slow
// kernel keeps each of q2 and q3 busy, and an operation behind it reads
// the queue's array (r = 2x), which is closed at once (legal, doc.go
// "Queues"). Two raw requests on q1 then get the two
// blocks back (two handovers in a row on an out-of-order queue: POCL
// honours only the last of two consecutive barriers there) and fill them
// on q1. Expected: each r holds only 2s.
func TestS40bPortBlocksReusedOnOutOfOrderPoolQueue(t *testing.T) {
	for _, name := range []string{"bins", "arena"} {
		t.Run(name, func(t *testing.T) {
			cltest.Watchdog(t, 2*time.Minute)
			q := cltest.Queue(t)
			q1 := cltest.SecondQueue(t, q, cl.QueueOutOfOrder)
			q2 := cltest.SecondQueue(t, q, 0)
			q3 := cltest.SecondQueue(t, q, 0)
			pool := pooltest.New(t, q1, s38dPolicies[name]...)
			const n = 1024
			iters := cltest.Size(q, 200, 1_000_000)
			reused, corrupted := 0, 0
			for trial := range 3 {
				var rs, outs []*array.Array[int32]
				type spot struct {
					buf *cl.Buffer
					off int64
				}
				var spots []spot
				for _, qk := range []*cl.CommandQueue{q2, q3} {
					x, err := array.Full[int32](qk, n, 1, pool.Allocate)
					require.NoError(t, err)
					slowIn, err := array.Full[int32](qk, n, 1, array.Alloc(nil))
					require.NoError(t, err)
					out, err := array.Empty[int32](qk, n, array.Alloc(nil))
					require.NoError(t, err)
					require.NoError(t, qk.Finish())
					s40bSlowRead(t, slowIn, out, iters) // qk is busy for a while
					r, err := array.Scale(2, x)         // x's last operation, behind it
					require.NoError(t, err)
					spots = append(spots, spot{x.Buffer(), int64(4 * x.Offset())})
					require.NoError(t, x.Close())
					s40bClose(t, slowIn)
					rs, outs = append(rs, r), append(outs, out)
				}
				var blocks []*mempool.PooledBuffer
				for range 2 {
					b, err := pool.Allocate(4 * n)
					require.NoError(t, err)
					blocks = append(blocks, b)
				}
				pattern := binary.LittleEndian.AppendUint32(nil, 0x40404040)
				for _, b := range blocks {
					for _, s := range spots {
						if b.Base() == s.buf && b.Offset() == s.off {
							reused++
						}
					}
					ev, err := q1.EnqueueFillBuffer(b.Base(), pattern, b.Offset(), 4*n)
					require.NoError(t, err)
					require.NoError(t, ev.Release())
				}
				require.NoError(t, q1.Finish())
				for k, r := range rs {
					for i, v := range s40bGet(t, r) {
						if v != 2 {
							t.Logf("trial %d: r%d[%d] = %d, want 2", trial, k+2, i, v)
							corrupted++
							break
						}
					}
					s40bClose(t, r, outs[k])
				}
				for _, b := range blocks {
					require.NoError(t, b.Close())
				}
			}
			assert.Positive(t, reused, "q1's requests got the arrays' blocks: the test is not vacuous")
			assert.Zero(t, corrupted, "trials whose r read q1's fill in its array's reused block")
		})
	}
}

// The same with the arrays on one in-order queue q2 and the pool's queue
// in order too: the array's block goes back to a request on q1 (an array
// there, which fills it) while q2's operation on it still waits.
func TestS40bPortBlockReusedOnInOrderPoolQueue(t *testing.T) {
	for _, name := range []string{"bins", "arena"} {
		t.Run(name, func(t *testing.T) {
			cltest.Watchdog(t, 2*time.Minute)
			q1 := cltest.Queue(t)
			q2 := cltest.SecondQueue(t, q1, 0)
			pool := pooltest.New(t, q1, s38dPolicies[name]...)
			const n = 1024
			iters := cltest.Size(q1, 200, 1_000_000)
			reused := 0
			for trial := range 3 {
				x, err := array.Full[int32](q2, n, 1, pool.Allocate)
				require.NoError(t, err)
				slowIn, err := array.Full[int32](q2, n, 1, array.Alloc(nil))
				require.NoError(t, err)
				out, err := array.Empty[int32](q2, n, array.Alloc(nil))
				require.NoError(t, err)
				require.NoError(t, q2.Finish())
				s40bSlowRead(t, slowIn, out, iters)
				r, err := array.Scale(2, x)
				require.NoError(t, err)
				xb, xo := x.Buffer(), x.Offset()
				require.NoError(t, x.Close())
				y, err := array.Full[int32](q1, n, -5, pool.Allocate)
				require.NoError(t, err)
				if y.Buffer() == xb && y.Offset() == xo {
					reused++
				}
				require.NoError(t, q1.Finish())
				for i, v := range s40bGet(t, r) {
					require.Equal(t, int32(2), v, "trial %d: r[%d]: Scale read y's -5s", trial, i)
				}
				s40bClose(t, y, out, slowIn, r)
			}
			assert.Positive(t, reused, "not vacuous")
		})
	}
}

// pyopencl's arrays of ImmediateAllocator/DeferredAllocator memory freed
// while a kernel still reads them: the release is deferred by OpenCL
// until the kernel ends. Over a raw allocator (Immediate, Deferred, a
// Budget over Immediate), an array closed right after its last
// operation (r = 2x, behind a slow kernel) is enqueued, then new arrays
// of the same size filled with -5 at once: r holds only 2s.
func TestS40bPortRawArrayFreedUnderRunningKernel(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	def, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	budget := allocator.NewBudget(imm, 1<<20)
	const n = 4096
	iters := cltest.Size(q, 200, 1_000_000)
	for name, a := range map[string]allocator.Allocator{"immediate": imm, "deferred": def, "budget": budget} {
		c := pooltest.Counting(t, a)
		x, err := array.Full[int32](q, n, 1, c.Allocate)
		require.NoError(t, err)
		slowIn, err := array.Full[int32](q, n, 1, array.Alloc(nil))
		require.NoError(t, err)
		out, err := array.Empty[int32](q, n, array.Alloc(nil))
		require.NoError(t, err)
		require.NoError(t, q.Finish())
		s40bSlowRead(t, slowIn, out, iters)
		r, err := array.Scale(2, x)
		require.NoError(t, err)
		require.NoError(t, x.Close())
		var ys []*array.Array[int32]
		for range 4 {
			y, err := array.Full[int32](q, n, -5, c.Allocate)
			require.NoError(t, err)
			ys = append(ys, y)
		}
		for i, v := range s40bGet(t, r) {
			require.Equal(t, int32(2), v, "%s: r[%d]", name, i)
		}
		s40bClose(t, ys...)
		s40bClose(t, out, slowIn, r)
	}
	assert.Zero(t, budget.Live())
}

// pyopencl's ImmediateAllocator(queue) used for arrays on queue2 (as
// test_arrays_with_svm_allocators binds allocations to another queue):
// allocator.Immediate probes each buffer on q1 with a migration of
// undefined content, which "writes nothing: data written to the buffer
// through another queue, before or after the probe, stays as written"
// (allocator.Immediate). With q1 busy, so that the probe runs after the
// array's upload on q2, the data read back on q2 is the host's.
func TestS40bPortImmediateAllocatorOfAnotherQueue(t *testing.T) {
	cltest.Watchdog(t, 2*time.Minute)
	q1 := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q1, 0)
	imm, err := allocator.NewImmediate(q1, cl.MemReadWrite)
	require.NoError(t, err)
	c := pooltest.Counting(t, imm)
	slowIn, err := array.Full[int32](q1, 1024, 1, array.Alloc(nil))
	require.NoError(t, err)
	out, err := array.Empty[int32](q1, 1024, array.Alloc(nil))
	require.NoError(t, err)
	n := cltest.Size(q1, 256, 4096)
	for trial := range 3 {
		require.NoError(t, q1.Finish())
		s40bSlowRead(t, slowIn, out, cltest.Size(q1, 200, 1_000_000)) // q1 busy: the probe waits
		h := make([]int32, n)
		for i := range h {
			h[i] = int32(i + trial)
		}
		x, err := array.FromHost(q2, h, c.Allocate)
		require.NoError(t, err)
		y, err := array.Scale(3, x)
		require.NoError(t, err)
		require.NoError(t, q1.Finish()) // the probes have run
		for i, v := range s40bGet(t, y) {
			require.Equal(t, 3*h[i], v, "trial %d: [%d]", trial, i)
		}
		s40bClose(t, x, y)
	}
	s40bClose(t, slowIn, out)
}

// An array "moved" to another queue: clpool has no with_queue; mixing
// arrays of two queues is refused with ErrQueueMismatch (operands of
// every binary call, either order), and the documented move (Get, then
// FromHost on the other queue, from a pool's allocator for that queue)
// gives an equal array there, while the original stays usable.
func TestS40bPortArrayMovedToAnotherQueue(t *testing.T) {
	s38dForPolicies(t, func(t *testing.T, q *cl.CommandQueue, pool *mempool.Pool, _ []mempool.Option) {
		q2 := cltest.SecondQueue(t, q, 0)
		x, err := array.Arange[float64](q, 1000, 0.5, 1, pool.Allocate)
		require.NoError(t, err)
		y, err := array.Full[float64](q2, 1000, 2, pool.On(q2).Allocate)
		require.NoError(t, err)
		for name, call := range map[string]func() error{
			"Add":   func() error { _, err := array.Add(x, y); return err },
			"Sub":   func() error { _, err := array.Sub(y, x); return err },
			"Axpy":  func() error { _, err := array.Axpy(2, x, y); return err },
			"Dot":   func() error { _, err := array.Dot(y, x); return err },
			"IAdd":  func() error { return x.IAdd(y) },
			"IMul":  func() error { return y.IMul(x) },
			"IAxpy": func() error { return y.IAxpy(1, x) },
		} {
			assert.ErrorIs(t, call(), array.ErrQueueMismatch, name)
		}
		h := s40bGet(t, x)
		moved, err := array.FromHost(q2, h, pool.On(q2).Allocate)
		require.NoError(t, err)
		assert.Same(t, q2, moved.Queue())
		d, err := array.Dot(moved, y)
		require.NoError(t, err)
		assert.Equal(t, 2*(0.5*1000+999*1000/2), d)
		require.NoError(t, x.IScale(2)) // the original is its own
		assert.Equal(t, h, s40bGet(t, moved))
		s40bClose(t, x, y, moved)
	})
}

// Views past the end: a view's bounds are its own, not its base's, nor
// those of the pool block under it (bins round sizes up; an arena's
// neighbour follows): each out-of-range Slice is ErrOutOfRange, and
// Slice(n, n) is an empty view.
func TestS40bPortViewsPastTheEnd(t *testing.T) {
	s38dForPolicies(t, func(t *testing.T, q *cl.CommandQueue, pool *mempool.Pool, _ []mempool.Option) {
		x, err := array.Arange[int32](q, 100, 0, 1, pool.Allocate) // 400 bytes: a 512-byte bin
		require.NoError(t, err)
		neighbour, err := array.Full[int32](q, 100, -1, pool.Allocate)
		require.NoError(t, err)
		v, err := x.Slice(10, 20)
		require.NoError(t, err)
		for _, b := range [][2]int{{0, 11}, {10, 11}, {11, 11}, {-1, 5}, {5, 4}, {0, 1 << 62}, {1 << 62, 1 << 62}, {-1 << 62, 0}} {
			w, err := v.Slice(b[0], b[1])
			assert.Nil(t, w, "v[%d:%d]", b[0], b[1])
			assert.ErrorIs(t, err, array.ErrOutOfRange, "v[%d:%d]", b[0], b[1])
		}
		for _, b := range [][2]int{{0, 101}, {100, 101}, {101, 101}, {0, 128}} {
			_, err := x.Slice(b[0], b[1])
			assert.ErrorIs(t, err, array.ErrOutOfRange, "x[%d:%d]", b[0], b[1])
		}
		end, err := v.Slice(10, 10)
		require.NoError(t, err)
		assert.Equal(t, 0, end.Len())
		last, err := v.Slice(9, 10)
		require.NoError(t, err)
		assert.Equal(t, []int32{19}, s40bGet(t, last))
		require.NoError(t, last.Fill(7))
		gx := s40bGet(t, x)
		assert.Equal(t, int32(7), gx[19])
		assert.Equal(t, int32(20), gx[20], "a view's write stays inside it")
		assert.Equal(t, int32(-1), s40bGet(t, neighbour)[0])
		s40bClose(t, x, neighbour, v, end, last)
	})
}
