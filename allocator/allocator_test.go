package allocator_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// both returns a Deferred and an Immediate allocator on q, by name.
// bookkeepers returns a Deferred of q's context and the wrappers that
// keep books of the buffers they hand out (Counting, and a Budget with
// room for them all), by name: tests of their Free wrap an allocator of
// their own over the Deferred.
func bookkeepers(t *testing.T) (allocator.Allocator, map[string]func(allocator.Allocator) allocator.Allocator) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	return d, map[string]func(allocator.Allocator) allocator.Allocator{
		"Counting": func(a allocator.Allocator) allocator.Allocator { return allocator.NewCounting(a) },
		"Budget":   func(a allocator.Allocator) allocator.Allocator { return allocator.NewBudget(a, 1<<30) },
	}
}

func both(t *testing.T, q *cl.CommandQueue) map[string]allocator.Allocator {
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	i, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	return map[string]allocator.Allocator{"deferred": d, "immediate": i}
}

// Ported from PyOpenCL's test_allocator: 15 bytes from each allocator, and
// 0 as documented (no buffer, no error).
func TestAllocator(t *testing.T) {
	q := cltest.Queue(t)
	for name, a := range both(t, q) {
		t.Run(name, func(t *testing.T) {
			buf, err := a.Allocate(15)
			require.NoError(t, err)
			require.NotNil(t, buf)
			assert.Equal(t, int64(15), buf.Size())
			require.NoError(t, q.WriteBuffer(buf, 0, []byte("fifteen bytes!!")))
			got := make([]byte, 15)
			require.NoError(t, q.ReadBuffer(buf, 0, got))
			assert.Equal(t, "fifteen bytes!!", string(got))
			require.NoError(t, a.Free(buf))
			assert.True(t, buf.Released())

			buf, err = a.Allocate(0)
			assert.NoError(t, err)
			assert.Nil(t, buf)
			assert.NoError(t, a.Free(nil))
		})
	}
}

func TestAllocatorMisuse(t *testing.T) {
	q := cltest.Queue(t)
	for name, a := range both(t, q) {
		t.Run(name, func(t *testing.T) {
			_, err := a.Allocate(-1)
			assert.ErrorIs(t, err, cl.ErrInvalidBufferSize)
			_, err = a.Allocate(q.Device().MaxMemAllocSize + 1)
			assert.ErrorIs(t, err, cl.ErrInvalidBufferSize)

			buf, err := a.Allocate(8)
			require.NoError(t, err)
			require.NoError(t, a.Free(buf))
			assert.ErrorIs(t, a.Free(buf), allocator.ErrFreed, "double free")
		})
	}
	for _, flags := range []cl.MemFlags{cl.MemUseHostPtr, cl.MemCopyHostPtr, cl.MemReadWrite | cl.MemCopyHostPtr, cl.MemReadOnly | cl.MemWriteOnly, 1 << 30} {
		_, err := allocator.NewDeferred(q.Context(), flags)
		assert.ErrorIs(t, err, cl.ErrInvalidValue, "flags %v", flags)
		_, err = allocator.NewImmediate(q, flags)
		assert.ErrorIs(t, err, cl.ErrInvalidValue, "flags %v", flags)
	}
	_, err := allocator.NewDeferred(nil, cl.MemReadWrite)
	assert.ErrorIs(t, err, cl.ErrInvalidContext)
	_, err = allocator.NewImmediate(nil, cl.MemReadWrite)
	assert.ErrorIs(t, err, cl.ErrInvalidCommandQueue)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadOnly|cl.MemAllocHostPtr)
	require.NoError(t, err, "ALLOC_HOST_PTR is fine: the runtime owns that memory")
	assert.Equal(t, cl.MemReadOnly|cl.MemAllocHostPtr, d.Flags())
	assert.Same(t, q.Context(), d.Context())
}

func TestImmediateReturnsTheProbesError(t *testing.T) {
	q := cltest.Queue(t)
	// A queue released after the allocator was made: the buffer is created,
	// the probe fails, and the allocation fails with the probe's error.
	q2, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
	require.NoError(t, err)
	a, err := allocator.NewImmediate(q2, cl.MemReadWrite)
	require.NoError(t, err)
	assert.Same(t, q2, a.Queue())
	require.NoError(t, q2.Release())
	buf, err := a.Allocate(64)
	assert.Nil(t, buf)
	require.ErrorIs(t, err, cl.ErrInvalidCommandQueue)
	assert.Contains(t, err.Error(), "probing a new 64-byte buffer")
}

// The probe changes no data a user can see: data written to new buffers
// through a second queue reads back as written once the probe's queue is
// done. (A probe that wrote zeros lost it: 200 of 200 buffers on Oclgrind,
// about 1 in 3 on POCL.)
func TestImmediateProbeKeepsDataWrittenThroughAnotherQueue(t *testing.T) {
	q := cltest.Queue(t)
	q2, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
	require.NoError(t, err)
	defer q2.Release()
	a, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	n := cltest.Size(q, 50, 200)
	bufs := make([]*cl.Buffer, n)
	for i := range bufs {
		bufs[i], err = a.Allocate(64)
		require.NoError(t, err)
		require.NoError(t, q2.WriteBuffer(bufs[i], 0, []byte{byte(i), 1, 2, 3}))
	}
	require.NoError(t, q.Finish())
	lost := 0
	for i, b := range bufs {
		got := make([]byte, 4)
		require.NoError(t, q2.ReadBuffer(b, 0, got))
		if got[0] != byte(i) || got[3] != 3 {
			lost++
		}
		require.NoError(t, a.Free(b))
	}
	assert.Zero(t, lost, "buffers whose data the probe changed, of %d", n)
}

func TestBudgetRefusesLikeADeviceOutOfMemory(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	b := allocator.NewBudget(d, 1000)
	assert.Equal(t, int64(1000), b.Limit())
	x, err := b.Allocate(600)
	require.NoError(t, err)
	_, err = b.Allocate(401)
	require.ErrorIs(t, err, cl.ErrMemObjectAllocationFailure)
	assert.Contains(t, err.Error(), "401 bytes would exceed the budget of 1000 (600 in use)")
	assert.Equal(t, int64(600), b.Live(), "a refusal changes nothing")
	y, err := b.Allocate(400)
	require.NoError(t, err)
	require.NoError(t, b.Free(x))
	require.NoError(t, b.Free(y))
	assert.Zero(t, b.Live())
	assert.ErrorIs(t, b.Free(y), allocator.ErrFreed)
	assert.Zero(t, b.Live(), "a failed free gives nothing back")

	// An error of the wrapped allocator gives the reservation back.
	_, err = b.Allocate(-5)
	assert.ErrorIs(t, err, cl.ErrInvalidBufferSize)
	big := allocator.NewBudget(d, 1<<62)
	z, err := big.Allocate(q.Device().MaxMemAllocSize + 1)
	assert.Nil(t, z)
	assert.ErrorIs(t, err, cl.ErrInvalidBufferSize)
	assert.False(t, errors.Is(err, cl.ErrMemObjectAllocationFailure))
	assert.Zero(t, big.Live())
}

// Issue 21, item 1: a Budget's refusal matches the shared out-of-memory
// sentinel, allocator.ErrOutOfMemory, and still matches the cl status and unwraps to the
// *cl.CallError it did, with the same message.
func TestBudgetRefusalMatchesErrOutOfMemory(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	b := allocator.NewBudget(d, 1000)
	_, err = b.Allocate(1001)
	require.Error(t, err)
	assert.ErrorIs(t, err, allocator.ErrOutOfMemory)
	assert.ErrorIs(t, err, cl.ErrMemObjectAllocationFailure)
	var ce *cl.CallError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, "clCreateBuffer", ce.Call)
	assert.Equal(t, cl.ErrMemObjectAllocationFailure, ce.Status)
	assert.EqualError(t, err, "clCreateBuffer: CL_MEM_OBJECT_ALLOCATION_FAILURE (-4): allocator.Budget: 1001 bytes would exceed the budget of 1000 (0 in use)")
	_, err = b.Allocate(math.MaxInt64)
	assert.ErrorIs(t, err, allocator.ErrOutOfMemory, "no overflow")
	assert.Zero(t, b.Live())

	// Errors that are not about memory do not match.
	_, err = b.Allocate(-5)
	assert.ErrorIs(t, err, cl.ErrInvalidBufferSize)
	assert.False(t, errors.Is(err, allocator.ErrOutOfMemory), "a negative size is no out-of-memory")
}

func TestCountingFindsDoubleAndForeignFrees(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	c := allocator.NewCounting(d)
	x, err := c.Allocate(100)
	require.NoError(t, err)
	_, err = c.Allocate(-1)
	require.Error(t, err)
	nothing, err := c.Allocate(0)
	require.NoError(t, err)
	require.Nil(t, nothing)
	assert.Equal(t, allocator.CountingStats{Allocs: 1, Failures: 1, Live: 1, LiveBytes: 100}, c.Stats())

	require.NoError(t, c.Free(x))
	assert.ErrorIs(t, c.Free(x), allocator.ErrFreed)
	foreign, err := d.Allocate(10)
	require.NoError(t, err)
	assert.ErrorIs(t, c.Free(foreign), allocator.ErrFreed)
	assert.False(t, foreign.Released(), "a refused free does not release")
	require.NoError(t, d.Free(foreign))
	assert.Equal(t, allocator.CountingStats{Allocs: 1, Frees: 1, Failures: 1, BadFrees: 2}, c.Stats())
}

// sneaky wraps a real allocator and, while it serves one chosen request,
// makes a second request through the Budget above it: a concurrent
// allocation, deterministically placed inside the first one's window.
type sneaky struct {
	allocator.Allocator
	at     int64 // the request size that triggers the nested one
	budget *allocator.Budget
	nested int64
	got    *cl.Buffer
	err    error
}

func (s *sneaky) Allocate(size int64) (*cl.Buffer, error) {
	if size == s.at {
		s.got, s.err = s.budget.Allocate(s.nested)
	}
	return s.Allocator.Allocate(size)
}

// Issue 12, item 4: requests near math.MaxInt64 used to wrap Budget's live
// count negative, so the budget let them through to the device, and let
// any request made meanwhile through as well.
func TestBudgetRequestsNearMaxInt64AreRefused(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	for _, c := range []struct {
		name          string
		limit, before int64 // the budget, and the bytes live before the request
		size          int64
	}{
		{"limit 1000, 600 live", 1000, 600, math.MaxInt64 - 100},
		{"limit 1000, 600 live, the largest request", 1000, 600, math.MaxInt64},
		{"no limit to speak of, 600 live", math.MaxInt64, 600, math.MaxInt64},
		{"no limit to speak of, 600 live, 600 short of it", math.MaxInt64, 600, math.MaxInt64 - 599},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &sneaky{Allocator: d, at: c.size, nested: 500}
			b := allocator.NewBudget(s, c.limit)
			s.budget = b
			held, err := b.Allocate(c.before)
			require.NoError(t, err)
			defer b.Free(held)

			buf, err := b.Allocate(c.size)
			assert.Nil(t, s.got, "no request slipped through while the count had wrapped")
			if s.got != nil {
				require.NoError(t, b.Free(s.got))
			}
			assert.Nil(t, buf)
			require.ErrorIs(t, err, cl.ErrMemObjectAllocationFailure, "the budget refuses, the device never sees the request")
			assert.ErrorContains(t, err, fmt.Sprintf("%d bytes would exceed the budget of %d (%d in use)", c.size, c.limit, c.before))
			assert.Equal(t, c.before, b.Live())
		})
	}
}

// Issue 12, item 2: code that holds a buffer but not its allocator (an
// array's Close) frees it with allocator.Free, which runs the Free of the
// allocator that handed it out, so that a Budget gets its bytes back and
// a Counting counts the free.
func TestFreeGoesBackThroughTheAllocatorThatAllocated(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	budget := allocator.NewBudget(d, 1000)
	counting := allocator.NewCounting(budget)
	outer := allocator.NewBudget(allocator.NewCounting(d), 1000)

	for _, c := range []struct {
		name string
		a    allocator.Allocator
	}{
		{"Budget", budget},
		{"Counting over a Budget", counting},
		{"Budget over a Counting", outer},
		{"Deferred", d},
	} {
		t.Run(c.name, func(t *testing.T) {
			for range 3 { // three rounds of 800 bytes fit a budget of 1000 only if each goes back
				buf, err := c.a.Allocate(800)
				require.NoError(t, err)
				require.NoError(t, allocator.Free(buf))
				assert.True(t, buf.Released())
			}
			buf, err := c.a.Allocate(8)
			require.NoError(t, err)
			require.NoError(t, allocator.Free(buf))
			assert.ErrorIs(t, allocator.Free(buf), allocator.ErrFreed, "a second free")
		})
	}
	assert.Zero(t, budget.Live())
	assert.Zero(t, outer.Live())
	assert.Equal(t, allocator.CountingStats{Allocs: 4, Frees: 4}, counting.Stats())
	assert.NoError(t, allocator.Free(nil))

	// A buffer from no allocator of this package is released.
	raw, err := q.Context().CreateBuffer(cl.MemReadWrite, 16)
	require.NoError(t, err)
	require.NoError(t, allocator.Free(raw))
	assert.True(t, raw.Released())
}
