package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A fine-grain block is host memory, but a block reused on the same queue
// costs no OpenCL call, so a kernel enqueued before the last Close may
// still read it: the host writes it after a blocking map of its range,
// which the queue orders after those commands (the package doc's rule).
// Writing without the map corrupted 5 of 5 results on POCL.
func TestSVMPoolFineGrainHostWriteAfterReuse(t *testing.T) {
	f := newSVMFixture(t, true, nil)
	q := f.q
	k := cltest.SlowReadKernel(t, q)
	n, iters, trials := 64, cltest.Size(q, 100, 1000000), cltest.Size(q, 2, 5)
	out, err := q.Context().CreateBuffer(cl.MemReadWrite, int64(4*n))
	require.NoError(t, err)
	defer out.Release()
	sevens := make([]int32, n)
	for i := range sevens {
		sevens[i] = 7
	}
	corrupted := 0
	for range trials {
		x, err := f.pool.On(q).Allocate(int64(4 * n))
		require.NoError(t, err)
		copy(x.SVM().Bytes()[x.Offset():], cl.Bytes(allOnes(n))) // nothing uses it yet
		require.NoError(t, k.SetArgSVMPointer(0, x.SVM(), x.Offset()))
		require.NoError(t, k.SetArg(1, out))
		require.NoError(t, k.SetArg(2, int32(iters)))
		require.NoError(t, q.EnqueueKernel(k, []int{n}, nil))
		require.NoError(t, q.Flush())
		svm, off := x.SVM(), x.Offset()
		require.NoError(t, x.Close()) // legal at once

		y, err := f.pool.On(q).Allocate(int64(4 * n))
		require.NoError(t, err)
		require.Same(t, svm, y.SVM(), "the test must exercise reuse")
		require.Equal(t, off, y.Offset())
		host, err := q.EnqueueSVMMap(y.SVM(), true, y.Offset(), int64(4*n))
		require.NoError(t, err)
		copy(host, cl.Bytes(sevens))
		require.NoError(t, q.EnqueueSVMUnmap(y.SVM()))
		require.NoError(t, y.Close())
		if slowReadCorrupted(t, q, out, n, iters) {
			corrupted++
		}
	}
	assert.Zero(t, corrupted, "a host write after the map corrupted the kernel, of %d", trials)
}

// SVM whose queue was released after the pool's Close, before the block's,
// is freed at the block's Close: the queue's Release finished its commands
// (cl.CommandQueue.Finished), so none may still use it. Before session 35
// such SVM was left allocated, with an error, as it still is where the
// queue cannot be waited for.
func TestSVMWhoseQueueWasReleasedIsFreed(t *testing.T) {
	q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
	imm, err := allocator.NewImmediateSVM(q, false)
	require.NoError(t, err)
	count := newSVMCounting(imm)
	p, err := mempool.NewSVM(count)
	require.NoError(t, err)
	q2, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
	require.NoError(t, err)
	b, err := p.On(q2).Allocate(4096)
	require.NoError(t, err)
	ev, err := q2.EnqueueSVMMemFill(b.SVM(), []byte{1}, b.Offset(), 4096)
	require.NoError(t, err)
	require.NoError(t, ev.Release())
	svm := b.SVM()
	require.NoError(t, p.Close())
	require.NoError(t, q2.Release())
	require.True(t, q2.Finished())
	require.NoError(t, b.Close())
	count.mu.Lock()
	assert.Equal(t, 1, count.frees)
	assert.False(t, count.live[svm], "the SVM is freed")
	count.mu.Unlock()
}

// A Set of SVM pools refuses an allocator of another context, whether it
// has a queue or not.
func TestSVMSetRefusesAnAllocatorOfAnotherContext(t *testing.T) {
	q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
	other, err := cl.CreateContext(q.Device())
	require.NoError(t, err)
	defer other.Release()
	set := mempool.NewSVMSet(func(*cl.CommandQueue) (allocator.SVMAllocator, error) {
		return allocator.NewSVM(other, false)
	})
	defer set.Close()
	_, err = set.Pool(q)
	assert.ErrorIs(t, err, mempool.ErrQueueMismatch)
	assert.ErrorContains(t, err, "allocates in another context")
}

// A nil pointer of an allocator type is an error, as a nil allocator is,
// for New, NewSVM and a Set's allocator, not a panic.
func TestTypedNilAllocators(t *testing.T) {
	var svm *allocator.SVM
	_, err := mempool.NewSVM(svm)
	assert.ErrorContains(t, err, "mempool: NewSVM: nil allocator")
	var imm *allocator.Immediate
	_, err = mempool.New(imm)
	assert.ErrorContains(t, err, "mempool: New: nil allocator")

	q := cltest.Queue(t)
	set := mempool.NewSet(func(*cl.CommandQueue) (allocator.Allocator, error) { return imm, nil })
	defer set.Close()
	_, err = set.Pool(q)
	assert.ErrorContains(t, err, "is nil")
}

// The blocks of one arena segment share its SVM, which one map at a time
// may cover (cl.SVM): a second block of the segment maps once the first
// is unmapped. The package doc says so.
func TestSVMArenaBlocksMapOneAtATime(t *testing.T) {
	f := newSVMFixture(t, false, nil, mempool.WithArena())
	a, err := f.pool.Allocate(64)
	require.NoError(t, err)
	b, err := f.pool.Allocate(64)
	require.NoError(t, err)
	require.Same(t, a.SVM(), b.SVM())
	_, err = f.q.EnqueueSVMMap(a.SVM(), true, a.Offset(), 64)
	require.NoError(t, err)
	_, err = f.q.EnqueueSVMMap(b.SVM(), true, b.Offset(), 64)
	assert.ErrorIs(t, err, cl.ErrInvalidValue, "one map per SVM")
	require.NoError(t, f.q.EnqueueSVMUnmap(a.SVM()))
	_, err = f.q.EnqueueSVMMap(b.SVM(), true, b.Offset(), 64)
	require.NoError(t, err)
	require.NoError(t, f.q.EnqueueSVMUnmap(b.SVM()))
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
}
