package array_test

import (
	"errors"
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

// hrCounting returns a Counting over an Immediate on q, checked at the end
// of the test (every allocation freed exactly once).
func hrCounting(t *testing.T, q *cl.CommandQueue) *allocator.Counting {
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	return pooltest.Counting(t, imm)
}

// Lengths -1, MaxInt, 1<<61 float64 (whose bytes wrap to 0 in int64) and
// one element past MaxMemAllocSize: refused before the allocator is asked,
// matching cl.ErrInvalidBufferSize (and ErrOutOfMemory for too large).
func TestHostileReviewLengths(t *testing.T) {
	q := cltest.Queue(t)
	c := hrCounting(t, q)
	maxElems := int(q.Device().MaxMemAllocSize / 8)
	for _, n := range []int{-1, math.MinInt, math.MaxInt, 1 << 61, 1 << 62, maxElems + 1} {
		a, err := array.Empty[float64](q, n, c.Allocate)
		assert.Nil(t, a, "n=%d", n)
		assert.ErrorIs(t, err, cl.ErrInvalidBufferSize, "n=%d", n)
		if n > 0 {
			assert.ErrorIs(t, err, allocator.ErrOutOfMemory, "n=%d", n)
			assert.ErrorIs(t, err, mempool.ErrOutOfMemory, "n=%d", n)
		} else {
			assert.NotErrorIs(t, err, allocator.ErrOutOfMemory, "n=%d", n)
		}
		_, err = array.Zeros[float64](q, n, c.Allocate)
		assert.ErrorIs(t, err, cl.ErrInvalidBufferSize, "n=%d", n)
		_, err = array.Arange[float64](q, n, 0, 1, c.Allocate)
		assert.ErrorIs(t, err, cl.ErrInvalidBufferSize, "n=%d", n)
		_, err = array.Full[float64](q, n, 1, c.Allocate)
		assert.ErrorIs(t, err, cl.ErrInvalidBufferSize, "n=%d", n)
	}
	assert.Equal(t, allocator.CountingStats{}, c.Stats(), "the allocator was asked")

	_, err := array.Empty[float32](nil, 4, c.Allocate)
	assert.ErrorIs(t, err, cl.ErrInvalidCommandQueue)
}

// Empty arrays: every call works or says ErrEmpty; Close twice says
// ErrClosed; no allocation.
func TestHostileReviewEmpty(t *testing.T) {
	q := cltest.Queue(t)
	c := hrCounting(t, q)
	x, err := array.Zeros[int32](q, 0, c.Allocate)
	require.NoError(t, err)
	y, err := array.FromHost(q, []int32{}, c.Allocate)
	require.NoError(t, err)
	got, err := x.Get()
	require.NoError(t, err)
	assert.Empty(t, got)
	s, err := array.Sum(x)
	assert.NoError(t, err)
	assert.Zero(t, s)
	_, err = array.Max(x)
	assert.ErrorIs(t, err, array.ErrEmpty)
	z, err := array.Add(x, y)
	require.NoError(t, err)
	require.NoError(t, x.IAdd(y))
	v, err := x.Slice(0, 0)
	require.NoError(t, err)
	_, err = x.Slice(0, 1)
	assert.ErrorIs(t, err, array.ErrOutOfRange)
	for _, a := range []*array.Array[int32]{x, y, z, v} {
		require.NoError(t, a.Close())
		assert.ErrorIs(t, a.Close(), array.ErrClosed)
	}
	assert.Zero(t, c.Stats().Allocs)
}

// Every call on a closed array, a nil array, and mismatched lengths: a
// sentinel error, and nothing allocated or freed.
func TestHostileReviewClosedAndNil(t *testing.T) {
	q := cltest.Queue(t)
	c := hrCounting(t, q)
	x, err := array.Arange[float32](q, 8, 0, 1, c.Allocate)
	require.NoError(t, err)
	defer x.Close()
	closed, err := array.Arange[float32](q, 8, 0, 1, c.Allocate)
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	short, err := array.Arange[float32](q, 7, 0, 1, c.Allocate)
	require.NoError(t, err)
	defer short.Close()
	before := c.Stats()

	var nilArr *array.Array[float32]
	for _, bad := range []struct {
		a        *array.Array[float32]
		sentinel error
	}{{closed, array.ErrClosed}, {nilArr, array.ErrNilArray}} {
		b, want := bad.a, bad.sentinel
		calls := map[string]func() error{
			"Get":       func() error { _, err := b.Get(); return err },
			"Copy":      func() error { _, err := b.Copy(); return err },
			"Slice":     func() error { _, err := b.Slice(0, 1); return err },
			"Close":     func() error { return b.Close() },
			"Fill":      func() error { return b.Fill(1) },
			"IScale":    func() error { return b.IScale(2) },
			"IAdd x":    func() error { return b.IAdd(x) },
			"IAdd y":    func() error { return x.IAdd(b) },
			"IAxpy":     func() error { return x.IAxpy(1, b) },
			"Add":       func() error { _, err := array.Add(x, b); return err },
			"Sub":       func() error { _, err := array.Sub(b, x); return err },
			"Axpy":      func() error { _, err := array.Axpy(1, x, b); return err },
			"Scale":     func() error { _, err := array.Scale(2, b); return err },
			"Tridiag":   func() error { _, err := array.Tridiag(1, 2, 1, b); return err },
			"Sum":       func() error { _, err := array.Sum(b); return err },
			"Dot":       func() error { _, err := array.Dot(x, b); return err },
			"Max":       func() error { _, err := array.Max(b); return err },
			"Min":       func() error { _, err := array.Min(b); return err },
			"GetInto":   func() error { return b.GetInto(make([]float32, 8)) },
			"SetFrom":   func() error { return b.SetFrom(make([]float32, 8)) },
			"GetPinned": func() error { return b.GetPinned(nil, make([]float32, 8)) },
		}
		for name, call := range calls {
			var err error
			assert.NotPanics(t, func() { err = call() }, "%s on %v", name, want)
			assert.ErrorIs(t, err, want, name)
		}
	}
	for name, call := range map[string]func() error{
		"Add":     func() error { _, err := array.Add(x, short); return err },
		"IAdd":    func() error { return x.IAdd(short) },
		"Dot":     func() error { _, err := array.Dot(short, x); return err },
		"GetInto": func() error { return x.GetInto(make([]float32, 9)) },
		"SetFrom": func() error { return x.SetFrom(make([]float32, 7)) },
	} {
		assert.ErrorIs(t, call(), array.ErrLengthMismatch, name)
	}
	got, err := x.Get()
	require.NoError(t, err)
	assert.Equal(t, []float32{0, 1, 2, 3, 4, 5, 6, 7}, got, "a refused SetFrom changed the array")
	assert.Equal(t, before, c.Stats())
}

// A view outlives its parent: the memory stays until the last close, in
// any order, and is freed exactly once; views of views; closing views
// from several goroutines at once.
func TestHostileReviewViewsOutliveParent(t *testing.T) {
	q := cltest.Queue(t)
	c := hrCounting(t, q)
	x, err := array.Arange[int32](q, 10, 0, 1, c.Allocate)
	require.NoError(t, err)
	v, err := x.Slice(2, 8)
	require.NoError(t, err)
	vv, err := v.Slice(1, 3)
	require.NoError(t, err)
	require.NoError(t, x.Close())
	assert.Equal(t, 1, c.Stats().Live)
	_, err = x.Slice(0, 1)
	assert.ErrorIs(t, err, array.ErrClosed)
	got, err := vv.Get()
	require.NoError(t, err)
	assert.Equal(t, []int32{3, 4}, got)
	assert.Equal(t, 3, vv.Offset())
	require.NoError(t, vv.IScale(10))
	got, err = v.Get()
	require.NoError(t, err)
	assert.Equal(t, []int32{2, 30, 40, 5, 6, 7}, got)
	require.NoError(t, v.Close())
	assert.Equal(t, 1, c.Stats().Live)
	require.NoError(t, vv.Close())
	assert.Equal(t, 0, c.Stats().Live)
	assert.ErrorIs(t, vv.Close(), array.ErrClosed)
	assert.Equal(t, int64(1), c.Stats().Frees)

	// Many views, closed concurrently, one per goroutine.
	for round := 0; round < 10; round++ {
		y, err := array.Zeros[float32](q, 64, c.Allocate)
		require.NoError(t, err)
		views := make([]*array.Array[float32], 8)
		for i := range views {
			views[i], err = y.Slice(i*8, i*8+8)
			require.NoError(t, err)
		}
		var wg sync.WaitGroup
		for i := range views {
			wg.Add(1)
			go func() {
				defer wg.Done()
				assert.NoError(t, views[i].Fill(float32(i)))
				assert.NoError(t, views[i].Close())
			}()
		}
		assert.NoError(t, y.Close())
		wg.Wait()
	}
	s := c.Stats()
	assert.Equal(t, 0, s.Live)
	assert.Zero(t, s.BadFrees)
}

// In-place updates over overlapping views are refused; the same offset
// is allowed.
func TestHostileReviewOverlap(t *testing.T) {
	q := cltest.Queue(t)
	c := hrCounting(t, q)
	x, err := array.Arange[float32](q, 10, 0, 1, c.Allocate)
	require.NoError(t, err)
	defer x.Close()
	a, _ := x.Slice(0, 5)
	defer a.Close()
	b, _ := x.Slice(1, 6)
	defer b.Close()
	same, _ := x.Slice(0, 5)
	defer same.Close()
	disjoint, _ := x.Slice(5, 10)
	defer disjoint.Close()
	assert.ErrorIs(t, a.IAdd(b), array.ErrOverlap)
	assert.ErrorIs(t, b.IAxpy(2, a), array.ErrOverlap)
	assert.NoError(t, a.IAdd(same))
	assert.NoError(t, a.IAdd(disjoint))
	got, err := x.Get()
	require.NoError(t, err)
	assert.Equal(t, []float32{5, 8, 11, 14, 17, 5, 6, 7, 8, 9}, got)
}

// A Budget that holds x but not the result or the reduction's
// temporaries: a clear out-of-memory error, nothing leaked, x intact.
func TestHostileReviewBudgetMidOperation(t *testing.T) {
	q := cltest.Queue(t)
	c := hrCounting(t, q)
	bud := allocator.NewBudget(c, 4*100)
	x, err := array.Full[float32](q, 100, 1, bud.Allocate)
	require.NoError(t, err)
	_, err = array.Add(x, x)
	assert.ErrorIs(t, err, allocator.ErrOutOfMemory)
	assert.ErrorIs(t, err, cl.ErrMemObjectAllocationFailure)
	_, err = array.Sum(x)
	assert.ErrorIs(t, err, allocator.ErrOutOfMemory)
	_, err = x.Copy()
	assert.ErrorIs(t, err, allocator.ErrOutOfMemory)
	assert.Equal(t, int64(400), bud.Live())

	// Room for exactly the partial buffer (2 groups) and not the result.
	bud2 := allocator.NewBudget(c, 4*100+4*2)
	y, err := array.Full[float32](q, 100, 1, bud2.Allocate)
	require.NoError(t, err)
	_, err = array.Sum(y)
	assert.ErrorIs(t, err, allocator.ErrOutOfMemory)
	assert.Equal(t, int64(400), bud2.Live(), "a failed reduction kept its partial buffer")
	require.NoError(t, y.Close())
	require.NoError(t, x.Close())
	assert.Equal(t, int64(0), bud.Live())
	assert.Equal(t, int64(0), bud2.Live())
}

// An allocator that hands back fewer bytes than asked: the array must
// not be made over memory too small for it (a kernel would write past the
// buffer's end). Bad input from the allocator gets a clear error.
func TestHostileReviewShortBlock(t *testing.T) {
	q := cltest.Queue(t)
	c := hrCounting(t, q)
	short := func(size int64) (*cl.Buffer, error) { return c.Allocate(4) }
	x, err := array.Empty[float32](q, 100, short)
	if err == nil {
		defer x.Close()
	}
	assert.Error(t, err, "Empty(100 float32) accepted a 4-byte block")
	if x != nil {
		_, gerr := x.Get()
		t.Logf("Get of the array over a 4-byte block: %v", gerr)
	}
}

// A panicking allocator callback: the charter promises a clear error, and
// nothing leaked. A panic from the second allocation of a reduction must
// not leak the first.
func TestHostileReviewPanickingAllocator(t *testing.T) {
	q := cltest.Queue(t)
	c := hrCounting(t, q)
	boom := func(size int64) (*cl.Buffer, error) { panic("allocator exploded") }
	assert.NotPanics(t, func() {
		_, err := array.Zeros[float32](q, 10, boom)
		assert.Error(t, err)
	}, "Zeros with a panicking allocator")

	calls := 0
	second := func(size int64) (*cl.Buffer, error) {
		calls++
		if calls == 3 { // x, then the reduction's partial, then its result
			panic("allocator exploded")
		}
		return c.Allocate(size)
	}
	x, err := array.Full[float32](q, 100, 1, second)
	require.NoError(t, err)
	func() {
		defer func() { recover() }()
		_, err := array.Sum(x)
		assert.Error(t, err)
	}()
	require.NoError(t, x.Close())
	assert.Equal(t, 0, c.Stats().Live, "a panicking allocator left buffers allocated")
}

// Operands on different queues or contexts are refused.
func TestHostileReviewQueues(t *testing.T) {
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	q3 := cltest.Queue(t)
	x, err := array.Zeros[float32](q, 4, array.Alloc(nil))
	require.NoError(t, err)
	defer x.Close()
	y, err := array.Zeros[float32](q2, 4, array.Alloc(nil))
	require.NoError(t, err)
	defer y.Close()
	z, err := array.Zeros[float32](q3, 4, array.Alloc(nil))
	require.NoError(t, err)
	defer z.Close()
	_, err = array.Add(x, y)
	assert.ErrorIs(t, err, array.ErrQueueMismatch)
	assert.ErrorIs(t, x.IAdd(z), array.ErrContextMismatch)
	_, err = array.Dot(z, x)
	assert.ErrorIs(t, err, array.ErrContextMismatch)

	// A raw allocator of another context.
	d, err := allocator.NewDeferred(q3.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	c := allocator.NewCounting(d)
	_, err = array.Zeros[float32](q, 4, c.Allocate)
	assert.ErrorIs(t, err, array.ErrContextMismatch)
	s := c.Stats()
	assert.Equal(t, 0, s.Live, "the refused block of another context was not freed")
}

// SetDefaultAllocator from several goroutines while others make arrays
// with the default: race-free, and every array freed through the
// allocator it was made with.
func TestHostileReviewDefaultConcurrent(t *testing.T) {
	q := cltest.Queue(t)
	c := hrCounting(t, q)
	prev := array.SetDefaultAllocator(c.Allocate)
	defer array.SetDefaultAllocator(prev)
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				if g == 0 {
					if i%2 == 0 {
						array.SetDefaultAllocator(array.Alloc(nil))
					} else {
						array.SetDefaultAllocator(c.Allocate)
					}
					continue
				}
				a, err := array.Zeros[float32](q, 16, array.Alloc(nil))
				if !assert.NoError(t, err) {
					continue
				}
				s, err := array.Sum(a)
				assert.NoError(t, err)
				assert.Zero(t, s)
				assert.NoError(t, a.Close())
			}
		}()
	}
	wg.Wait()
}

// Pinned staging misuse: nil staging, wrong lengths, a staging allocator
// whose memory is not the Pinned's, PinnedSlice closed twice, and a nil
// *PinnedSlice (what NewPinnedSlice returns with its error).
func TestHostileReviewStaging(t *testing.T) {
	q := cltest.Queue(t)
	p, err := allocator.NewPinned(q)
	require.NoError(t, err)
	_, err = array.NewStaging(nil, p.Allocate)
	assert.Error(t, err)
	_, err = array.NewStaging[*cl.Buffer](p, nil)
	assert.Error(t, err)
	st, err := array.NewStaging(p, p.Allocate)
	require.NoError(t, err)

	c := hrCounting(t, q)
	x, err := array.Arange[float32](q, 8, 0, 1, c.Allocate)
	require.NoError(t, err)
	defer x.Close()
	assert.ErrorIs(t, x.GetPinned(st, make([]float32, 7)), array.ErrLengthMismatch)
	assert.ErrorIs(t, x.SetPinned(st, make([]float32, 9)), array.ErrLengthMismatch)
	assert.Error(t, x.GetPinned(nil, make([]float32, 8)))
	dst := make([]float32, 8)
	require.NoError(t, x.GetPinned(st, dst))
	assert.Equal(t, []float32{0, 1, 2, 3, 4, 5, 6, 7}, dst)
	assert.Equal(t, 0, p.Live())

	// A staging allocator that is not the Pinned's memory.
	wrong, err := array.NewStaging(p, c.Allocate)
	require.NoError(t, err)
	assert.Error(t, x.GetPinned(wrong, dst))

	for _, n := range []int{0, -1, math.MaxInt, int(q.Device().MaxMemAllocSize/4) + 1} {
		ps, err := array.NewPinnedSlice[float32](st, n)
		assert.Nil(t, ps, "n=%d", n)
		assert.Error(t, err, "n=%d", n)
	}
	ps, err := array.NewPinnedSlice[float32](st, 8)
	require.NoError(t, err)
	require.NoError(t, x.GetInto(ps.Data()))
	assert.Equal(t, []float32{0, 1, 2, 3, 4, 5, 6, 7}, ps.Data())
	require.NoError(t, ps.Close())
	assert.ErrorIs(t, ps.Close(), array.ErrClosed)
	assert.Nil(t, ps.Data())
	assert.Equal(t, 0, p.Live())

	var nilPS *array.PinnedSlice[float32]
	assert.NotPanics(t, func() { assert.Error(t, nilPS.Close()) }, "Close of a nil *PinnedSlice")
	assert.NotPanics(t, func() { assert.Nil(t, nilPS.Data()) }, "Data of a nil *PinnedSlice")
}

// Arrays in SVM: SVMAlloc(nil) is an error at the first allocation; views
// outlive the parent; an SVMBudget gets every byte back.
func TestHostileReviewSVMArrays(t *testing.T) {
	q := cltest.Queue(t)
	_, err := array.Zeros[float32](q, 4, array.SVMAlloc(nil))
	assert.Error(t, err)
	var nilSVM *allocator.SVM
	_, err = array.Zeros[float32](q, 4, array.SVMAlloc(nilSVM))
	assert.Error(t, err)
	if q.Context().SVMCapabilities()&cl.SVMCoarseGrainBuffer == 0 {
		_, err := allocator.NewSVM(q.Context(), false)
		assert.ErrorIs(t, err, cl.ErrSVMNotSupported)
		return
	}
	s, err := allocator.NewSVM(q.Context(), false)
	require.NoError(t, err)
	b := allocator.NewSVMBudget(s, 4*16)
	x, err := array.Arange[float32](q, 16, 0, 1, array.SVMAlloc(b))
	require.NoError(t, err)
	_, err = array.Add(x, x)
	assert.ErrorIs(t, err, allocator.ErrOutOfMemory)
	v, err := x.Slice(4, 8)
	require.NoError(t, err)
	require.NoError(t, x.Close())
	got, err := v.Get()
	require.NoError(t, err)
	assert.Equal(t, []float32{4, 5, 6, 7}, got)
	assert.Equal(t, int64(64), b.Live())
	require.NoError(t, v.Close())
	assert.Equal(t, int64(0), b.Live())
	assert.ErrorIs(t, v.Close(), array.ErrClosed)
}

// Closing an array after its pool was closed: the block is freed then,
// nothing leaks; using the pool after Close is refused with a clear error.
func TestHostileReviewPoolClosed(t *testing.T) {
	q := cltest.Queue(t)
	pool := pooltest.New(t, q)
	x, err := array.Arange[float32](q, 32, 0, 1, pool.Allocate)
	require.NoError(t, err)
	v, err := x.Slice(1, 3)
	require.NoError(t, err)
	require.NoError(t, pool.Close())
	_, err = array.Add(x, x)
	assert.True(t, errors.Is(err, mempool.ErrPoolClosed), "got %v", err)
	got, err := v.Get()
	require.NoError(t, err)
	assert.Equal(t, []float32{1, 2}, got)
	require.NoError(t, x.Close())
	require.NoError(t, v.Close())
}
