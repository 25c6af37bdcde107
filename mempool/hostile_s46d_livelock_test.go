package mempool_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A mempool -race run of session 46 stopped for minutes in
// TestHostileS43cOneGoroutineForgetAndReaders: lockCaches (Stats,
// Snapshot, FreeHeld, a drain, the pass that forgets released queues),
// once its tries under p.mu had failed, waited for each cache's lock in
// turn and then found that a queue had come meanwhile (On registers one
// under p.mu alone), let every lock go and began again, for ever while
// goroutines kept making queues: its list had 407,636 caches by then, as
// the pass that forgets released queues could not end either. Here a
// queue is made each time a lockCaches has waited for the caches' locks,
// as a goroutine making queues without end does on a loaded machine:
// before the fix the Stats began again at each one (the test stops making
// them after 50). Now a queue waits to be registered while a lockCaches
// waits for the caches' locks (p.listMu): one try.
func TestHostileS46dLockCachesEndsWhileQueuesKeepComing(t *testing.T) {
	for _, arena := range []bool{false, true} {
		q := cltest.Queue(t)
		p := hsPool(t, q, policyOptions(arena)...)
		var waited atomic.Int32
		var wg sync.WaitGroup
		undo := mempool.SetLockCachesWaited(func() {
			if waited.Add(1) > 50 {
				return
			}
			// Another goroutine makes and registers a queue; wait for it
			// a while (with the fix it waits for this lockCaches).
			done := make(chan struct{})
			wg.Go(func() {
				defer close(done)
				q3, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
				if !assert.NoError(t, err) {
					return
				}
				_ = p.On(q3)
				assert.NoError(t, q3.Release())
			})
			select {
			case <-done:
			case <-time.After(100 * time.Millisecond):
			}
		})
		st := p.Stats()
		undo()
		wg.Wait()
		assert.Equal(t, int32(1), waited.Load(), "arena=%v: lockCaches waited for the caches' locks once", arena)
		assert.Len(t, st.Queues, 1, "the queue registered after the Stats")
		assert.Len(t, p.Stats().Queues, 2)
		require.NoError(t, p.Close())
	}
}
