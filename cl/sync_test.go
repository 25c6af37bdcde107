package cl_test

import (
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slowRead enqueues cltest.SlowRead over x into out on q and returns the
// kernel's event.
func slowRead(t *testing.T, q *cl.CommandQueue, x, out *cl.Buffer, n, iters int) *cl.Event {
	t.Helper()
	k := cltest.SlowReadKernel(t, q)
	require.NoError(t, k.SetArgs(x, out, int32(iters)))
	ev, err := q.EnqueueNDRangeKernel(k, nil, []int{n}, nil)
	require.NoError(t, err)
	return ev
}

// A barrier on a marker of another queue orders a write after a slow
// kernel that reads the same buffer.
func TestMarkerAndBarrierOrderTwoQueues(t *testing.T) {
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	n, iters := 64, cltest.Size(q, 200, 200000)
	ones := make([]int32, n)
	for i := range ones {
		ones[i] = 1
	}
	x := newBuffer(t, q, ones)
	out := newBuffer(t, q, make([]int32, n))
	kev := slowRead(t, q, x, out, n, iters)
	defer kev.Release()

	marker, err := q.EnqueueMarker()
	require.NoError(t, err)
	require.NoError(t, q.Flush())
	require.NoError(t, q2.EnqueueBarrier(marker))
	require.NoError(t, marker.Release(), "the barrier keeps what it waits on")
	fill, err := q2.EnqueueFillBuffer(x, cl.Bytes([]int32{7}), 0, int64(4*n))
	require.NoError(t, err)
	require.NoError(t, fill.Wait())
	require.NoError(t, fill.Release())
	done, err := kev.Done()
	require.NoError(t, err)
	assert.True(t, done, "the write waited for the kernel")

	got := make([]int32, n)
	require.NoError(t, q.ReadBuffer(out, 0, cl.Bytes(got)))
	for i := range got {
		require.Equal(t, int32(iters), got[i], "element %d", i)
	}
}

func TestEventRetainAndCallback(t *testing.T) {
	q := cltest.Queue(t)
	m, err := q.EnqueueMarker()
	require.NoError(t, err)
	m2, err := m.Retain()
	require.NoError(t, err)
	called := make(chan cl.ExecStatus, 1)
	require.NoError(t, m.OnComplete(func(s cl.ExecStatus) { called <- s }))
	require.NoError(t, m.Release())
	require.NoError(t, q.Finish())
	require.NoError(t, m2.Wait(), "the retained handle outlives the first")
	done, err := m2.Done()
	require.NoError(t, err)
	assert.True(t, done)
	require.NoError(t, m2.Release())
	select {
	case s := <-called:
		assert.Equal(t, cl.Complete, s)
	case <-time.After(10 * time.Second):
		t.Fatal("OnComplete never called back")
	}

	_, err = m.Retain()
	assert.ErrorIs(t, err, cl.ErrInvalidEvent, "a released event")
	assert.ErrorIs(t, m.OnComplete(func(cl.ExecStatus) {}), cl.ErrInvalidEvent)
	var nilEv *cl.Event
	assert.ErrorIs(t, nilEv.OnComplete(func(cl.ExecStatus) {}), cl.ErrInvalidEvent)
}

func TestSyncMisuse(t *testing.T) {
	q := cltest.Queue(t)
	other, err := cl.DefaultQueue()
	require.NoError(t, err)
	defer other.Release()
	ev, err := other.EnqueueMarker()
	require.NoError(t, err)
	defer ev.Release()
	assert.ErrorIs(t, q.EnqueueBarrier(ev), cl.ErrInvalidContext, "an event of another context")
	_, err = q.EnqueueMarker(nil)
	assert.ErrorIs(t, err, cl.ErrInvalidEventWaitList)
	m, err := q.EnqueueMarker()
	require.NoError(t, err)
	assert.ErrorIs(t, m.OnComplete(nil), cl.ErrInvalidValue)
	require.NoError(t, m.Release())

	b, err := q.Context().CreateBuffer(cl.MemReadWrite, 64)
	require.NoError(t, err)
	defer b.Release()
	_, err = q.EnqueueMigrate(nil, cl.MigrateContentUndefined, false)
	assert.ErrorIs(t, err, cl.ErrInvalidValue)
	_, err = q.EnqueueMigrate([]*cl.Buffer{b}, 1<<40, false)
	assert.ErrorIs(t, err, cl.ErrInvalidValue)
	ob, err := other.Context().CreateBuffer(cl.MemReadWrite, 64)
	require.NoError(t, err)
	defer ob.Release()
	_, err = q.EnqueueMigrate([]*cl.Buffer{ob}, cl.MigrateContentUndefined, false)
	assert.ErrorIs(t, err, cl.ErrInvalidContext)
}

// Migrating with undefined content commits memory and changes no data
// written before or after it on another queue.
func TestMigrateContentUndefined(t *testing.T) {
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, 4096)
	require.NoError(t, err)
	defer b.Release()
	ev, err := q.EnqueueMigrate([]*cl.Buffer{b}, cl.MigrateContentUndefined, true)
	require.NoError(t, err)
	require.NoError(t, ev.Wait())
	require.NoError(t, ev.Release())
	require.NoError(t, q2.WriteBuffer(b, 0, []byte{1, 2, 3, 4}))
	got := make([]byte, 4)
	require.NoError(t, q2.ReadBuffer(b, 0, got))
	assert.Equal(t, []byte{1, 2, 3, 4}, got)
}
