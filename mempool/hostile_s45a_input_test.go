package mempool_test

import (
	"fmt"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s45aNoPanic runs fn and returns the value it panicked with, if any.
func s45aNoPanic(fn func()) (pv any) {
	defer func() { pv = recover() }()
	fn()
	return nil
}

// TestHostileS45aNilOption passes a nil Option, as a caller building its
// options conditionally (var o mempool.Option; if x { o = ... }) does.
// The package doc's Misuse says bad input is an error that changes
// nothing, and NewSet's doc that "a bad one fails the first request":
// neither New nor Set.On may panic with a nil dereference.
func TestHostileS45aNilOption(t *testing.T) {
	q := cltest.Queue(t)
	var none mempool.Option
	t.Run("New", func(t *testing.T) {
		imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
		require.NoError(t, err)
		var p *mempool.Pool
		pv := s45aNoPanic(func() { p, err = mempool.New(imm, mempool.WithArena(), none) })
		require.Nil(t, pv, "New with a nil Option panicked: %v", pv)
		assert.Error(t, err, "New with a nil Option")
		if p != nil {
			assert.NoError(t, p.Close())
		}
	})
	t.Run("NewSet", func(t *testing.T) {
		set := mempool.NewSet(nil, none)
		defer set.Close()
		var err error
		pv := s45aNoPanic(func() { _, err = set.On(q).Allocate(64) })
		require.Nil(t, pv, "Set.On with a nil Option panicked: %v", pv)
		assert.Error(t, err, "NewSet's doc: a bad option fails the first request")
	})
	t.Run("On", func(t *testing.T) {
		imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
		require.NoError(t, err)
		p, err := mempool.New(imm)
		require.NoError(t, err)
		defer p.Close()
		var none mempool.QueueOption
		before := len(p.Stats().Queues) // the allocator's own queue
		var a *mempool.QueueAllocator
		other, err := cl.NewCommandQueue(q.Context(), q.Device(), 0) // a queue the pool has not seen
		require.NoError(t, err)
		defer other.Release()
		pv := s45aNoPanic(func() { a = p.On(other, none) })
		require.Nil(t, pv, fmt.Sprintf("On with a nil QueueOption panicked: %v", pv))
		_, err = a.Allocate(64)
		assert.Error(t, err, "the allocator of an On with a nil QueueOption")
		assert.Len(t, p.Stats().Queues, before, "an On with a nil QueueOption registers no queue")
	})
}
