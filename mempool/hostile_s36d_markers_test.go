package mempool_test

import (
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A sanitized block on qa that RecordQueue says qb may use is closed while
// qa's Release waits for a Hold: the sanitizer's order (holdR) enqueues a
// marker on qb (retainMarker, marked 1), then its barrier's Hold of qa
// fails (errQueueReleased); the failed fence is dropped with its marked
// count, and the retry on the sanitizer's own queue finds qb's marker
// there (marked 0). QueueStats.Markers ("Markers enqueued on the queue")
// of qb stays 0 though a marker was enqueued on it.
func TestHostileS36dMarkerLostWhenHoldRBarrierFails(t *testing.T) {
	out := &syncBuffer{}
	f := newFixture(t, nil, mempool.WithSanitizer(), mempool.WithSanitizerOutput(out))
	qa, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
	require.NoError(t, err)
	qb, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
	require.NoError(t, err)
	defer qb.Release()

	b, err := f.pool.On(qa).Allocate(4000)
	require.NoError(t, err)
	require.NoError(t, b.RecordQueue(qb))

	// qb is busy, so that its marker is not complete at once.
	const n = 64
	iters := int32(cltest.Size(f.q, 20000, 20000000))
	k := cltest.SlowReadKernel(t, qb)
	x, err := f.q.Context().CreateBuffer(cl.MemReadWrite, 4*n)
	require.NoError(t, err)
	defer x.Release()
	scratch, err := f.q.Context().CreateBuffer(cl.MemReadWrite, 4*n)
	require.NoError(t, err)
	defer scratch.Release()
	require.NoError(t, k.SetArgs(x, scratch, iters))
	require.NoError(t, qb.EnqueueKernel(k, []int{n}, nil))
	require.NoError(t, qb.Flush())

	require.True(t, qa.Hold())
	released := make(chan error, 1)
	go func() { released <- qa.Release() }()
	for qa.TryHold() {
		qa.Unhold()
		time.Sleep(time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	time.Sleep(200 * time.Millisecond)
	qa.Unhold()
	select {
	case err := <-released:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Release hung")
	}
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Close hung")
	}
	t.Logf("sanitizer output: %q", out.String())
	var markers int64 = -1
	for _, q := range f.pool.Stats().Queues {
		if q.Queue == qb {
			markers = q.Markers
		}
	}
	assert.GreaterOrEqual(t, markers, int64(1), "qb's Markers: the Close ordered after qb's commands, which took a marker on qb")
}
