package mempool_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Set's doc: "The first queue a Set is asked on for a context must stay
// unreleased until the Set is closed ... Other queues may be released
// before, as with Pool.On". A queue per task through a Set, sanitizer
// on, tasks on goroutines: nothing fails, the pool's queue states stay
// bounded, and the Set closes cleanly with nothing active.
func TestHostileS36cSetQueuePerTask(t *testing.T) {
	q0 := cltest.Queue(t)
	set := mempool.NewSet(nil, mempool.WithSanitizer(), mempool.WithSanitizerOutput(&syncBuffer{}))
	b0, err := set.On(q0).Allocate(1) // the context's first queue: kept
	require.NoError(t, err)
	require.NoError(t, b0.Close())
	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		if err != nil {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}
	}
	ok := withinWork(t, "tasks through a Set", func() {
		var wg sync.WaitGroup
		for g := range 3 {
			wg.Go(func() {
				for i := range 3 * mempool.ForgetMin {
					q, err := cl.NewCommandQueue(q0.Context(), q0.Device(), 0)
					if err != nil {
						fail(err)
						return
					}
					b, err := set.On(q).Allocate(int64(700 * (1 + (g+i)%9)))
					if err != nil {
						fail(fmt.Errorf("task %d/%d: %w", g, i, err))
					} else {
						ev, err := q.EnqueueFillBuffer(b.Base(), []byte{3}, b.Offset(), b.Size())
						if err == nil {
							_ = ev.Release()
						}
						fail(err)
						fail(b.Close())
					}
					fail(q.Release())
				}
			})
		}
		wg.Wait()
	})
	if !ok {
		return
	}
	assert.NoError(t, errors.Join(errs...))
	p, err := set.Pool(q0)
	require.NoError(t, err)
	assert.LessOrEqual(t, statesAfterNextQueue(t, p, q0), 2*mempool.ForgetMin+2)
	st := set.Stats()
	assert.Equal(t, 0, st.ActiveBlocks)
	assert.Empty(t, p.Findings())
	assert.NoError(t, set.Close())
}
