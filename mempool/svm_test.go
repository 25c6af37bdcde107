package mempool_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// svmCounting counts what an SVM pool's allocator hands out and takes
// back, as allocator.Counting does for buffers.
type svmCounting struct {
	inner allocator.SVMAllocator

	mu                   sync.Mutex
	allocs, frees, fails int
	live                 map[*cl.SVM]bool
	badFrees             int
}

func newSVMCounting(a allocator.SVMAllocator) *svmCounting {
	return &svmCounting{inner: a, live: map[*cl.SVM]bool{}}
}

func (c *svmCounting) Allocate(size int64) (*cl.SVM, error) {
	s, err := c.inner.Allocate(size)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.fails++
		return nil, err
	}
	c.allocs++
	c.live[s] = true
	return s, nil
}

func (c *svmCounting) Free(s *cl.SVM) error {
	c.mu.Lock()
	if !c.live[s] {
		c.badFrees++
	}
	delete(c.live, s)
	c.frees++
	c.mu.Unlock()
	return c.inner.Free(s)
}

// Unwrap lets the pool find the queue and context of the allocator inside.
func (c *svmCounting) Unwrap() allocator.SVMAllocator { return c.inner }

// svmFixture is an SVM pool over a counting ImmediateSVM (coarse grain, or
// fine where asked) on the test device; the test is skipped where the
// device has no SVM. When the test ends, with every block closed, it stops
// the pool and checks that every allocation was freed exactly once.
type svmFixture struct {
	q     *cl.CommandQueue
	count *svmCounting
	pool  *mempool.Pool
}

func newSVMFixture(t *testing.T, fine bool, wrap func(allocator.SVMAllocator) allocator.SVMAllocator, opts ...mempool.Option) *svmFixture {
	t.Helper()
	need := cl.SVMCoarseGrainBuffer
	if fine {
		need |= cl.SVMFineGrainBuffer
	}
	q := cltest.SVMQueue(t, need)
	imm, err := allocator.NewImmediateSVM(q, fine)
	require.NoError(t, err)
	count := newSVMCounting(imm)
	var a allocator.SVMAllocator = count
	if wrap != nil {
		a = wrap(count)
	}
	p, err := mempool.NewSVM(a, opts...)
	require.NoError(t, err)
	f := &svmFixture{q: q, count: count, pool: p}
	t.Cleanup(func() {
		require.Zero(t, p.ActiveBlocks(), "a test left blocks open")
		require.NoError(t, p.Close())
		s := p.Stats()
		count.mu.Lock()
		defer count.mu.Unlock()
		assert.Zero(t, s.ManagedBytes)
		assert.Empty(t, count.live, "SVM never freed")
		assert.Zero(t, count.badFrees, "SVM freed twice or not ours")
		assert.Equal(t, int64(count.allocs), s.DeviceAllocs)
		assert.Equal(t, int64(count.frees), s.DeviceFrees)
	})
	return f
}

// fillKernel sets each int of x to v.
const fillKernel = `__kernel void fill(__global int *x, int v) { x[get_global_id(0)] = v; }`

func buildFill(t *testing.T, q *cl.CommandQueue) *cl.Kernel {
	t.Helper()
	prog, err := q.Context().BuildProgram(fillKernel, "")
	require.NoError(t, err)
	t.Cleanup(func() { prog.Release() })
	k, err := prog.Kernel("fill")
	require.NoError(t, err)
	t.Cleanup(func() { k.Release() })
	return k
}

// readSVM returns the n ints of b's block, through a map.
func readSVM(t *testing.T, q *cl.CommandQueue, b *mempool.PooledBuffer, n int) []int32 {
	t.Helper()
	host, err := q.EnqueueSVMMap(b.SVM(), false, b.Offset(), int64(4*n))
	require.NoError(t, err)
	got := make([]int32, n)
	copy(cl.Bytes(got), host)
	require.NoError(t, q.EnqueueSVMUnmap(b.SVM()))
	return got
}

func TestSVMPoolKernelsUseEachBlock(t *testing.T) {
	for _, pol := range policies {
		t.Run(pol.name, func(t *testing.T) {
			f := newSVMFixture(t, false, nil, pol.opts...)
			k := buildFill(t, f.q)
			const n = 256
			var blocks []*mempool.PooledBuffer
			for i := range 3 {
				b, err := f.pool.Allocate(4 * n)
				require.NoError(t, err)
				require.NotNil(t, b.SVM())
				assert.Nil(t, b.Buffer(), "an SVM block has no buffer")
				assert.Nil(t, b.Base())
				require.NoError(t, k.SetArgSVMPointer(0, b.SVM(), b.Offset()))
				require.NoError(t, k.SetArg(1, int32(i+1)))
				require.NoError(t, f.q.EnqueueKernel(k, []int{n}, nil))
				blocks = append(blocks, b)
			}
			if pol.name == "arena" {
				require.Same(t, blocks[0].SVM(), blocks[2].SVM(), "the arena cuts small blocks from one segment")
				require.NotEqual(t, blocks[0].Offset(), blocks[2].Offset())
			}
			require.NoError(t, f.q.Finish())
			for i, b := range blocks {
				got := readSVM(t, f.q, b, n)
				assert.Equal(t, []int32{int32(i + 1), int32(i + 1)}, []int32{got[0], got[n-1]}, "block %d", i)
			}
			allocs := f.pool.Stats().DeviceAllocs
			require.NoError(t, blocks[1].Close())
			again, err := f.pool.Allocate(4 * n)
			require.NoError(t, err)
			assert.Equal(t, allocs, f.pool.Stats().DeviceAllocs, "a block given back is reused")
			for _, b := range []*mempool.PooledBuffer{blocks[0], blocks[2], again} {
				require.NoError(t, b.Close())
				assert.Nil(t, b.SVM(), "SVM after Close")
			}
		})
	}
}

// A fine-grain SVM pool's blocks are host memory too: the host writes a
// block's bytes directly and a kernel reads them.
func TestSVMPoolFineGrainHostAccess(t *testing.T) {
	f := newSVMFixture(t, true, nil, mempool.WithArena())
	a, err := f.pool.Allocate(64)
	require.NoError(t, err)
	b, err := f.pool.Allocate(64)
	require.NoError(t, err)
	require.Same(t, a.SVM(), b.SVM())
	host := b.SVM().Bytes()[b.Offset() : b.Offset()+64]
	copy(host, cl.Bytes([]int32{5, 6, 7}))
	_, err = f.q.EnqueueSVMMemcpy(true, a.SVM(), a.Offset(), b.SVM(), b.Offset(), 12)
	require.NoError(t, err)
	got := make([]int32, 3)
	copy(cl.Bytes(got), a.SVM().Bytes()[a.Offset():])
	assert.Equal(t, []int32{5, 6, 7}, got)
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
}

// The slow-kernel test of TestCrossQueueReuseWaitsForTheKernel, over SVM:
// queue ordering is the pool's, whatever its memory.
func TestSVMPoolCrossQueueReuseWaitsForTheKernel(t *testing.T) {
	for _, pol := range policies[:2] {
		t.Run(pol.name, func(t *testing.T) {
			f := newSVMFixture(t, false, nil, pol.opts...)
			qa, qb := f.q, cltest.SecondQueue(t, f.q, 0)
			k := cltest.SlowReadKernel(t, qa)
			n, iters, trials := 64, cltest.Size(qa, 100, 1000000), cltest.Size(qa, 3, 10)
			out, err := qa.Context().CreateBuffer(cl.MemReadWrite, int64(4*n))
			require.NoError(t, err)
			defer out.Release()
			corrupted := 0
			for range trials {
				x, err := f.pool.On(qa).Allocate(int64(4 * n))
				require.NoError(t, err)
				ev, err := qa.EnqueueSVMMemFill(x.SVM(), cl.Bytes([]int32{1}), x.Offset(), x.Size())
				require.NoError(t, err)
				require.NoError(t, ev.Release())
				require.NoError(t, k.SetArgSVMPointer(0, x.SVM(), x.Offset()))
				require.NoError(t, k.SetArg(1, out))
				require.NoError(t, k.SetArg(2, int32(iters)))
				require.NoError(t, qa.EnqueueKernel(k, []int{n}, nil))
				require.NoError(t, qa.Flush())
				svm, off := x.SVM(), x.Offset()
				require.NoError(t, x.Close()) // legal right after the enqueue

				y, err := f.pool.On(qb).Allocate(int64(4 * n))
				require.NoError(t, err)
				require.Same(t, svm, y.SVM(), "the test must exercise reuse")
				require.Equal(t, off, y.Offset())
				fill, err := qb.EnqueueSVMMemFill(y.SVM(), cl.Bytes([]int32{7}), y.Offset(), y.Size())
				require.NoError(t, err)
				require.NoError(t, fill.Wait())
				require.NoError(t, fill.Release())
				require.NoError(t, y.Close())

				if slowReadCorrupted(t, qa, out, n, iters) {
					corrupted++
				}
			}
			assert.Zero(t, corrupted, "results corrupted by a reuse on another queue, of %d", trials)
			assert.Equal(t, int64(trials), f.pool.Stats().Queues[1].Handovers)
			// Freeing SVM waits for the queues that used it: qb must still
			// be there (the test's cleanup releases it before the pool's).
			require.NoError(t, f.pool.FreeHeld())
		})
	}
}

// Out of memory through SVMBudget: the pool frees what it holds and
// retries, then fails with an actionable error; nothing leaks.
func TestSVMPoolOutOfMemory(t *testing.T) {
	for _, pol := range policies[:2] {
		t.Run(pol.name, func(t *testing.T) {
			const budget = 8 << 20
			f := newSVMFixture(t, false, func(a allocator.SVMAllocator) allocator.SVMAllocator {
				return allocator.NewSVMBudget(a, budget)
			}, pol.opts...)
			held, err := f.pool.Allocate(3 << 20)
			require.NoError(t, err)
			require.NoError(t, held.Close())
			require.Positive(t, f.pool.HeldBytes())

			big, err := f.pool.Allocate(6 << 20) // fits only once the held block is freed
			require.NoError(t, err)
			assert.Zero(t, f.pool.HeldBytes(), "the held block was freed to make room")

			_, err = f.pool.Allocate(4 << 20)
			require.Error(t, err)
			assert.True(t, errors.Is(err, mempool.ErrOutOfMemory), "%v", err)
			var oom *mempool.OutOfMemoryError
			require.ErrorAs(t, err, &oom)
			assert.Equal(t, int64(4<<20), oom.Requested)
			require.NoError(t, big.Close())
		})
	}
}

func TestSVMPoolHooksSeeTheSVM(t *testing.T) {
	f := newSVMFixture(t, false, nil)
	var mu sync.Mutex
	var events []mempool.Event
	remove := f.pool.AddHook(mempool.HookFunc(func(e mempool.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}))
	defer remove()
	b, err := f.pool.Allocate(100)
	require.NoError(t, err)
	svm := b.SVM()
	require.NoError(t, b.Close())
	mu.Lock()
	defer mu.Unlock()
	var kinds []mempool.EventKind
	for _, e := range events {
		kinds = append(kinds, e.Kind)
		assert.Nil(t, e.Buffer, "%v", e.Kind)
		if e.Kind != mempool.MallocBefore && e.Kind != mempool.AllocBefore {
			assert.Same(t, svm, e.SVM, "%v", e.Kind)
		}
	}
	assert.Equal(t, []mempool.EventKind{mempool.MallocBefore, mempool.AllocBefore, mempool.AllocAfter,
		mempool.MallocAfter, mempool.FreeBefore, mempool.FreeAfter}, kinds)
}

func TestNewSVMMisuse(t *testing.T) {
	_, err := mempool.NewSVM(nil)
	assert.ErrorContains(t, err, "mempool: NewSVM: nil allocator")
	q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
	a, err := allocator.NewSVM(q.Context(), false)
	require.NoError(t, err)
	_, err = mempool.NewSVM(a, mempool.WithMaxSplitSize(1<<20))
	assert.ErrorContains(t, err, "mempool: NewSVM: WithMaxSplitSize needs WithArena")
	_, err = mempool.NewSVM(a, mempool.WithLeadingBits(-1))
	assert.ErrorContains(t, err, "mempool: NewSVM: leading bits -1")
}

// An SVM set keeps an SVM pool per context, as a buffer set does: two
// contexts stand in for two devices. Each pool's limit is its own, and
// closing the set frees every allocation of both.
func TestSVMSetRoutesByContext(t *testing.T) {
	q1 := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
	ctx2, err := cl.CreateContext(q1.Device())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ctx2.Release()) })
	q2, err := cl.NewCommandQueue(ctx2, q1.Device(), 0)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q2.Release()) })

	var mu sync.Mutex
	counts := map[*cl.Context]*svmCounting{}
	set := mempool.NewSVMSet(func(q *cl.CommandQueue) (allocator.SVMAllocator, error) {
		a, err := allocator.NewImmediateSVM(q, false)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		counts[q.Context()] = newSVMCounting(a)
		return counts[q.Context()], nil
	}, mempool.WithArena())
	require.NoError(t, set.SetLimit(ctx2, 4<<20))

	a, err := set.On(q1).Allocate(1000)
	require.NoError(t, err)
	b, err := set.On(q2).Allocate(1000)
	require.NoError(t, err)
	assert.Same(t, q1.Context(), a.SVM().Context())
	assert.Same(t, ctx2, b.SVM().Context())
	_, err = set.On(q2).Allocate(8 << 20)
	assert.ErrorIs(t, err, mempool.ErrOutOfMemory, "the second context's limit")

	st := set.Stats()
	require.Len(t, st.Devices, 2)
	assert.Equal(t, 2, st.ActiveBlocks)
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	require.NoError(t, set.Close())
	mu.Lock()
	defer mu.Unlock()
	for ctx, c := range counts {
		assert.Empty(t, c.live, "SVM of %v never freed", ctx)
		assert.Equal(t, c.allocs, c.frees)
		assert.Positive(t, c.allocs)
	}
}

func TestSVMSetWithoutSVM(t *testing.T) {
	q := cltest.Queue(t)
	if q.Context().SVMCapabilities() != 0 {
		t.Skipf("the device %v has SVM; this test needs one without (Oclgrind)", q.Device())
	}
	set := mempool.NewSVMSet(nil)
	defer set.Close()
	_, err := set.On(q).Allocate(100)
	assert.ErrorIs(t, err, cl.ErrSVMNotSupported)
}

// clSVMFree, unlike clReleaseMemObject, does not wait for the commands
// that use the memory. A block closed right after a slow kernel that reads
// it is legal; a FreeHeld right after must not free its SVM under the
// kernel: the pool waits for the queues that may still use the segment
// first. Without the wait, the memory goes back to the runtime and is
// written by whoever gets it next while the kernel reads.
func TestSVMPoolFreeWaitsForTheCommands(t *testing.T) {
	for _, pol := range policies[:2] {
		t.Run(pol.name, func(t *testing.T) {
			f := newSVMFixture(t, false, nil, pol.opts...)
			q := f.q
			k := cltest.SlowReadKernel(t, q)
			n, iters, trials := 1<<14, cltest.Size(q, 100, 20000), cltest.Size(q, 2, 6)
			out, err := q.Context().CreateBuffer(cl.MemReadWrite, int64(4*n))
			require.NoError(t, err)
			defer out.Release()
			raw, err := allocator.NewSVM(q.Context(), false)
			require.NoError(t, err)
			q2 := cltest.SecondQueue(t, q, 0)
			corrupted := 0
			for range trials {
				x, err := f.pool.On(q).Allocate(int64(4 * n))
				require.NoError(t, err)
				ev, err := q.EnqueueSVMMemFill(x.SVM(), cl.Bytes([]int32{1}), x.Offset(), x.Size())
				require.NoError(t, err)
				require.NoError(t, ev.Release())
				require.NoError(t, k.SetArgSVMPointer(0, x.SVM(), x.Offset()))
				require.NoError(t, k.SetArg(1, out))
				require.NoError(t, k.SetArg(2, int32(iters)))
				require.NoError(t, q.EnqueueKernel(k, []int{n}, nil))
				require.NoError(t, q.Flush())
				require.NoError(t, x.Close())         // legal right after the enqueue
				require.NoError(t, f.pool.FreeHeld()) // frees the segment

				// Whoever gets the memory next writes it at once.
				y, err := raw.Allocate(int64(4 * n))
				require.NoError(t, err)
				fill, err := q2.EnqueueSVMMemFill(y, cl.Bytes([]int32{7}), 0, int64(4*n))
				require.NoError(t, err)
				require.NoError(t, fill.Wait())
				require.NoError(t, fill.Release())
				if slowReadCorrupted(t, q, out, n, iters) {
					corrupted++
				}
				require.NoError(t, raw.Free(y))
			}
			assert.Zero(t, corrupted, "results corrupted after FreeHeld freed SVM in use, of %d", trials)
		})
	}
}
