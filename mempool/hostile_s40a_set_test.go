package mempool_test

// Hostile review s40a: a Set of arena pools under a limit, with a queue
// per task on several goroutines (each released after its task), while
// another goroutine calls FreeHeld, Stats and MemoryStats, and the Set is
// closed under them.

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PASSES (exploration): every block's data survives its handovers between
// task queues; requests after Close fail with ErrPoolClosed (or, for a
// queue released meanwhile, cl.ErrInvalidCommandQueue) and nothing else;
// nothing hangs; the fixture checks every device buffer freed once.
func TestS40aSetTaskQueuesFreeHeldAndCloseConcurrently(t *testing.T) {
	q := cltest.Queue(t)
	f := newSetFixture(t, mempool.WithArena(), mempool.WithLimit(4<<20))
	_, err := f.set.Pool(q) // the allocator's queue: q, kept to the end
	require.NoError(t, err)
	n := cltest.Size(q, 256, 16<<10)
	var stop atomic.Bool
	var sink errSink
	var tasks atomic.Int64
	var wg sync.WaitGroup
	for g := range 3 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				tq, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
				if err != nil {
					sink.add(err)
					return
				}
				on := f.set.On(tq)
				var open []*mempool.PooledBuffer
				for j := range 3 {
					b, err := on.Allocate(int64(4 * (n + 64*j)))
					if err != nil {
						if !errors.Is(err, mempool.ErrPoolClosed) {
							sink.add(fmt.Errorf("goroutine %d task %d: %w", g, i, err))
						}
						break
					}
					v := make([]int32, n)
					for k := range v {
						v[k] = int32(g<<20 | i<<4 | j)
					}
					if err := tq.WriteBuffer(b.Base(), b.Offset(), cl.Bytes(v)); err != nil {
						sink.add(err)
					}
					open = append(open, b)
				}
				for j, b := range open {
					got := make([]int32, n)
					if err := tq.ReadBuffer(b.Base(), b.Offset(), cl.Bytes(got)); err != nil {
						sink.add(err)
					}
					if want := int32(g<<20 | i<<4 | j); got[0] != want || got[n-1] != want {
						sink.add(fmt.Errorf("goroutine %d task %d block %d: read %d..%d, wrote %d", g, i, j, got[0], got[n-1], want))
					}
					sink.add(b.Close())
				}
				sink.add(tq.Release())
				tasks.Add(1)
			}
		})
	}
	wg.Go(func() {
		for !stop.Load() {
			if err := f.set.FreeHeld(); err != nil {
				sink.add(err)
			}
			st := f.set.Stats()
			if st.ActiveBlocks < 0 || st.HeldBytes < 0 || st.ManagedBytes > 4<<20 {
				sink.add(fmt.Errorf("Stats: %+v", st))
			}
			_ = f.set.MemoryStats()
		}
	})
	if !withinWork(t, "tasks", func() {
		for tasks.Load() < int64(cltest.Size(q, 6, 60)) {
			runtime.Gosched()
		}
	}) {
		return
	}
	require.NoError(t, f.set.Close())
	stop.Store(true)
	if !withinWork(t, "the goroutines", wg.Wait) {
		return
	}
	assert.NoError(t, sink.err())
}
