package allocator_test

import (
	"sync"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Racing Frees of one SVM allocation through a raw SVM allocator: doc.go
// says "a second Free returns ErrFreed, as for buffers" and SVM.Free says
// "Freeing it twice returns ErrFreed". Buffers got a race-free
// releaseOnce for this; SVM.Free (allocator/svm.go) still tests
// s.Freed() and then calls s.Free(), so a Free that loses the race gets
// cl's "clSVMFree: CL_INVALID_VALUE: SVM already freed", which does not
// match ErrFreed. A pool or array that treats ErrFreed as "already done"
// sees an unexpected error instead.
func TestHostileS30SVMConcurrentDoubleFreeNotErrFreed(t *testing.T) {
	q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
	a, err := allocator.NewSVM(q.Context(), false)
	require.NoError(t, err)
	const racers = 8
	rounds := 100000
	if testing.Short() {
		rounds = 2000 // a GPU's clSVMAlloc and clSVMFree take far longer than POCL's
	}
	var wrong error
	for round := 0; round < rounds && wrong == nil; round++ {
		s, err := a.Allocate(8)
		require.NoError(t, err)
		errs := make([]error, racers)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range racers {
			wg.Go(func() {
				<-start
				errs[g] = a.Free(s)
			})
		}
		close(start)
		wg.Wait()
		nOK := 0
		for _, e := range errs {
			switch {
			case e == nil:
				nOK++
			case !assert.ErrorIs(t, e, allocator.ErrFreed, "round %d: a losing concurrent SVM.Free", round):
				wrong = e
			}
		}
		require.Equal(t, 1, nOK, "round %d: exactly one racing Free frees", round)
	}
	assert.NoError(t, wrong, "a concurrent second SVM.Free must return ErrFreed, as a sequential one does")
}

// Pinned.Free releases the buffer even when its unmap fails ("Released
// even if the unmap failed"), yet returns an error; Budget.Free and
// Counting.Free take any error of the wrapped Free as "not freed" and keep
// the buffer as theirs "for a retry". But the retry can never succeed:
// Pinned has forgotten the buffer and answers ErrFreed. So the Budget keeps
// the bytes of a buffer that no longer exists charged for good (every
// later allocation has that much less), and Counting reports a live
// buffer that is released. The trigger here is a queue released before
// the Free (the doc asks to free first), but the wrappers' accounting
// should not be left permanently wrong by it: either Pinned should keep
// the buffer for a retry, or the wrappers should give the bytes back once
// the buffer is released.
func TestHostileS30PinnedFailedUnmapLeavesBudgetCharged(t *testing.T) {
	q := cltest.Queue(t)
	q2, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
	require.NoError(t, err)
	p, err := allocator.NewPinned(q2)
	require.NoError(t, err)
	b := allocator.NewBudget(p, 100)
	c := allocator.NewCounting(b)
	buf, err := c.Allocate(100)
	require.NoError(t, err)
	require.NoError(t, q2.Release())

	_ = c.Free(buf)         // fails: the unmap's queue is gone; the buffer is released anyway
	_ = c.Free(buf)         // a retry, which the wrappers kept the buffer for
	_ = allocator.Free(buf) // and through the package Free
	require.True(t, buf.Released(), "Pinned.Free released the buffer")
	assert.Equal(t, 0, p.Live())

	assert.Equal(t, int64(0), b.Live(), "Budget keeps the bytes of a released buffer charged for good")
	assert.Equal(t, 0, c.Stats().Live, "Counting counts a released buffer live for good")
	// The budget has room for 100 bytes again (the allocation itself
	// fails further in: Pinned's queue is gone).
	_, err = b.Allocate(100)
	assert.NotErrorIs(t, err, allocator.ErrOutOfMemory, "a 100-byte Budget with nothing allocated refuses 100 bytes")
}
