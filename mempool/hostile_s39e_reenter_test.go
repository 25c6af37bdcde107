package mempool_test

// Hostile review s39e: code the pool calls back (the sanitizer's output
// writer, hooks) that calls the pool's read-only methods.

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Hooks that read the pool (Stats and Snapshot) on
// every event, on a pool with queue caches whose blocks were cached
// before the hook was added (they stay cached, the doc says, until a
// request the pool cannot otherwise serve, FreeHeld or the ladder gives
// them back: the hook then sees segments freed while caches drain), with
// goroutines on several queues, FreeHeld and SetLimit beside them; the
// hooks are removed and added again meanwhile. Nothing hangs, and every
// device allocation is freed once.
func TestHostileS39eHooksReadThePoolWhileCachesDrain(t *testing.T) {
	for _, pol := range s35bPolicies {
		t.Run(pol.name, func(t *testing.T) {
			q := cltest.Queue(t)
			queues := s39eQueues(t, q)
			const limit = 1 << 20
			p := pooltest.New(t, q, append([]mempool.Option{mempool.WithLimit(limit)}, pol.opts...)...)
			// Cache blocks on every queue first.
			for _, qq := range queues {
				var bs []*mempool.PooledBuffer
				for _, n := range []int64{512, 4096, 512, 8192} {
					b, err := p.On(qq).Allocate(n)
					require.NoError(t, err)
					bs = append(bs, b)
				}
				for _, b := range bs {
					require.NoError(t, b.Close())
				}
			}
			var events atomic.Int64
			hook := mempool.HookFunc(func(e mempool.Event) {
				events.Add(1)
				pooltest.CheckStats(t, p.Stats())
				if e.Kind == mempool.SegmentFree || e.Kind == mempool.AllocAfter {
					_ = p.Snapshot()
				}
			})
			remove := p.AddHook(hook)
			withinLimit(t, "goroutines whose hooks read the pool", s39eHangLimit, func() {
				var sink errSink
				done := make(chan struct{})
				go func() {
					defer close(done)
					for i := range cltest.Size(q, 20, 200) {
						switch i % 5 {
						case 0:
							sink.add(p.FreeHeld())
						case 1:
							sink.add(p.SetLimit(limit / 2))
							sink.add(p.SetLimit(limit))
						case 2:
							remove()
							remove = p.AddHook(hook)
						case 3:
							sink.add(p.On(queues[i%len(queues)]).FreeHeld())
						case 4:
							_ = p.Snapshot()
						}
					}
				}()
				err, _ := s39eWorkers(s39eLoad{
					queues: queues, kernel: nil, sizes: []int64{512, 4096, 8192, 65536, 300 << 10},
					alloc: func(q *cl.CommandQueue, size int64) (*mempool.PooledBuffer, error) {
						return p.On(q).Allocate(size)
					},
					rounds: cltest.Size(q, 20, 200), workers: 4, seed: 7, noKernel: true,
				})
				sink.add(err)
				<-done
				assert.NoError(t, sink.err())
			})
			remove()
			assert.Positive(t, events.Load())
		})
	}
}

// A sanitizer output that reads Stats (statsWriter, review s39c's) on the
// runtime's finalizer goroutine: a sanitized pool reports a Dropped
// finding when the finalizer gives back a PooledBuffer dropped without
// Close (giveBackSanitized). The writer's Stats deadlocked there, holding
// the pool's lock, until the sanitizer wrote its output after letting go
// of its own (f341535): the next Stats (or Allocate) of any goroutine
// hung, and so did every finalizer of the program after it.
func TestHostileS39eSanitizerOutputReadsStatsOnDrop(t *testing.T) {
	w := &statsWriter{}
	_, p := sanPoolTo(t, w)
	w.p.Store(p)
	func() {
		b, err := p.Allocate(1000)
		require.NoError(t, err)
		_ = b // dropped without Close
	}()
	if !withinLimit(t, "Stats after a dropped buffer's finalizer printed its finding", s39eHangLimit, func() {
		for range 5 {
			runtime.GC()
			time.Sleep(10 * time.Millisecond) // let the finalizer run (not an assertion)
		}
		_ = p.Stats()
	}) {
		return // the pool is locked for good
	}
	assert.NoError(t, p.Close())
	assert.Positive(t, w.lines.Load(), "the Dropped finding was printed")
}
