package mempool_test

// Hostile review s39e: code the pool calls back (the sanitizer's output
// writer, hooks) that calls the pool's read-only methods.

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s39eStatsWriter is a sanitizer output that logs the pool's figures
// beside each finding, as a program's logger might: it calls Stats.
type s39eStatsWriter struct {
	pool  atomic.Pointer[mempool.Pool]
	lines atomic.Int64
}

func (w *s39eStatsWriter) Write(b []byte) (int, error) {
	if p := w.pool.Load(); p != nil {
		_ = p.Stats() // a read-only method, as a hook may call (Hook's doc)
	}
	w.lines.Add(1)
	return len(b), nil
}

// FAILS (hang): a sanitizer output writer that reads the pool's Stats
// deadlocks the pool. The sanitizer prints each finding under its own
// lock (sanitizer.report, with s.mu held); Stats takes the pool's lock,
// then, through lockCaches, asks the sanitizer for its quarantine
// (sanitizer.quarantined), which takes s.mu again: the goroutine waits
// for itself, holding the pool's lock and every queue cache's, so every
// other user of the pool hangs too. Here the finding is a LeakedAtClose
// at the pool's Close (sanitizer.poolClosing). The doc says a hook "may
// call the pool's read-only methods (Stats)", and WithSanitizerOutput
// only that "A w that panics is called no more"; a writer is the
// sanitizer's callback as a hook is the pool's, and nothing says it may
// not read the pool (a program's logger that adds the pool's figures to
// each line). Either the writer is called outside s.mu, or the doc must
// forbid it.
func TestHostileS39eSanitizerOutputReadsStats(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	w := &s39eStatsWriter{}
	p, err := mempool.New(imm, mempool.WithSanitizer(), mempool.WithSanitizerOutput(w))
	require.NoError(t, err)
	w.pool.Store(p)
	b, err := p.Allocate(1000)
	require.NoError(t, err)
	if !s39eWithin(t, "Close of a sanitized pool whose output writer reads Stats", func() {
		assert.NoError(t, p.Close()) // b still open: a LeakedAtClose finding, printed
	}) {
		return // the pool is locked for good: touch nothing of it
	}
	assert.NoError(t, b.Close())
	assert.Positive(t, w.lines.Load(), "the finding was printed")
	findings := p.Findings()
	require.Len(t, findings, 1)
	assert.Equal(t, mempool.LeakedAtClose, findings[0].Kind)
}

// PASSES (coverage): hooks that read the pool (Stats and Snapshot) on
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
			s39eWithin(t, "goroutines whose hooks read the pool", func() {
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

// FAILS (hang): the same deadlock on the runtime's finalizer goroutine.
// A sanitized pool reports a Dropped finding when the finalizer gives
// back a PooledBuffer dropped without Close (giveBackSanitized, under
// s.mu); the writer's Stats deadlocks there, holding the pool's lock: the
// next Stats (or Allocate) of any goroutine hangs, and so does every
// finalizer of the program after it.
func TestHostileS39eSanitizerOutputReadsStatsOnDrop(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	w := &s39eStatsWriter{}
	p, err := mempool.New(imm, mempool.WithSanitizer(), mempool.WithSanitizerOutput(w))
	require.NoError(t, err)
	w.pool.Store(p)
	func() {
		b, err := p.Allocate(1000)
		require.NoError(t, err)
		_ = b // dropped without Close
	}()
	if !s39eWithin(t, "Stats after a dropped buffer's finalizer printed its finding", func() {
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
