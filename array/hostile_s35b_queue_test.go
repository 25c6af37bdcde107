package array_test

import (
	"testing"

	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FAILED before its fix (session 35; defect: array.onQueue, array/array.go:295, records the array's
// queue on the pool's block with RecordQueue, and mempool keeps that
// queue in the block's uses with no way to drop it; a later handover
// enqueues a marker on it (mempool/queue.go:263, mark), which fails once
// the queue is released). array's doc asks nothing of the array's queue
// past the array's Close ("Closing an array right after its last
// operation is enqueued is legal"), and mempool's RecordQueue doc only
// that "q must be of the pool's context" (On's doc asks its queue to
// outlive the pool; RecordQueue's does not).
//
// A worker makes a queue of its own, computes with arrays on it from the
// pool's Allocate (the pool's queue qa: array's documented way with
// pool.Allocate), closes them, and releases its queue (which finishes it
// first: nothing of it can still use the memory). The next
// pool.Allocate of that size takes the block, tries to enqueue a marker
// on the released queue and fails; the block goes back with its uses, and
// every later request that takes it fails the same way: the pool is
// broken for that size for good.
//
// Expected: the requests succeed (the released queue was finished; or
// RecordQueue's doc says that q must outlive the pool, and array's that
// the queue must outlive its pool). Observed on POCL: every request after
// the release fails with "queue is nil or released".
func TestHostileS35bArrayOnAReleasedQueueBreaksThePool(t *testing.T) {
	qa := cltest.Queue(t)
	pool := pooltest.New(t, qa)
	const n = 1024
	worker, err := cl.NewCommandQueue(qa.Context(), qa.Device(), 0)
	require.NoError(t, err)
	x, err := array.Full[int32](worker, n, 1, pool.Allocate)
	require.NoError(t, err)
	y, err := array.Scale(2, x)
	require.NoError(t, err)
	got, err := y.Get()
	require.NoError(t, err)
	require.Equal(t, int32(2), got[0])
	require.NoError(t, y.Close())
	require.NoError(t, x.Close())
	require.NoError(t, worker.Release()) // finishes it first

	failed := 0
	for range 5 {
		b, err := pool.Allocate(4 * n)
		if err != nil {
			failed++
			t.Log(err)
			continue
		}
		require.NoError(t, b.Close())
	}
	assert.Zero(t, failed, "requests of 5 that failed after the worker's queue was released")
}
