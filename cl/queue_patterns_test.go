package cl_test

import (
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// queueCases are patterns of the calls mempool's queue ordering makes
// (queue.go): a marker on the queue a block was given back on, flushed,
// a handle of it retained, a barrier on the next queue waiting for it, the
// handle released at once, the marker polled; buffers released with
// commands pending.
//
// On an NVIDIA H200 (driver 580.159) mempool's storms crashed in a thread
// of the driver's own, with exact bins too, whose blocks share no buffer
// (BENCHMARKS.md, "On a real GPU, second visit"). These patterns, each in
// a child process, are what a GPU run (scripts/gpu_check.sh) tries next to
// find which call does it; POCL and Oclgrind run them all.
var queueCases = []childCase{
	{"handover between in-order queues", nil, func(t *testing.T, q *cl.CommandQueue) {
		handovers(t, q, cltest.SecondQueue(t, q, 0), 500, 1)
	}},
	{"handover to an out-of-order queue", nil, func(t *testing.T, q *cl.CommandQueue) {
		handovers(t, q, cltest.SecondQueue(t, q, cl.QueueOutOfOrder), 500, 1)
	}},
	{"handover from an out-of-order queue", nil, func(t *testing.T, q *cl.CommandQueue) {
		handovers(t, cltest.SecondQueue(t, q, cl.QueueOutOfOrder), q, 500, 1)
	}},
	{"handovers on three goroutines", nil, func(t *testing.T, q *cl.CommandQueue) {
		var wg sync.WaitGroup
		for g := range 3 {
			a, b := cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, cl.QueueProperties(g%2)*cl.QueueOutOfOrder)
			wg.Go(func() { handovers(t, a, b, 300, uint64(g)) })
		}
		wg.Wait()
	}},
	{"queue released while another waits on its marker", nil, func(t *testing.T, q *cl.CommandQueue) {
		buf := queueBuf(t, q, 1<<16)
		for range 100 {
			a, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
			require.NoError(t, err)
			queueFill(t, a, buf)
			m, err := a.EnqueueMarker()
			require.NoError(t, err)
			require.NoError(t, a.Flush())
			require.NoError(t, q.EnqueueBarrier(m))
			require.NoError(t, m.Release())
			require.NoError(t, a.Release())
			queueFill(t, q, buf)
		}
		require.NoError(t, q.Finish())
	}},
}

// TestQueuePatterns runs each pattern in a child process.
func TestQueuePatterns(t *testing.T) {
	runInChildren(t, "TestQueuePatterns", "queues:", queueCases)
}

// handovers runs n rounds of mempool's handover from queue a to queue b:
// a buffer filled on a, a marker on a (flushed), a barrier on b waiting
// for a retained handle of it (released at once), a fill on b, the marker
// polled and released, and the buffer released, with its commands pending,
// every few rounds; seed picks the sizes.
func handovers(t *testing.T, a, b *cl.CommandQueue, n int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 3))
	var bufs []*cl.Buffer
	for range n {
		if len(bufs) > 8 || len(bufs) > 0 && rng.IntN(3) == 0 {
			i := rng.IntN(len(bufs))
			if !assert.NoError(t, bufs[i].Release()) {
				return
			}
			bufs = append(bufs[:i], bufs[i+1:]...)
		}
		buf, err := a.Context().CreateBuffer(cl.MemReadWrite, int64(1+rng.IntN(64))<<12)
		if !assert.NoError(t, err) {
			return
		}
		bufs = append(bufs, buf)
		ok := queueFillE(a, buf) == nil
		m, err := a.EnqueueMarker()
		ok = ok && err == nil && a.Flush() == nil
		if !assert.True(t, ok, "marker on the queue given back on") {
			return
		}
		h, err := m.Retain()
		ok = err == nil && b.EnqueueBarrier(h) == nil && h.Release() == nil
		ok = ok && queueFillE(b, buf) == nil
		_, err = m.Done()
		if !assert.True(t, ok && err == nil, "barrier on the next queue") {
			return
		}
		if !assert.NoError(t, m.Release()) {
			return
		}
	}
	for _, buf := range bufs {
		assert.NoError(t, buf.Release())
	}
	assert.NoError(t, a.Finish())
	assert.NoError(t, b.Finish())
}

func queueBuf(t *testing.T, q *cl.CommandQueue, n int64) *cl.Buffer {
	t.Helper()
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, n)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, b.Release()) })
	return b
}

func queueFill(t *testing.T, q *cl.CommandQueue, b *cl.Buffer) {
	t.Helper()
	require.NoError(t, queueFillE(q, b))
}

func queueFillE(q *cl.CommandQueue, b *cl.Buffer) error {
	ev, err := q.EnqueueFillBuffer(b, []byte{1, 2, 3, 4}, 0, b.Size())
	if err != nil {
		return err
	}
	return ev.Release()
}

// TestQueueFinishedAfterRelease: Finished is false while the queue lives
// and true once Release has finished its commands (a slow kernel among
// them), so that a pool may stop waiting on a queue its owner released.
func TestQueueFinishedAfterRelease(t *testing.T) {
	q := cltest.Queue(t)
	q2, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
	require.NoError(t, err)
	assert.False(t, q2.Finished())
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, 1<<20)
	require.NoError(t, err)
	defer b.Release()
	ev, err := q2.EnqueueFillBuffer(b, []byte{1}, 0, 1<<20)
	require.NoError(t, err)
	assert.False(t, q2.Finished(), "a command enqueued, not finished by a Release")
	require.NoError(t, q2.Release())
	assert.True(t, q2.Finished())
	s, err := ev.Status()
	require.NoError(t, err)
	assert.Equal(t, cl.Complete, s, "Release finished the command")
	require.NoError(t, ev.Release())
	assert.False(t, (*cl.CommandQueue)(nil).Finished())
}

// A Release waits for every Hold of its queue to end, so that calls made
// under a Hold never race it; Hold is false once Release has begun, and
// FinishedNoWait answers without waiting for a Release under way.
func TestQueueHoldKeepsReleaseOff(t *testing.T) {
	q := cltest.Queue(t)
	q2, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
	require.NoError(t, err)
	require.True(t, q2.TryHold())
	q2.Unhold()
	require.True(t, q2.Hold())
	require.True(t, q2.Hold(), "holds are shared")
	released := make(chan error, 1)
	go func() { released <- q2.Release() }()
	// Until the Release waits (its goroutine may start late on a loaded
	// machine: a TryHold then would succeed, and the Release wait for it
	// for ever).
	for deadline := time.Now().Add(10 * time.Second); q2.TryHold(); {
		q2.Unhold()
		require.True(t, time.Now().Before(deadline), "Release never began")
		time.Sleep(time.Millisecond)
	}
	select {
	case <-released:
		t.Fatal("Release ran while the queue was held")
	case <-time.After(100 * time.Millisecond):
	}
	assert.False(t, q2.FinishedNoWait(), "a Release under way")
	assert.False(t, q2.TryHold(), "a Release waits")
	ev, err := q2.EnqueueMarker()
	require.NoError(t, err, "a call under a Hold, with a Release waiting")
	require.NoError(t, ev.Release())
	q2.Unhold()
	q2.Unhold()
	require.NoError(t, <-released)
	assert.False(t, q2.Hold(), "released")
	assert.False(t, q2.TryHold(), "released")
	assert.True(t, q2.FinishedNoWait())
	assert.True(t, q2.Finished())
	var nilq *cl.CommandQueue
	assert.False(t, nilq.Hold())
	assert.False(t, nilq.TryHold())
	assert.False(t, nilq.FinishedNoWait())
}
