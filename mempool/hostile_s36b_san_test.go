package mempool_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// RecordQueue's doc: "The pool holds q while it calls on it (a marker:
// CommandQueue.Hold), so a Release on another goroutine at any time waits
// for that call rather than racing it"; On: "q may be released before the
// pool"; forgetReleased: "A buffer still open on such a queue goes back to
// the policy ... when closed". With the sanitizer, a Close enqueues the
// guard's check and the poison on the buffer's own queue (checkAtClose:
// queueOf, then order's barrier, the check kernel, the fill, a Flush),
// without holding it: a producer task that hands its buffer to a consumer
// and releases its queue, while the consumer closes the buffer, makes the
// sanitizer's calls fail ("cannot check block", the block left unchecked
// and unpoisoned) or use a freed queue. Every write here is in bounds: the
// sanitizer must neither fail to check nor report anything.
func TestHostileS36bSanitizerCloseRacesProducerRelease(t *testing.T) {
	out := &syncBuffer{}
	f := newFixture(t, nil, mempool.WithSanitizer(), mempool.WithSanitizerOutput(out))
	qb := cltest.SecondQueue(t, f.q, 0)
	const size = 4000
	iters := cltest.Size(f.q, 50, 600)
	for i := range iters {
		qa, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
		require.NoError(t, err)
		b, err := f.pool.On(qa).Allocate(size)
		require.NoError(t, err)
		ev, err := qa.EnqueueFillBuffer(b.Buffer(), []byte{byte(i)}, 0, size)
		require.NoError(t, err)
		require.NoError(t, ev.Release())
		require.NoError(t, qa.Flush())
		// The consumer uses it on B.
		require.NoError(t, b.RecordQueue(qb))
		s36bReleaseWhileClosing(t, qa, b)
		if strings.Contains(out.String(), "cannot check") {
			t.Logf("failed at iteration %d", i)
			break
		}
	}
	got := f.pool.Findings()
	first, _, _ := strings.Cut(out.String(), "\n")
	assert.NotContains(t, first, "cannot check", "the sanitizer called on a queue released under it")
	assert.Empty(t, got, "findings, with every write in bounds")
}

// The same race, where the producer wrote one int past its request (in
// the guard) before handing the buffer over: the sanitizer's doc promises
// an OutOfBounds finding at Close. When the check kernel's enqueue on the
// producer's queue fails (its Release began after queueOf looked), the
// write is never reported.
func TestHostileS36bSanitizerMissesOverflowWhenProducerReleasesDuringClose(t *testing.T) {
	out := &syncBuffer{}
	f := newFixture(t, nil, mempool.WithSanitizer(), mempool.WithSanitizerOutput(out))
	qb := cltest.SecondQueue(t, f.q, 0)
	const size = 4000
	trials := cltest.Size(f.q, 10, 40)
	ids := map[uint64]bool{}
	for range trials {
		qa, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
		require.NoError(t, err)
		b, err := f.pool.On(qa).Allocate(size)
		require.NoError(t, err)
		ids[b.ID()] = true
		ev, err := qa.EnqueueFillBuffer(b.Base(), []byte{0, 0, 0, 0}, b.Offset()+size, 4)
		require.NoError(t, err)
		require.NoError(t, ev.Release())
		require.NoError(t, qa.Flush())
		require.NoError(t, b.RecordQueue(qb))
		s36bReleaseWhileClosing(t, qa, b)
	}
	found := map[uint64]bool{}
	for _, g := range f.pool.Findings() {
		if g.Kind == mempool.OutOfBounds && ids[g.BlockID] {
			found[g.BlockID] = true
		}
	}
	first, _, _ := strings.Cut(out.String(), "\n")
	assert.Equal(t, len(ids), len(found), "writes past the request found (of %d); the sanitizer's first line: %s", len(ids), first)
}

// Without RecordQueue: a buffer handed to another goroutine (allowed: a
// PooledBuffer is for one goroutine at a time), closed there while its
// queue's owner releases the queue. Close's check kernel, poison fill and
// Flush go on the buffer's queue, unheld.
func TestHostileS36bSanitizerCloseOnAnotherGoroutineRacesRelease(t *testing.T) {
	out := &syncBuffer{}
	f := newFixture(t, nil, mempool.WithSanitizer(), mempool.WithSanitizerOutput(out))
	const size = 4000
	iters := cltest.Size(f.q, 50, 1000)
	for i := range iters {
		qa, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
		require.NoError(t, err)
		b, err := f.pool.On(qa).Allocate(size)
		require.NoError(t, err)
		ev, err := qa.EnqueueFillBuffer(b.Buffer(), []byte{byte(i)}, 0, size)
		require.NoError(t, err)
		require.NoError(t, ev.Release())
		require.NoError(t, qa.Flush())
		s36bReleaseWhileClosing(t, qa, b)
		if strings.Contains(out.String(), "cannot check") {
			t.Logf("failed at iteration %d", i)
			break
		}
	}
	got := f.pool.Findings()
	first, _, _ := strings.Cut(out.String(), "\n")
	assert.NotContains(t, first, "cannot check", "the sanitizer called on a queue released under it")
	assert.Empty(t, got, "findings, with every write in bounds")
}

// s36bReleaseWhileClosing releases q on one goroutine while b is closed on
// another, both at once, and requires that neither fails.
func s36bReleaseWhileClosing(t *testing.T, q *cl.CommandQueue, b *mempool.PooledBuffer) {
	t.Helper()
	var wg sync.WaitGroup
	start := make(chan struct{})
	var rerr, cerr error
	wg.Go(func() { <-start; rerr = q.Release() })
	wg.Go(func() { <-start; cerr = b.Close() })
	close(start)
	wg.Wait()
	require.NoError(t, rerr)
	require.NoError(t, cerr)
}
