package mempool_test

// Session s38b: what the pinned pool's host hand-over must not change
// elsewhere (a pool over device buffers reuses on its queue with no wait
// and keeps its queue caches), what it does change (a pinned reuse waits
// for the queue's commands), and a pool over an allocator that embeds a
// Pinned (allocator.HostOf finds its Host).

import (
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s38bSlowKernel enqueues on q a slow kernel over n ints and returns its
// event, waited for and released when the test ends.
func s38bSlowKernel(t *testing.T, q *cl.CommandQueue, n int) *cl.Event {
	t.Helper()
	_, slow := slowDevice(t, q, int64(4*n))
	require.NoError(t, q.Flush())
	return slow
}

// A pool over device buffers is as before: a block given back on an
// in-order queue is reused there at once, with the queue's slow kernel
// still running (no clFinish), from the queue's own cache.
func TestHostileS38bPlainPoolReuseDoesNotWait(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, _ := peerPool(t, pp, nil)
		q2 := cltest.SecondQueue(t, q, 0)
		on := p.On(q2)
		a, err := on.Allocate(4096)
		require.NoError(t, err)
		ev := s38bSlowKernel(t, q2, 1024)
		base, off := a.Base(), a.Offset()
		mustClose(t, a)
		assert.Equal(t, int64(1), s38bQueueStats(t, p, q2).Cached, "the block waits in q2's cache")
		before, err := ev.Done() // a simulator (Oclgrind) runs the kernel at its flush
		require.NoError(t, err)
		b, err := on.Allocate(4096)
		require.NoError(t, err)
		defer b.Close()
		assert.True(t, b.Base() == base && b.Offset() == off, "the block given back serves the request")
		done, err := ev.Done()
		require.NoError(t, err)
		assert.True(t, before || !done, "the reuse on q2 waited for q2's kernel: a plain pool never calls clFinish")
		s := s38bQueueStats(t, p, q2)
		assert.Zero(t, s.HostWaits)
		assert.Zero(t, s.Markers)
	})
}

// A pinned pool's reuse on the block's own queue waits on the host for
// that queue's commands, the slow kernel included ("Where torch takes
// another block while the copy runs, the request waits for it").
func TestHostileS38bPinnedReuseWaitsForQueue(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, _, _, q := s38PinnedPool(t, pp)
		q2 := cltest.SecondQueue(t, q, 0)
		on := p.On(q2)
		a, err := on.Allocate(4096)
		require.NoError(t, err)
		ev := s38bSlowKernel(t, q2, 1024)
		base, off := a.Base(), a.Offset()
		mustClose(t, a)
		b, err := on.Allocate(4096)
		require.NoError(t, err)
		defer b.Close()
		require.True(t, b.Base() == base && b.Offset() == off, "the block given back serves the request")
		done, err := ev.Done()
		require.NoError(t, err)
		assert.True(t, done, "the pinned block was handed to the host with its queue's commands pending")
	})
}

// pinnedEmbedder wraps a Pinned by embedding it: every method of the
// Pinned is its own (Queue, Context, Host), but no Unwrap.
type pinnedEmbedder struct{ *allocator.Pinned }

// s38bTorchReuse is torch's test_caching_pinned_memory over a pool made
// over wrap(pinned): a block closed right after a non-blocking transfer
// from its bytes (on the allocator's queue, behind a slow kernel) must
// not be handed to a new owner before the transfer.
func s38bTorchReuse(t *testing.T, wrap func(*allocator.Pinned) allocator.Allocator) {
	t.Setenv(mempool.LimitEnv, "")
	q := cltest.Queue(t)
	pinned, err := allocator.NewPinned(q)
	require.NoError(t, err)
	count := pooltest.Counting(t, wrap(pinned))
	p, err := mempool.New(count)
	require.NoError(t, err)
	defer func() {
		assert.NoError(t, p.Close())
		assert.Zero(t, pinned.Live())
	}()
	a := mustAlloc(t, p, 4096)
	x := startPinnedTransfer(t, pinned, a, q)
	base, off := a.Base(), a.Offset()
	mustClose(t, a)
	b := mustAlloc(t, p, 4096)
	defer b.Close()
	require.True(t, b.Base() == base && b.Offset() == off, "the block given back serves the request")
	x.overwrite(t, pinned, b, "the pinned block came back before the transfer from it completed")
	x.check(t)
}

// A pool over a Pinned embedded in a wrapper of the user's: the pool
// knows the Pinned's queue and context through the promoted methods
// (allocator.QueueOf, ContextOf) and its Host (allocator.HostOf): it is
// a pinned pool.
func TestHostileS38bPinnedThroughEmbedding(t *testing.T) {
	s38bTorchReuse(t, func(p *allocator.Pinned) allocator.Allocator { return pinnedEmbedder{p} })
}
