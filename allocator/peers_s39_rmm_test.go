package allocator_test

// Session s39 ports of RMM's limiting_resource_adaptor tests
// (tests/mr/device/limiting_mr_tests.cpp) onto allocator.Budget, which is
// clpool's limiting adaptor: it refuses allocations past a byte budget, as
// a device out of memory would.

import (
	"errors"
	"sync"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s39Failing is an upstream that refuses every allocation with err.
type s39Failing struct {
	allocator.Allocator
	err error
}

func (f s39Failing) Allocate(int64) (*cl.Buffer, error) { return nil, f.err }

// RMM LimitingTest.UpstreamFailure: the upstream's failure passes through
// the adaptor, and the bytes it would have taken are not counted: the
// adaptor's allocated bytes stay where they were, and its whole limit is
// still there for the next request.
func TestPeersS39RmmLimitingUpstreamFailure(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	upstreamErr := errors.New("upstream: no")
	for _, up := range []error{upstreamErr, allocator.ErrOutOfMemory} {
		b := allocator.NewBudget(s39Failing{d, up}, 1<<20)
		_, err := b.Allocate(1000)
		require.Error(t, err)
		assert.ErrorIs(t, err, up, "the upstream's error passes through")
		assert.Zero(t, b.Live(), "nothing counted for a failed allocation")
		// The whole limit is still there.
		_, err = b.Allocate(1 << 20)
		assert.ErrorIs(t, err, up, "refused by the upstream, not by the limit")
		assert.Zero(t, b.Live())
	}
}

// RMM LimitingTest.UnderLimitDueToFrees / OverLimit / allocated bytes:
// allocations up to the limit succeed, one more byte fails, and each
// free gives its bytes back, so that a request that did not fit fits
// after enough frees. Allocate(0) takes nothing.
func TestPeersS39RmmLimitingUnderLimitDueToFrees(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	const limit = 10 << 10
	b := allocator.NewBudget(d, limit)
	var bufs []*cl.Buffer
	for range 10 {
		buf, err := b.Allocate(1 << 10)
		require.NoError(t, err)
		bufs = append(bufs, buf)
	}
	assert.Equal(t, int64(limit), b.Live())
	_, err = b.Allocate(1)
	assert.ErrorIs(t, err, allocator.ErrOutOfMemory)
	assert.ErrorIs(t, err, cl.ErrMemObjectAllocationFailure)
	z, err := b.Allocate(0)
	assert.NoError(t, err)
	assert.Nil(t, z)
	assert.Equal(t, int64(limit), b.Live(), "Allocate(0) takes nothing")
	_, err = b.Allocate(3 << 10)
	require.Error(t, err)
	for _, buf := range bufs[:3] {
		require.NoError(t, b.Free(buf))
	}
	assert.Equal(t, int64(7<<10), b.Live())
	buf, err := b.Allocate(3 << 10)
	require.NoError(t, err, "fits after the frees")
	bufs = append(bufs[3:], buf)
	for _, buf := range bufs {
		require.NoError(t, b.Free(buf))
	}
	assert.Zero(t, b.Live())
}

// RMM's limiting adaptor is thread safe (its allocated bytes are atomic):
// goroutines allocating at once through it take exactly the limit between
// them, never more, and every free returns its bytes.
func TestPeersS39RmmLimitingConcurrent(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	const size = 4 << 10
	const n = 64
	b := allocator.NewBudget(d, n*size)
	var mu sync.Mutex
	var got []*cl.Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				buf, err := b.Allocate(size)
				if err != nil {
					assert.ErrorIs(t, err, allocator.ErrOutOfMemory)
					return
				}
				assert.LessOrEqual(t, b.Live(), int64(n*size))
				mu.Lock()
				got = append(got, buf)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	assert.Len(t, got, n, "exactly the limit's worth")
	assert.Equal(t, int64(n*size), b.Live())
	for _, buf := range got {
		wg.Go(func() { assert.NoError(t, b.Free(buf)) })
	}
	wg.Wait()
	assert.Zero(t, b.Live())
}
