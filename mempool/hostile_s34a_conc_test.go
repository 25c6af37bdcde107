package mempool_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PASSES (so far): with parking off, two goroutines on their own queues
// (On) and a third that frees held segments and moves the limit: at every
// check, no two live sub-buffers overlap, no open block's sub-buffer is
// released, nothing hangs, and after Close every sub-buffer is released.
func TestHostileS34aNoParkingConcurrent(t *testing.T) {
	for _, name := range []string{"caches", "nocaches", "sanitizer"} {
		t.Run(name, func(t *testing.T) {
			opts := []mempool.Option{mempool.WithArena(), mempool.WithLimit(6 << 20)}
			switch name {
			case "nocaches":
				opts = append(opts, mempool.WithoutQueueCaches())
			case "sanitizer":
				opts = append(opts, mempool.WithSanitizer())
			}
			f := newFixture(t, nil, opts...)
			mempool.SetParking(f.pool, false)
			qs := []*cl.CommandQueue{f.q, cltest.SecondQueue(t, f.q, 0)}
			var mu sync.Mutex
			var tr s34aTracker
			var errs []error
			fail := func(err error) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			check := func() {
				mu.Lock()
				defer mu.Unlock()
				if err := tr.check(); err != nil {
					errs = append(errs, err)
				}
			}
			var wg sync.WaitGroup
			stop := make(chan struct{})
			for g, q := range qs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					qa := f.pool.On(q)
					r := rand.New(rand.NewPCG(uint64(g), 34))
					type held struct {
						pb  *mempool.PooledBuffer
						sub *cl.Buffer
					}
					var open []held
					for step := range 400 {
						if r.IntN(2) == 0 || len(open) == 0 {
							pb, err := qa.Allocate(int64(1+r.IntN(64)) << (8 + r.IntN(5)))
							if err != nil {
								continue
							}
							h := held{pb: pb, sub: pb.Buffer()}
							if h.sub != nil {
								mu.Lock()
								tr.add(h.sub)
								mu.Unlock()
								if err := q.WriteBuffer(h.sub, 0, []byte{byte(step)}); err != nil {
									fail(err)
									return
								}
							}
							open = append(open, h)
						} else {
							i := r.IntN(len(open))
							if err := open[i].pb.Close(); err != nil {
								fail(err)
							}
							open = append(open[:i], open[i+1:]...)
						}
						for _, h := range open {
							if h.sub != nil && h.sub.Released() {
								fail(fmt.Errorf("step %d: an open block's sub-buffer was released", step))
								return
							}
						}
						if step%16 == 0 {
							check()
						}
					}
					_ = q.Finish()
					for _, h := range open {
						_ = h.pb.Close()
					}
				}()
			}
			var wg3 sync.WaitGroup
			wg3.Add(1)
			go func() {
				defer wg3.Done()
				r := rand.New(rand.NewPCG(9, 34))
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if i%2 == 0 {
						_ = f.pool.FreeHeld()
					} else {
						_ = f.pool.SetLimit(int64(3+r.IntN(6)) << 20)
					}
					check()
				}
			}()
			ok := withinWork(t, "the churn", func() {
				wg.Wait()
			})
			close(stop)
			if !ok {
				return
			}
			wg3.Wait()
			mu.Lock()
			for _, err := range errs {
				assert.NoError(t, err)
			}
			mu.Unlock()
			require.NoError(t, f.pool.Close())
			for i, s := range tr.subs {
				require.True(t, s.Released(), "sub-buffer %d live after Close", i)
			}
		})
	}
}
