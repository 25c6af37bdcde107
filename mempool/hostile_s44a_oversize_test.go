package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mallocs returns the malloc events of events.
func mallocs(events []mempool.Event) []mempool.Event {
	var out []mempool.Event
	for _, e := range events {
		if e.Kind == mempool.MallocBefore || e.Kind == mempool.MallocAfter {
			out = append(out, e)
		}
	}
	return out
}

// Review s44a: a request over the device's largest buffer, made on a queue
// (Pool.On's, or pool.Allocate on the allocator's queue), reached the
// hooks as a malloc on no queue (Event.Queue nil), where every other
// request's malloc events, a refused one included, name its queue.
//
// hooks.go, Event.Queue: "Queue is the queue the block is for (Pool.On's,
// or the allocator's) in malloc and free events, and the request's in
// alloc events; nil for none". mempool/doc.go, Out of memory: a request
// larger than the device's largest buffer "counts in OOMs and reaches the
// hooks as a malloc that failed, as every refused request does."
// (refuseSize emitted MallocBefore without a Queue and called mallocFailed
// with a request whose q is nil.) A LineProfile or TraceRecorder
// WithSites then filed the program's biggest mistake under no queue.
func TestHostileS44aOversizeRequestKeepsItsQueueInHooks(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q)
	max := p.Device().MaxMemAllocSize
	require.Positive(t, max)
	log := &recorder{}
	defer p.AddHook(log)()

	for _, tc := range []struct {
		name  string
		alloc func(int64) (*mempool.PooledBuffer, error)
	}{
		{"On(q)", p.On(q).Allocate},
		{"pool.Allocate (allocator's queue)", p.Allocate},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log.take()
			_, err := tc.alloc(max + 1)
			require.ErrorIs(t, err, mempool.ErrOutOfMemory)
			require.ErrorIs(t, err, cl.ErrInvalidBufferSize)
			ms := mallocs(log.take())
			require.Len(t, ms, 2, "malloc_before and malloc_after")
			for _, e := range ms {
				assert.True(t, e.Queue == q, "%v of a request made on q names queue %p, want q (%p)", e.Kind, e.Queue, q)
			}
		})
	}
	// The same request within the device's buffer size, refused by the
	// limit instead, names its queue: only the over-size path loses it.
	require.NoError(t, p.SetLimit(1<<20))
	log.take()
	_, err := p.On(q).Allocate(4 << 20)
	require.ErrorIs(t, err, mempool.ErrOutOfMemory)
	for _, e := range mallocs(log.take()) {
		assert.True(t, e.Queue == q, "limit refusal: %v names queue %p, want q (%p)", e.Kind, e.Queue, q)
	}
}

// Review s44a: a request over the device's largest buffer made on a queue was
// an OOM but neither a request of the queue (QueueStats.Requests) nor a
// miss, where a request the limit refuses at once (its block could not
// fit even in an empty pool) counts in all three: the queue's figures
// and the pool's disagreed on how many requests were made.
//
// queue.go, QueueStats: "Requests made on the queue, those served by a
// held block, ..."; stats.go: "Misses // requests that found no held
// block that fits", "OOMs // requests refused with ErrOutOfMemory";
// doc.go: the over-size request "counts in OOMs ... as every refused
// request does."
func TestHostileS44aOversizeRequestCountedAsQueueRequest(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q, mempool.WithLimit(1<<20))
	on := p.On(q, mempool.QueueName("w"))
	idx := -1
	for i, qs := range p.Stats().Queues {
		if qs.Name == "w" {
			idx = i
		}
	}
	require.GreaterOrEqual(t, idx, 0)

	_, err := on.Allocate(4 << 20) // the limit refuses it at once
	require.ErrorIs(t, err, mempool.ErrOutOfMemory)
	s1 := p.Stats()
	t.Logf("after the limit's refusal: OOMs %d, misses %d, queue requests %d", s1.OOMs, s1.Misses, s1.Queues[idx].Requests)

	_, err = on.Allocate(p.Device().MaxMemAllocSize + 1) // over the device's largest buffer
	require.ErrorIs(t, err, mempool.ErrOutOfMemory)
	s2 := p.Stats()
	t.Logf("after the over-size refusal: OOMs %d, misses %d, queue requests %d", s2.OOMs, s2.Misses, s2.Queues[idx].Requests)

	require.Equal(t, s1.OOMs+1, s2.OOMs, "both are OOMs")
	assert.Equal(t, s1.Queues[idx].Requests+1, s2.Queues[idx].Requests,
		"the over-size request was made on the queue: QueueStats.Requests counts the limit's refusal, not this one")
	assert.Equal(t, s1.Misses+1, s2.Misses, "no held block fits it: Misses counts the limit's refusal, not this one")
}
