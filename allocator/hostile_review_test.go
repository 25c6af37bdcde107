package allocator_test

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Sizes 0, -1, MaxInt64 and one past the device's largest buffer, for every
// raw buffer allocator: 0 is (nil, nil); the rest match
// cl.ErrInvalidBufferSize and never ErrOutOfMemory.
func TestHostileReviewSizes(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	im, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	p, err := allocator.NewPinned(q)
	require.NoError(t, err)
	for name, a := range map[string]allocator.Allocator{"deferred": d, "immediate": im, "pinned": p} {
		t.Run(name, func(t *testing.T) {
			buf, err := a.Allocate(0)
			assert.NoError(t, err)
			assert.Nil(t, buf)
			for _, size := range []int64{-1, math.MinInt64, math.MaxInt64, q.Device().MaxMemAllocSize + 1} {
				buf, err := a.Allocate(size)
				assert.Nil(t, buf, "size %d", size)
				assert.ErrorIs(t, err, cl.ErrInvalidBufferSize, "size %d", size)
				assert.NotErrorIs(t, err, allocator.ErrOutOfMemory, "size %d", size)
			}
		})
	}
	assert.Equal(t, 0, p.Live())
}

// Invalid flags are refused at construction, with an error matching
// cl.ErrInvalidValue.
func TestHostileReviewFlags(t *testing.T) {
	q := cltest.Queue(t)
	for _, f := range []cl.MemFlags{
		cl.MemUseHostPtr, cl.MemCopyHostPtr, cl.MemReadOnly | cl.MemWriteOnly,
		cl.MemFlags(1) << 50, cl.MemHostReadOnly | cl.MemHostWriteOnly,
	} {
		d, err := allocator.NewDeferred(q.Context(), f)
		assert.Nil(t, d, "flags %v", f)
		assert.ErrorIs(t, err, cl.ErrInvalidValue, "flags %v", f)
		im, err := allocator.NewImmediate(q, f)
		assert.Nil(t, im, "flags %v", f)
		assert.ErrorIs(t, err, cl.ErrInvalidValue, "flags %v", f)
	}
	_, err := allocator.NewDeferred(nil, cl.MemReadWrite)
	assert.ErrorIs(t, err, cl.ErrInvalidContext)
	_, err = allocator.NewImmediate(nil, cl.MemReadWrite)
	assert.ErrorIs(t, err, cl.ErrInvalidCommandQueue)
	_, err = allocator.NewPinned(nil)
	assert.ErrorIs(t, err, cl.ErrInvalidCommandQueue)
	_, err = allocator.NewSVM(nil, false)
	assert.ErrorIs(t, err, cl.ErrInvalidContext)
	_, err = allocator.NewImmediateSVM(nil, false)
	assert.ErrorIs(t, err, cl.ErrInvalidCommandQueue)
}

// A Budget at its exact boundary: the last byte fits, one more does not;
// the refusal matches both sentinels and is a *cl.CallError; a failure of
// the wrapped allocator gives the bytes back.
func TestHostileReviewBudgetBoundary(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	b := allocator.NewBudget(d, 64)
	buf, err := b.Allocate(64)
	require.NoError(t, err)
	assert.Equal(t, int64(64), b.Live())
	_, err = b.Allocate(1)
	assert.ErrorIs(t, err, cl.ErrMemObjectAllocationFailure)
	assert.ErrorIs(t, err, allocator.ErrOutOfMemory)
	var ce *cl.CallError
	assert.True(t, errors.As(err, &ce))
	_, err = b.Allocate(math.MaxInt64)
	assert.ErrorIs(t, err, allocator.ErrOutOfMemory)
	require.NoError(t, b.Free(buf))
	assert.Equal(t, int64(0), b.Live())
	assert.ErrorIs(t, b.Free(buf), allocator.ErrFreed)
	assert.Equal(t, int64(0), b.Live())

	// The wrapped allocator's refusal (a size over the device's largest
	// buffer) gives the reservation back.
	huge := allocator.NewBudget(d, math.MaxInt64)
	_, err = huge.Allocate(math.MaxInt64)
	assert.ErrorIs(t, err, cl.ErrInvalidBufferSize)
	assert.NotErrorIs(t, err, allocator.ErrOutOfMemory)
	assert.Equal(t, int64(0), huge.Live())
	_, err = huge.Allocate(-1)
	assert.ErrorIs(t, err, cl.ErrInvalidBufferSize)
	assert.Equal(t, int64(0), huge.Live())

	// Negative budget: everything positive refused, no panic.
	neg := allocator.NewBudget(d, -5)
	_, err = neg.Allocate(1)
	assert.ErrorIs(t, err, allocator.ErrOutOfMemory)
	assert.Equal(t, int64(0), neg.Live())
}

// Concurrent allocations whose sum exceeds the budget: the live bytes never
// pass it, and at the end everything is back.
func TestHostileReviewBudgetConcurrent(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	c := allocator.NewCounting(d)
	b := allocator.NewBudget(c, 1000)
	var wg sync.WaitGroup
	var over atomic.Int64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				buf, err := b.Allocate(300)
				if err != nil {
					if !errors.Is(err, allocator.ErrOutOfMemory) {
						over.Add(1000000)
					}
					continue
				}
				if l := b.Live(); l > 1000 {
					over.Store(l)
				}
				if err := allocator.Free(buf); err != nil {
					over.Add(1000000)
				}
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, over.Load())
	assert.Equal(t, int64(0), b.Live())
	s := c.Stats()
	assert.Equal(t, 0, s.Live)
	assert.Equal(t, s.Allocs, s.Frees)
	assert.Zero(t, s.BadFrees)
}

// A Budget's Free of a buffer it did not hand out (one of the allocator it
// wraps, or of another Budget over it) must not give "its" bytes back: Live
// is "the bytes allocated and not yet freed", and a negative or short count
// lets later allocations past the budget.
func TestHostileReviewBudgetFreeForeign(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	b := allocator.NewBudget(d, 100)
	foreign, err := d.Allocate(100)
	require.NoError(t, err)
	defer foreign.Release()
	err = b.Free(foreign)
	assert.Error(t, err, "Budget.Free of a buffer it never handed out succeeded")
	assert.Equal(t, int64(0), b.Live(), "Budget.Live went negative")

	// With Live now -100, the budget of 100 lets 200 bytes live at once.
	b2 := allocator.NewBudget(d, 100)
	other := allocator.NewBudget(d, 100)
	x, err := other.Allocate(100)
	require.NoError(t, err)
	_ = b2.Free(x) // the wrong Budget: x's bytes leave b2, other keeps them for good
	y, err := b2.Allocate(100)
	if err == nil {
		defer b2.Free(y)
		z, err := b2.Allocate(100)
		if err == nil {
			defer b2.Free(z)
		}
		assert.Error(t, err, "Budget of 100 bytes has 200 live")
	}
	assert.Equal(t, int64(100), other.Live())
}

// Two goroutines free the same buffer at once: exactly one must succeed
// (the other gets ErrFreed), and a Budget must get its bytes back once.
// Before, both could: cl.Buffer.Release returns nil for a buffer already
// released, and Deferred.Free tested Released() before releasing.
func TestHostileReviewConcurrentDoubleFree(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	b := allocator.NewBudget(d, 1<<20)
	for _, a := range []allocator.Allocator{d, b} {
		bothOK := 0
		for range hrDoubleFreeRounds {
			buf, err := a.Allocate(8)
			require.NoError(t, err)
			var ok atomic.Int32
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 2 {
				wg.Go(func() {
					<-start
					if a.Free(buf) == nil {
						ok.Add(1)
					}
				})
			}
			close(start)
			wg.Wait()
			if ok.Load() != 1 {
				bothOK++
			}
		}
		assert.Zero(t, bothOK, "%T: both concurrent Frees of one buffer succeeded", a)
	}
	assert.Equal(t, int64(0), b.Live(), "Budget.Live after allocations each freed twice at once")
}

// failingFree is an Allocator whose Free always fails and frees nothing.
type failingFree struct{ d *allocator.Deferred }

func (f failingFree) Allocate(size int64) (*cl.Buffer, error) { return f.d.Allocate(size) }
func (f failingFree) Free(*cl.Buffer) error                   { return errors.New("free failed") }

// Counting counts a free only when it succeeded (Frees: "successful
// frees"); a failed free leaves the buffer live, so that the leak shows
// and the free can be retried.
func TestHostileReviewCountingFailedFree(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	c := allocator.NewCounting(failingFree{d})
	buf, err := c.Allocate(16)
	require.NoError(t, err)
	defer buf.Release()
	require.Error(t, c.Free(buf))
	s := c.Stats()
	assert.Equal(t, int64(0), s.Frees, "a failed free is counted as successful")
	assert.Equal(t, 1, s.Live, "a buffer whose free failed is no longer counted live: the leak is hidden")
	assert.Equal(t, int64(16), s.LiveBytes)
	// Retrying the free is refused as a double free.
	err = c.Free(buf)
	assert.NotErrorIs(t, err, allocator.ErrFreed, "retrying a failed free is called a double free")
}

// Counting's counts after failures: refusals count as Failures, not
// Allocs, and change neither Live nor LiveBytes; frees of nil do nothing.
func TestHostileReviewCountingFailures(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	c := allocator.NewCounting(allocator.NewBudget(d, 10))
	for _, size := range []int64{-1, 11, math.MaxInt64} {
		_, err := c.Allocate(size)
		assert.Error(t, err)
	}
	buf, err := c.Allocate(0)
	assert.NoError(t, err)
	assert.Nil(t, buf)
	assert.NoError(t, c.Free(nil))
	buf, err = c.Allocate(10)
	require.NoError(t, err)
	require.NoError(t, allocator.Free(buf))
	assert.ErrorIs(t, allocator.Free(buf), allocator.ErrFreed)
	assert.ErrorIs(t, c.Free(buf), allocator.ErrFreed)
	assert.Equal(t, allocator.CountingStats{Allocs: 1, Frees: 1, Failures: 3, BadFrees: 1}, c.Stats())
}

// A nil wrapped allocator: "bad input gets a clear error" -- NewBudget and
// NewCounting accept it and their Allocate then panics.
func TestHostileReviewNilWrapped(t *testing.T) {
	assert.NotPanics(t, func() {
		_, err := allocator.NewBudget(nil, 10).Allocate(1)
		assert.Error(t, err)
	}, "NewBudget(nil, 10).Allocate(1)")
	assert.NotPanics(t, func() {
		_, err := allocator.NewCounting(nil).Allocate(1)
		assert.Error(t, err)
	}, "NewCounting(nil).Allocate(1)")
	assert.NotPanics(t, func() {
		_, err := allocator.NewSVMBudget(nil, 10).Allocate(1)
		assert.Error(t, err)
	}, "NewSVMBudget(nil, 10).Allocate(1)")
}

// Pinned misuse: free twice, Host after free, free of a buffer of another
// allocator (left alone), the package Free, concurrent allocate/free.
func TestHostileReviewPinnedMisuse(t *testing.T) {
	q := cltest.Queue(t)
	p, err := allocator.NewPinned(q)
	require.NoError(t, err)
	buf, err := p.Allocate(32)
	require.NoError(t, err)
	assert.Len(t, p.Host(buf), 32)
	require.NoError(t, p.Free(buf))
	assert.Nil(t, p.Host(buf))
	assert.ErrorIs(t, p.Free(buf), allocator.ErrFreed)
	assert.ErrorIs(t, allocator.Free(buf), allocator.ErrFreed)
	assert.Nil(t, p.Host(nil))

	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	other, err := d.Allocate(32)
	require.NoError(t, err)
	assert.ErrorIs(t, p.Free(other), allocator.ErrFreed)
	assert.False(t, other.Released(), "Pinned.Free of another's buffer must leave it alone")
	require.NoError(t, d.Free(other))

	// Through the package Free, and through a Budget and a Counting.
	c := allocator.NewCounting(allocator.NewBudget(p, 64))
	buf, err = c.Allocate(64)
	require.NoError(t, err)
	require.NoError(t, allocator.Free(buf))
	assert.ErrorIs(t, allocator.Free(buf), allocator.ErrFreed)
	assert.Equal(t, 0, p.Live())

	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				b, err := c.Allocate(16)
				if err != nil {
					continue
				}
				h := p.Host(b)
				if len(h) == 16 {
					h[0] = 1
				}
				_ = allocator.Free(b)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 0, p.Live())
	s := c.Stats()
	assert.Equal(t, 0, s.Live)
	assert.Zero(t, s.BadFrees)
}

// SVM on a device without it is refused at construction with
// cl.ErrSVMNotSupported; where there is SVM, the same misuse as buffers.
func TestHostileReviewSVM(t *testing.T) {
	q := cltest.Queue(t)
	have := q.Context().SVMCapabilities()
	for _, fine := range []bool{false, true} {
		need := cl.SVMCoarseGrainBuffer
		if fine {
			need |= cl.SVMFineGrainBuffer
		}
		a, err := allocator.NewSVM(q.Context(), fine)
		ia, ierr := allocator.NewImmediateSVM(q, fine)
		if have&need != need {
			assert.Nil(t, a)
			assert.ErrorIs(t, err, cl.ErrSVMNotSupported)
			assert.Nil(t, ia)
			assert.ErrorIs(t, ierr, cl.ErrSVMNotSupported)
			continue
		}
		require.NoError(t, err)
		require.NoError(t, ierr)
		for _, x := range []allocator.SVMAllocator{a, ia} {
			s, err := x.Allocate(0)
			assert.NoError(t, err)
			assert.Nil(t, s)
			assert.NoError(t, x.Free(nil))
			for _, size := range []int64{-1, math.MaxInt64, q.Device().MaxMemAllocSize + 1} {
				s, err := x.Allocate(size)
				assert.Nil(t, s)
				assert.ErrorIs(t, err, cl.ErrInvalidBufferSize, "size %d", size)
			}
			s, err = x.Allocate(64)
			require.NoError(t, err)
			require.NoError(t, x.Free(s))
			assert.ErrorIs(t, x.Free(s), allocator.ErrFreed)
		}
	}
}

// SVMBudget: a foreign allocation freed through it must not push Live
// below zero; a concurrent double free returns ErrFreed once, the bytes
// come back once.
func TestHostileReviewSVMBudget(t *testing.T) {
	q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
	a, err := allocator.NewSVM(q.Context(), false)
	require.NoError(t, err)
	b := allocator.NewSVMBudget(a, 128)
	s, err := b.Allocate(128)
	require.NoError(t, err)
	_, err = b.Allocate(1)
	assert.ErrorIs(t, err, allocator.ErrOutOfMemory)
	assert.ErrorIs(t, err, cl.ErrMemObjectAllocationFailure)
	require.NoError(t, b.Free(s))
	assert.ErrorIs(t, b.Free(s), allocator.ErrFreed)
	assert.Equal(t, int64(0), b.Live())

	foreign, err := a.Allocate(64)
	require.NoError(t, err)
	err = b.Free(foreign)
	assert.Error(t, err, "SVMBudget.Free of an allocation it never handed out succeeded")
	assert.Equal(t, int64(0), b.Live(), "SVMBudget.Live went negative")

	var notFreed int
	for i := 0; i < 100; i++ {
		s, err := b.Allocate(8)
		if err != nil {
			continue
		}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for g := range errs {
			wg.Add(1)
			go func() { defer wg.Done(); errs[g] = b.Free(s) }()
		}
		wg.Wait()
		nOK := 0
		for _, e := range errs {
			if e == nil {
				nOK++
			} else if !errors.Is(e, allocator.ErrFreed) && !errors.Is(e, allocator.ErrBeingFreed) {
				notFreed++
				t.Logf("second concurrent SVMBudget.Free: %v (doc: ErrFreed, or ErrBeingFreed while the first is under way)", e)
			}
		}
		assert.Equal(t, 1, nOK)
	}
	assert.Zero(t, notFreed, "a concurrent second Free returns neither ErrFreed nor ErrBeingFreed")
}

// hrDoubleFreeRounds is how many buffers the concurrent double-free tests
// free twice at once.
const hrDoubleFreeRounds = 5000
