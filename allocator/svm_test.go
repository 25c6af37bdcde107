package allocator_test

import (
	"encoding/binary"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// svmAllocators returns an SVM and an ImmediateSVM allocator on q, by name,
// fine-grain if fine.
func svmAllocators(t *testing.T, q *cl.CommandQueue, fine bool) map[string]allocator.SVMAllocator {
	d, err := allocator.NewSVM(q.Context(), fine)
	require.NoError(t, err)
	i, err := allocator.NewImmediateSVM(q, fine)
	require.NoError(t, err)
	return map[string]allocator.SVMAllocator{"deferred": d, "immediate": i}
}

// useSVM writes 4 bytes to s through the host (a map for coarse grain)
// and reads them back through a device copy into a second allocation.
func useSVM(t *testing.T, q *cl.CommandQueue, a allocator.SVMAllocator, s *cl.SVM) {
	t.Helper()
	host := s.Bytes()
	if !s.FineGrain() {
		var err error
		host, err = q.EnqueueSVMMap(s, true, 0, 4)
		require.NoError(t, err)
	}
	binary.LittleEndian.PutUint32(host, 0xc0ffee)
	if !s.FineGrain() {
		require.NoError(t, q.EnqueueSVMUnmap(s))
	}
	dst, err := a.Allocate(4)
	require.NoError(t, err)
	_, err = q.EnqueueSVMMemcpy(true, dst, 0, s, 0, 4)
	require.NoError(t, err)
	got, err := q.EnqueueSVMMap(dst, false, 0, 4)
	require.NoError(t, err)
	assert.Equal(t, uint32(0xc0ffee), binary.LittleEndian.Uint32(got))
	require.NoError(t, q.EnqueueSVMUnmap(dst))
	require.NoError(t, q.Finish())
	require.NoError(t, a.Free(dst))
}

func TestSVMAllocator(t *testing.T) {
	q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
	for _, fine := range []bool{false, true} {
		if fine && q.Context().SVMCapabilities()&cl.SVMFineGrainBuffer == 0 {
			t.Logf("%v has no fine-grain SVM: coarse grain only", q.Device())
			continue
		}
		for name, a := range svmAllocators(t, q, fine) {
			t.Run(name+map[bool]string{false: "/coarse", true: "/fine"}[fine], func(t *testing.T) {
				s, err := a.Allocate(64)
				require.NoError(t, err)
				require.NotNil(t, s)
				assert.Equal(t, int64(64), s.Size())
				assert.Equal(t, fine, s.FineGrain())
				useSVM(t, q, a, s)
				require.NoError(t, a.Free(s))
				assert.True(t, s.Freed())
				assert.ErrorIs(t, a.Free(s), allocator.ErrFreed, "double free")

				s, err = a.Allocate(0)
				assert.NoError(t, err)
				assert.Nil(t, s)
				assert.NoError(t, a.Free(nil))
				_, err = a.Allocate(-1)
				assert.ErrorIs(t, err, cl.ErrInvalidBufferSize)
				_, err = a.Allocate(q.Context().MaxMemAllocSize() + 1)
				assert.ErrorIs(t, err, cl.ErrInvalidBufferSize)
			})
		}
	}
}

// NewSVM and NewImmediateSVM refuse what the context cannot do, up front:
// SVM on a device without it, fine grain on a coarse-grain-only one (a copy
// of the device with fewer capabilities stands for it).
func TestNewSVMRefuses(t *testing.T) {
	_, err := allocator.NewSVM(nil, false)
	assert.ErrorIs(t, err, cl.ErrInvalidContext)
	_, err = allocator.NewImmediateSVM(nil, false)
	assert.ErrorIs(t, err, cl.ErrInvalidCommandQueue)

	q := cltest.Queue(t)
	if q.Context().SVMCapabilities() == 0 {
		_, err := allocator.NewSVM(q.Context(), false)
		assert.ErrorIs(t, err, cl.ErrSVMNotSupported, "%v has no SVM", q.Device())
		_, err = allocator.NewImmediateSVM(q, false)
		assert.ErrorIs(t, err, cl.ErrSVMNotSupported)
		return
	}
	d := *q.Device()
	d.SVMCapabilities = cl.SVMCoarseGrainBuffer
	ctx, err := cl.CreateContext(&d)
	require.NoError(t, err)
	defer ctx.Release()
	_, err = allocator.NewSVM(ctx, true)
	assert.ErrorIs(t, err, cl.ErrSVMNotSupported)
	assert.ErrorContains(t, err, "fine-grain buffer")
	a, err := allocator.NewSVM(ctx, false)
	require.NoError(t, err)
	assert.Same(t, ctx, a.Context())
	assert.Equal(t, cl.SVMReadWrite, a.Flags())
}

// The immediate probe leaves nothing of its own visible in a fine-grain
// allocation once the host has written it: the probe is over before
// Allocate returns.
func TestImmediateSVMProbeIsDone(t *testing.T) {
	q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer|cl.SVMFineGrainBuffer)
	a, err := allocator.NewImmediateSVM(q, true)
	require.NoError(t, err)
	assert.Same(t, q, a.Queue())
	for i := 0; i < 50; i++ {
		s, err := a.Allocate(16)
		require.NoError(t, err)
		b := s.Bytes()
		for j := range b {
			b[j] = 0xff
		}
		require.NoError(t, q.Finish())
		assert.Equal(t, byte(0xff), s.Bytes()[0], "allocation %d: the probe's zero came after the host's write", i)
		require.NoError(t, a.Free(s))
	}
}

// An SVMBudget refuses past its bytes with the out-of-memory error a pool
// reacts to, leaks nothing on refusal, and gets the bytes back on Free.
func TestSVMBudget(t *testing.T) {
	q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
	imm, err := allocator.NewImmediateSVM(q, false)
	require.NoError(t, err)
	b := allocator.NewSVMBudget(imm, 1<<20)
	assert.Equal(t, int64(1<<20), b.Limit())
	assert.Same(t, imm, b.Unwrap())

	s, err := b.Allocate(1 << 19)
	require.NoError(t, err)
	assert.Equal(t, int64(1<<19), b.Live())
	_, err = b.Allocate(1<<19 + 1)
	assert.ErrorIs(t, err, cl.ErrMemObjectAllocationFailure)
	assert.ErrorIs(t, err, allocator.ErrOutOfMemory, "issue 21: the shared sentinel")
	assert.ErrorContains(t, err, "clSVMAlloc")
	assert.ErrorContains(t, err, "allocator.SVMBudget")
	assert.Equal(t, int64(1<<19), b.Live(), "a refusal takes no bytes")
	_, err = b.Allocate(1<<63 - 1)
	assert.ErrorIs(t, err, cl.ErrMemObjectAllocationFailure, "no overflow")
	_, err = b.Allocate(-1)
	assert.ErrorIs(t, err, cl.ErrInvalidBufferSize)

	s2, err := b.Allocate(1 << 19)
	require.NoError(t, err, "exactly the budget")
	require.NoError(t, b.Free(s))
	assert.ErrorIs(t, b.Free(s), allocator.ErrFreed)
	assert.Equal(t, int64(1<<19), b.Live(), "a double free returns no bytes")
	require.NoError(t, b.Free(s2))
	assert.Zero(t, b.Live())
	assert.NoError(t, b.Free(nil))

	// An inner failure gives the reservation back: the context's max
	// allocation is refused below the budget.
	big := allocator.NewSVMBudget(imm, 1<<62)
	_, err = big.Allocate(q.Context().MaxMemAllocSize() + 1)
	assert.ErrorIs(t, err, cl.ErrInvalidBufferSize)
	assert.Zero(t, big.Live())
}

// A free of memory from another context's allocator is refused, clearly,
// and frees nothing: the memory stays with its own allocator.
func TestFreeOfAnotherContextsMemory(t *testing.T) {
	q := cltest.Queue(t)
	other, err := cl.CreateContext(q.Device())
	require.NoError(t, err)
	defer other.Release()

	mine, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	theirs, err := allocator.NewDeferred(other, cl.MemReadWrite)
	require.NoError(t, err)
	buf, err := theirs.Allocate(64)
	require.NoError(t, err)
	err = mine.Free(buf)
	assert.ErrorIs(t, err, cl.ErrInvalidContext)
	assert.ErrorContains(t, err, "allocator: Free: the 64-byte buffer was made in another context")
	assert.False(t, buf.Released())
	require.NoError(t, theirs.Free(buf))

	if q.Context().SVMCapabilities() == 0 {
		t.Skipf("the SVM half needs shared virtual memory; %v has none", q.Device())
	}
	mineSVM, err := allocator.NewSVM(q.Context(), false)
	require.NoError(t, err)
	theirsSVM, err := allocator.NewSVM(other, false)
	require.NoError(t, err)
	s, err := theirsSVM.Allocate(64)
	require.NoError(t, err)
	err = mineSVM.Free(s)
	assert.ErrorIs(t, err, cl.ErrInvalidContext)
	assert.ErrorContains(t, err, "allocator: SVM.Free: the 64-byte SVM was allocated in another context")
	assert.False(t, s.Freed())
	require.NoError(t, theirsSVM.Free(s))
}

// ContextOf and QueueOf find an allocator's context and queue through
// wrappers of buffers (Counting, Budget) and of SVM (SVMBudget) alike;
// DeviceOf is the context's first device.
func TestContextAndQueueThroughWrappers(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	wrapped := allocator.NewCounting(allocator.NewBudget(imm, 1<<20))
	assert.Same(t, q.Context(), allocator.ContextOf(wrapped))
	assert.Same(t, q, allocator.QueueOf(wrapped))
	assert.Same(t, q.Device(), allocator.DeviceOf(wrapped))
	def, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	assert.Nil(t, allocator.QueueOf(allocator.NewCounting(def)), "a Deferred has no queue")
	assert.Nil(t, allocator.ContextOf(nil))

	if q.Context().SVMCapabilities() == 0 {
		t.Skipf("the SVM half needs shared virtual memory; %v has none", q.Device())
	}
	isvm, err := allocator.NewImmediateSVM(q, false)
	require.NoError(t, err)
	budget := allocator.NewSVMBudget(isvm, 1<<20)
	assert.Same(t, q.Context(), allocator.ContextOf(budget))
	assert.Same(t, q, allocator.QueueOf(budget))
}
