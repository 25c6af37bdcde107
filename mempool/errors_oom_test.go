package mempool_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 21, item 1: every out-of-memory refusal of the pool matches the
// shared sentinel allocator.ErrOutOfMemory as well as mempool's own, which
// is the same value.
func TestOutOfMemoryMatchesTheAllocatorSentinel(t *testing.T) {
	assert.ErrorIs(t, mempool.ErrOutOfMemory, allocator.ErrOutOfMemory)
	assert.ErrorIs(t, allocator.ErrOutOfMemory, mempool.ErrOutOfMemory)
	assert.ErrorIs(t, &mempool.OutOfMemoryError{}, allocator.ErrOutOfMemory, "a bare OutOfMemoryError too")
	assert.ErrorIs(t, fmt.Errorf("wrapped: %w", &mempool.OutOfMemoryError{}), mempool.ErrOutOfMemory)

	both := func(t *testing.T, err error) *mempool.OutOfMemoryError {
		t.Helper()
		require.ErrorIs(t, err, mempool.ErrOutOfMemory)
		require.ErrorIs(t, err, allocator.ErrOutOfMemory)
		var oom *mempool.OutOfMemoryError
		require.ErrorAs(t, err, &oom)
		return oom
	}

	t.Run("over the device's largest buffer", func(t *testing.T) {
		f := newFixture(t, nil)
		const tib4 = 4 << 40
		require.Less(t, f.q.Device().MaxMemAllocSize, int64(tib4))
		b, err := f.pool.Allocate(tib4)
		assert.Nil(t, b)
		oom := both(t, err)
		assert.Equal(t, f.q.Device().MaxMemAllocSize, oom.DeviceMaxAlloc)
		assert.ErrorIs(t, err, cl.ErrInvalidBufferSize, "as before")
	})

	t.Run("over the pool's limit", func(t *testing.T) {
		f := newFixture(t, nil, mempool.WithLimit(1<<20))
		held, err := f.pool.Allocate(1 << 19)
		require.NoError(t, err)
		defer held.Close()
		b, err := f.pool.Allocate(1<<19 + 1<<18)
		assert.Nil(t, b)
		oom := both(t, err)
		assert.Nil(t, oom.Err, "the limit refused, not the device")
		assert.Equal(t, int64(1<<20), oom.Limit)
	})

	t.Run("the device (a Budget) refusing after the ladder", func(t *testing.T) {
		f := newFixture(t, func(a allocator.Allocator) allocator.Allocator { return allocator.NewBudget(a, 1<<20) })
		held, err := f.pool.Allocate(1 << 19)
		require.NoError(t, err)
		defer held.Close()
		b, err := f.pool.Allocate(1<<19 + 1<<18)
		assert.Nil(t, b)
		oom := both(t, err)
		require.Error(t, oom.Err, "the allocator refused")
		assert.ErrorIs(t, err, cl.ErrMemObjectAllocationFailure, "the Budget's refusal, as before")
		assert.Positive(t, f.pool.Stats().OOMs, "the pool took the Budget's refusal for an out-of-memory")
	})

	t.Run("not for errors that are not about memory", func(t *testing.T) {
		f := newFixture(t, nil)
		_, err := f.pool.Allocate(-1)
		require.ErrorIs(t, err, cl.ErrInvalidBufferSize)
		assert.False(t, errors.Is(err, allocator.ErrOutOfMemory))
	})
}

// An out-of-memory error names the bytes other requests were allocating
// when it failed: under a limit of two blocks, one active and one being
// allocated (its allocator held at a gate past the ladder's wait), a third
// request fails with the second's segment in flight, which the managed
// bytes do not show.
func TestOutOfMemoryErrorNamesBytesInFlight(t *testing.T) {
	s := newInFlight(t, false, 0)
	_, err := s.f.pool.Allocate(s.size) // refused; its wait for R's segment ends in half a second
	var oom *mempool.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, s.block, oom.ManagedBytes, "A's segment")
	assert.Equal(t, s.block, oom.InFlight, "R's segment, being allocated")
	assert.Contains(t, err.Error(), fmt.Sprintf("%d bytes being allocated or freed", s.block))
	s.finish(t, nil)
}
