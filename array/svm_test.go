package array_test

import (
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

// grains returns the SVM granularities q's device supports, by name:
// coarse grain always (the test is skipped, saying why, where the device
// has no SVM), fine grain where it has that too.
func grains(t *testing.T) (*cl.CommandQueue, map[string]bool) {
	t.Helper()
	q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
	out := map[string]bool{"coarse": false}
	if q.Context().SVMCapabilities()&cl.SVMFineGrainBuffer != 0 {
		out["fine"] = true
	} else {
		t.Logf("%v has no fine-grain SVM: coarse grain only", q.Device())
	}
	return q, out
}

// svmBudget returns an SVMBudget (of 1 GiB: it counts, it does not limit)
// over an SVM allocator on q, immediate (probed on q) or not, fine grain
// or coarse; when the test ends it checks that every byte was freed.
func svmBudget(t *testing.T, q *cl.CommandQueue, immediate, fine bool) *allocator.SVMBudget {
	t.Helper()
	var a allocator.SVMAllocator
	var err error
	if immediate {
		a, err = allocator.NewImmediateSVM(q, fine)
	} else {
		a, err = allocator.NewSVM(q.Context(), fine)
	}
	require.NoError(t, err)
	return counted(t, a)
}

// counted returns an SVMBudget over a that counts its live bytes (1 GiB
// of budget: it does not limit), and checks when the test ends that every
// byte was freed.
func counted(t *testing.T, a allocator.SVMAllocator) *allocator.SVMBudget {
	b := allocator.NewSVMBudget(a, 1<<30)
	t.Cleanup(func() { assert.Zero(t, b.Live(), "every SVM allocation was freed") })
	return b
}

// svmPool returns a pool over SVM (mempool.NewSVM) over a counted
// ImmediateSVM on q, fine grain or coarse; when the test ends it checks
// that every array was closed, closes the pool and checks that every byte
// was freed.
func svmPool(t *testing.T, q *cl.CommandQueue, fine bool, opts ...mempool.Option) *mempool.Pool {
	t.Helper()
	imm, err := allocator.NewImmediateSVM(q, fine)
	require.NoError(t, err)
	p, err := mempool.NewSVM(counted(t, imm), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { // before counted's check: cleanups run last first
		assert.Zero(t, p.ActiveBlocks(), "every array and temporary was closed")
		assert.NoError(t, p.Close())
	})
	return p
}

// alternating hands out SVM and buffer blocks in turn, so that operations
// mix operands of both kinds, and results of either kind: the first
// block is SVM.
func alternating(svm array.Alloc, buffers allocator.Allocator) array.Alloc {
	n := 0
	return func(size int64) (array.Block, error) {
		n++
		if n%2 == 1 {
			return svm(size)
		}
		return buffers.Allocate(size)
	}
}

// Every CPU-checked operation, over arrays in SVM (deferred and immediate
// allocations, blocks of an SVM pool with exact bins and with an arena,
// coarse and fine grain), over views of them, and over operands of both
// kinds mixed in one operation.
func TestOperationsOverSVMMatchTheCPU(t *testing.T) {
	q, gs := grains(t)
	// Not a multiple of any group size, and more elements than the
	// reductions' first stage has work-items (64·64): each folds several.
	// TestOperationsMatchTheCPU runs the larger sizes over buffers.
	n := cltest.Size(q, 300, 10_007)
	xs := make([]float64, n)
	ys := make([]float64, n)
	abs := make([]float64, n)
	for i := range xs {
		xs[i] = float64(i%97) - 40
		ys[i] = float64(i%13) + 1
		abs[i] = float64(i%97)*4 + 50
	}
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	count := pooltest.Counting(t, imm) // every buffer of the mixed arrays is freed once
	for grain, fine := range gs {
		pool, arena := svmPool(t, q, fine), svmPool(t, q, fine, mempool.WithArena())
		allocs := map[string]array.Alloc{
			"svm":       array.SVMAlloc(svmBudget(t, q, false, fine)),
			"immediate": array.SVMAlloc(svmBudget(t, q, true, fine)),
			"mixed":     alternating(array.SVMAlloc(svmBudget(t, q, false, fine)), count),
			"pool":      func(s int64) (array.Block, error) { return pool.Allocate(s) },
			// Blocks at offsets in shared SVM segments.
			"arena": func(s int64) (array.Block, error) { return arena.Allocate(s) },
		}
		for name, alloc := range allocs {
			for _, view := range []int{0, 5} {
				name := grain + "/" + name
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
		assert.Positive(t, pool.Stats().Hits, "%s: the pool served temporaries again", grain)
		as := arena.Stats()
		assert.Less(t, as.DeviceAllocs, as.Hits, "%s: arrays shared the arena's segments", grain)
	}
}

// switchable returns an Alloc that hands out SVM or buffer blocks as
// *svm says at each call, for copies between the two kinds.
func switchable(svm *bool, svmAlloc array.Alloc, buffers allocator.Allocator) array.Alloc {
	return func(size int64) (array.Block, error) {
		if *svm {
			return svmAlloc(size)
		}
		return buffers.Allocate(size)
	}
}

// The transfers and copies of an SVM array, and of a view into one, are
// those of a buffer array: FromHost, Get, Fill, GetInto, SetFrom, Copy
// (SVM to SVM, and both ways between SVM and a buffer, views included),
// GetPinned and SetPinned.
func TestSVMTransfers(t *testing.T) {
	q, gs := grains(t)
	n := cltest.Size(q, 1000, 1<<16)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	count := pooltest.Counting(t, imm)
	for grain, fine := range gs {
		t.Run(grain, func(t *testing.T) {
			budget := svmBudget(t, q, false, fine)
			inSVM := true
			alloc := switchable(&inSVM, array.SVMAlloc(budget), count)
			host := make([]int32, n+10)
			for i := range host {
				host[i] = int32(3*i - 7)
			}
			a, err := array.FromHost(q, host, alloc)
			require.NoError(t, err)
			defer a.Close()
			require.NotNil(t, a.SVM())
			assert.Nil(t, a.Buffer(), "an SVM array has no buffer")
			assert.Equal(t, fine, a.SVM().FineGrain())
			assert.Equal(t, int64(4*(n+10)), budget.Live())
			x, err := a.Slice(5, 5+n)
			require.NoError(t, err)
			defer x.Close()
			assert.Same(t, a.SVM(), x.SVM(), "a view is in its array's SVM")
			assert.Equal(t, 5, x.Offset())
			got, err := x.Get()
			require.NoError(t, err)
			require.Equal(t, host[5:5+n], got)

			// Copies: x (an SVM view) to a buffer, that to SVM, that to
			// SVM again, and a view of the buffer to SVM.
			copyTo := func(src *array.Array[int32], svm bool) *array.Array[int32] {
				inSVM = svm
				c, err := src.Copy()
				require.NoError(t, err)
				t.Cleanup(func() { c.Close() })
				assert.Equal(t, svm, c.SVM() != nil, "the copy is in SVM")
				assert.Equal(t, !svm, c.Buffer() != nil, "the copy is in a buffer")
				got, err := c.Get()
				require.NoError(t, err)
				want, err := src.Get()
				require.NoError(t, err)
				require.Equal(t, want, got)
				return c
			}
			b := copyTo(x, false)
			c := copyTo(b, true)
			copyTo(c, true)
			bv, err := b.Slice(1, n-1)
			require.NoError(t, err)
			defer bv.Close()
			copyTo(bv, true)
			inSVM = true

			// Fill, SetFrom and GetInto through the view land in its window.
			require.NoError(t, x.Fill(-1))
			require.NoError(t, x.GetInto(got))
			for i, v := range got {
				require.Equal(t, int32(-1), v, "element %d", i)
			}
			src := make([]int32, n)
			for i := range src {
				src[i] = int32(i * i)
			}
			require.NoError(t, x.SetFrom(src))
			all, err := a.Get()
			require.NoError(t, err)
			assert.Equal(t, host[:5], all[:5], "before the view")
			assert.Equal(t, src, all[5:5+n])
			assert.Equal(t, host[5+n:], all[5+n:], "after the view")
			got, err = c.Get()
			require.NoError(t, err)
			assert.Equal(t, host[5:5+n], got, "copies are arrays of their own")

			for name, s := range stagings(t, q) {
				t.Run(name, func(t *testing.T) { checkPinned[int32](t, q, s, array.SVMAlloc(budget), n) })
			}
		})
	}
}

// offsetBlock is an SVMBased block off bytes into an SVM of its own from
// a, as a pool's block is into its segment; Close waits for q and frees
// the SVM through a.
type offsetBlock struct {
	s   *cl.SVM
	off int64
	q   *cl.CommandQueue
	a   allocator.SVMAllocator
}

func (b offsetBlock) Buffer() *cl.Buffer { return nil }
func (b offsetBlock) SVM() *cl.SVM       { return b.s }
func (b offsetBlock) Offset() int64      { return b.off }
func (b offsetBlock) Close() error {
	if err := b.q.Finish(); err != nil {
		return err
	}
	return b.a.Free(b.s)
}

// atOffset returns an Alloc of offsetBlocks off bytes into their SVM.
func atOffset(q *cl.CommandQueue, a allocator.SVMAllocator, off int64) array.Alloc {
	return func(size int64) (array.Block, error) {
		s, err := a.Allocate(off + size)
		if err != nil {
			return nil, err
		}
		return offsetBlock{s, off, q, a}, nil
	}
}

// A block at an offset in its SVM: kernels, transfers and copies honour
// the offset, and leave the bytes before it alone.
func TestSVMBlocksAtAnOffset(t *testing.T) {
	q, _ := grains(t)
	budget := svmBudget(t, q, false, false)
	alloc := atOffset(q, budget, 8)
	n := cltest.Size(q, 300, 10_007)
	xs, ys := make([]float64, n), make([]float64, n)
	for i := range xs {
		xs[i], ys[i] = float64(i%31)-10, float64(i%7)+1
	}
	for _, view := range []int{0, 3} {
		t.Run(map[int]string{0: "float32", 3: "float32/views"}[view], func(t *testing.T) {
			checkOps(t, q, alloc, n, conv[float32](xs), conv[float32](ys), 1e-4, view)
		})
	}

	x, err := array.Full[int64](q, 4, -1, alloc)
	require.NoError(t, err)
	defer x.Close()
	assert.Equal(t, 1, x.Offset(), "8 bytes are one int64")
	y, err := x.Copy() // SVM to SVM, both at offset 8
	require.NoError(t, err)
	defer y.Close()
	marker := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	for _, a := range []*array.Array[int64]{x, y} {
		require.NoError(t, q.WriteSVM(a.SVM(), 0, marker))
	}
	require.NoError(t, y.IAdd(x))
	require.NoError(t, x.Fill(5))
	for _, c := range []struct {
		name string
		a    *array.Array[int64]
		want []int64
	}{{"x", x, []int64{5, 5, 5, 5}}, {"y", y, []int64{-2, -2, -2, -2}}} {
		head := make([]byte, 8)
		require.NoError(t, q.ReadSVM(c.a.SVM(), 0, head))
		assert.Equal(t, marker, head, "%s: the 8 bytes before the block are untouched", c.name)
		got, err := c.a.Get()
		require.NoError(t, err)
		assert.Equal(t, c.want, got, c.name)
	}
}

// clSVMFree does not wait for commands: the Close that frees an SVMAlloc
// allocation waits for the array's queue first, so that closing an array
// right after its last operation is enqueued is as legal as for buffers.
func TestSVMCloseWaitsForTheQueue(t *testing.T) {
	q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
	budget := svmBudget(t, q, false, false)
	const n, iters = 1024, 200_000
	x, err := array.Full[int32](q, n, 1, array.SVMAlloc(budget))
	require.NoError(t, err)
	out, err := array.Empty[int32](q, n, array.SVMAlloc(budget))
	require.NoError(t, err)
	defer out.Close()
	k := cltest.SlowReadKernel(t, q)
	require.NoError(t, k.SetArgs(x.SVM(), out.SVM(), int32(iters)))
	ev, err := q.EnqueueNDRangeKernel(k, nil, []int{n}, nil)
	require.NoError(t, err)
	defer ev.Release()

	require.NoError(t, x.Close())
	done, err := ev.Done()
	require.NoError(t, err)
	assert.True(t, done, "Close returned before the kernel that reads the array ended")
	assert.Equal(t, int64(4*n), budget.Live(), "x's SVM is freed, out's is not")
	got, err := out.Get()
	require.NoError(t, err)
	for i, v := range got {
		require.Equal(t, int32(iters), v, "element %d", i)
	}
}

// SVMAlloc over a nil allocator is an error, on every runtime.
func TestSVMAllocOfNil(t *testing.T) {
	q := cltest.Queue(t)
	x, err := array.Zeros[float32](q, 4, array.SVMAlloc(nil))
	assert.Nil(t, x)
	assert.EqualError(t, err, "array: Zeros: allocating 4 float32 elements (16 bytes): SVMAlloc: nil allocator.SVMAllocator")
}

// Misuse of SVM arrays is refused, and gives the memory back.
func TestSVMMisuse(t *testing.T) {
	q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
	budget := svmBudget(t, q, false, false)

	ctx2, err := cl.CreateContext(q.Device())
	require.NoError(t, err)
	defer ctx2.Release()
	svm2, err := allocator.NewSVM(ctx2, false)
	require.NoError(t, err)
	other := counted(t, svm2)
	_, err = array.Zeros[float32](q, 4, array.SVMAlloc(other))
	assert.ErrorIs(t, err, array.ErrContextMismatch)
	assert.ErrorContains(t, err, "array: Zeros: the allocator's memory is not in the queue's context")
	assert.Zero(t, other.Live(), "the refused SVM was freed")

	_, err = array.Zeros[float32](q, 4, atOffset(q, budget, 2))
	assert.ErrorContains(t, err, "array: Zeros: the allocator's block is at byte offset 2, not a multiple of the 4-byte float32 elements")
	assert.Zero(t, budget.Live(), "the refused block was closed")

	x, err := array.Zeros[float32](q, 4, array.SVMAlloc(budget))
	require.NoError(t, err)
	require.NotNil(t, x.SVM())
	require.NoError(t, x.Close())
	assert.Nil(t, x.SVM(), "a closed array has no memory")
	assert.Zero(t, budget.Live())
	assert.ErrorIs(t, x.Close(), array.ErrClosed)
	var nilArray *array.Array[float32]
	assert.Nil(t, nilArray.SVM())
}
