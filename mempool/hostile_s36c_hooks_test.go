package mempool_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
)

// A hook that releases the event's queue (a task's cleanup, run from the
// pool's hook): queues may be released at any time before the pool, and
// hooks run outside the pool's lock. Whatever the event, nothing hangs,
// an Allocate either succeeds or fails with cl.ErrInvalidCommandQueue,
// Close succeeds, no check is missed ("cannot check"), and the accounts
// end balanced (every device allocation freed once: the fixture).
func TestHostileS36cHookReleasesTheQueue(t *testing.T) {
	for _, kind := range []mempool.EventKind{mempool.MallocBefore, mempool.MallocAfter, mempool.AllocBefore, mempool.AllocAfter, mempool.FreeBefore, mempool.FreeAfter} {
		for _, san := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/san=%v", kind, san), func(t *testing.T) {
				out := &syncBuffer{}
				var opts []mempool.Option
				if san {
					opts = append(opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(out))
				}
				f := newFixture(t, nil, opts...)
				var mu sync.Mutex
				var relErrs []error
				remove := f.pool.AddHook(mempool.HookFunc(func(e mempool.Event) {
					_ = f.pool.Stats()
					if e.Kind == kind && e.Queue != nil && e.Queue != f.q {
						err := e.Queue.Release()
						mu.Lock()
						relErrs = append(relErrs, err)
						mu.Unlock()
					}
				}))
				defer remove()
				var errs []error
				ok := withinWork(t, "tasks whose hook releases their queue", func() {
					for i := range 3 * mempool.ForgetMin {
						q, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
						if err != nil {
							errs = append(errs, err)
							return
						}
						size := int64(1000 + 50000*(i%3))
						b, err := f.pool.On(q).Allocate(size)
						if err != nil {
							if !errors.Is(err, cl.ErrInvalidCommandQueue) {
								errs = append(errs, fmt.Errorf("task %d: Allocate: %w", i, err))
							}
							_ = q.Release()
							continue
						}
						if err := b.Close(); err != nil {
							errs = append(errs, fmt.Errorf("task %d: Close: %w", i, err))
						}
						_ = q.Release()
					}
				})
				if !ok {
					return
				}
				assert.NoError(t, errors.Join(errs...))
				assert.NoError(t, errors.Join(relErrs...))
				assert.NotContains(t, out.String(), "cannot check")
				s := f.pool.Stats()
				pooltest.CheckStats(t, s)
				assert.Equal(t, 0, s.ActiveBlocks)
				assert.Empty(t, f.pool.Findings())
			})
		}
	}
}
