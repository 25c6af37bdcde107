package mempool_test

import (
	"testing"
	"time"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A goroutine registers a new queue (On, or RecordQueue of a buffer)
// while another goroutine releases an unrelated queue the pool knows,
// whose commands are still running. The registration comes at the pool's
// forgetting pass (the states reached forgetAt), and forgetReleased calls
// Finished() on every known queue, which "waits for [a Release under way]
// to return (as long as the queue's commands take)": so On of a queue
// the pool has never seen, which enqueues nothing and waits for no
// block, stalls for as long as an unrelated queue's kernels run (here
// about 1.7 s on POCL; with a kernel of minutes, minutes), and with
// forgetAt at math.MaxInt meanwhile, no other goroutine forgets either.
// Before the feature On took microseconds; the docs promise a stall only
// to "a request that finds a Release of q under way" (RecordQueue), i.e.
// of a queue the request must wait for.
func TestHostileS36aOnStallsOnUnrelatedRelease(t *testing.T) {
	f := newFixture(t, nil)
	iters := cltest.Size(f.q, 20000, 200000000)
	s36aFill(t, f, mempool.ForgetMin-1)
	released := s36aSlowRelease(t, f, iters)
	require.Equal(t, mempool.ForgetMin, mempool.QueueStates(f.pool))

	fresh := cltest.SecondQueue(t, f.q, 0)
	var took time.Duration
	ok := within(t, "On of a new queue", func() {
		start := time.Now()
		f.pool.On(fresh)
		took = time.Since(start)
	})
	require.True(t, ok)
	select {
	case <-released:
		t.Logf("(the unrelated Release had returned by then)")
	default:
		t.Logf("(the unrelated Release was still under way)")
	}
	require.True(t, withinWork(t, "the unrelated Release", func() { <-released }))
	assert.Less(t, took, 200*time.Millisecond,
		"On of a queue the pool never saw took %v: it waited for an unrelated queue's Release (its commands)", took)
}
