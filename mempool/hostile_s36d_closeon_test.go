package mempool_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
)

// Queues made, used and released by three workers while the pool is
// closed: once Close has returned, no On registers a queue (QueueStates
// does not grow), every Allocate fails with ErrPoolClosed, and Stats'
// queue lines match the states registered.
func TestHostileS36dOnDuringClose(t *testing.T) {
	for round := range 3 {
		_ = round
		f := newFixture(t, nil)
		var closedAt atomic.Int64
		closedAt.Store(-1)
		var after, made atomic.Int64
		var bad errSink
		ok := withinWork(t, "the workload", func() {
			var wg sync.WaitGroup
			start := make(chan struct{})
			for range 3 {
				wg.Go(func() {
					<-start
					for i := range cltest.Size(f.q, 40, 200) {
						q, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
						if err != nil {
							return
						}
						made.Add(1)
						wasClosed := closedAt.Load() >= 0
						b, err := f.pool.On(q).Allocate(int64(256 + i))
						if err == nil {
							if wasClosed {
								bad.add(errors.New("Allocate served after Close returned"))
							}
							_ = b.Close()
						} else if !errors.Is(err, mempool.ErrPoolClosed) {
							bad.add(err)
						}
						if wasClosed {
							after.Add(1)
						}
						_ = q.Release()
					}
				})
			}
			close(start)
			for made.Load() < 3*mempool.ForgetMin { // let the forgetting passes start
				time.Sleep(time.Millisecond)
			}
			_ = f.pool.Close()
			closedAt.Store(int64(mempool.QueueStates(f.pool)))
			wg.Wait()
		})
		if !ok {
			return
		}
		assert.NoError(t, bad.err())
		assert.LessOrEqual(t, mempool.QueueStates(f.pool), int(closedAt.Load()), "queue states registered after Close returned (%d Ons after)", after.Load())
		t.Logf("states at close %d, at end %d, Ons after %d", closedAt.Load(), mempool.QueueStates(f.pool), after.Load())
	}
}
