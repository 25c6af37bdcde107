package mempool_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
)

// A queue per task, with the sanitizer: each task makes a queue, allocates
// on it, writes in bounds, hands one buffer to a closer goroutine (closed
// on another goroutine, possibly after its queue's release), closes the
// rest, and releases its queue; beside it, a poller reads Findings, Stats,
// Snapshot and frees what is held. Every write is in bounds: nothing may
// hang, fail, or be reported, and every device allocation is freed once.
func TestHostileS36cQueuePerTaskSanitizerStress(t *testing.T) {
	for _, tc := range []struct {
		arena bool
		props cl.QueueProperties
	}{{false, 0}, {true, 0}, {false, cl.QueueOutOfOrder}, {true, cl.QueueOutOfOrder}} {
		t.Run(fmt.Sprintf("arena=%v/props=%v", tc.arena, tc.props), func(t *testing.T) {
			out := &syncBuffer{}
			opts := append(policyOptions(tc.arena), mempool.WithSanitizer(), mempool.WithSanitizerOutput(out))
			f := newFixture(t, nil, opts...)
			shared := cltest.SecondQueue(t, f.q, 0)
			tasks := cltest.Size(f.q, 10, 60)
			var sink errSink
			fail := sink.add
			toClose := make(chan *mempool.PooledBuffer, 64)
			var done atomic.Bool
			ok := withinWork(t, "the workload", func() {
				var closers, workers, pollers sync.WaitGroup
				closers.Go(func() {
					for b := range toClose {
						fail(b.Close())
					}
				})
				pollers.Go(func() {
					for !done.Load() {
						_ = f.pool.Findings()
						_ = f.pool.Stats()
						_ = f.pool.Snapshot()
						fail(f.pool.FreeHeld())
					}
				})
				for g := range 3 {
					workers.Go(func() {
						for i := range tasks {
							q, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), tc.props)
							if err != nil {
								fail(err)
								return
							}
							a := f.pool.On(q)
							var bs []*mempool.PooledBuffer
							for k := range 3 {
								size := int64(100 + 997*((g+i+k)%7))
								b, err := a.Allocate(size)
								if err != nil {
									fail(fmt.Errorf("task %d/%d: Allocate: %w", g, i, err))
									continue
								}
								ev, err := q.EnqueueFillBuffer(b.Buffer(), []byte{byte(i)}, 0, size)
								if err != nil {
									fail(err)
								} else {
									_ = ev.Release()
								}
								if k == 1 {
									fail(b.RecordQueue(shared))
								}
								bs = append(bs, b)
							}
							if tc.props != 0 {
								fail(q.Finish())
							} else {
								fail(q.Flush())
							}
							for k, b := range bs {
								if k == 0 {
									toClose <- b
								} else {
									fail(b.Close())
								}
							}
							fail(q.Release())
						}
					})
				}
				workers.Wait()
				close(toClose)
				closers.Wait()
				done.Store(true)
				pollers.Wait()
			})
			if !ok {
				return
			}
			assert.NoError(t, sink.err())
			assert.Empty(t, f.pool.Findings(), "every write was in bounds")
			assert.NotContains(t, out.String(), "cannot check")
			s := f.pool.Stats()
			snap := f.pool.Snapshot()
			act, held, inact, hb := s36aSnapCounts(snap)
			assert.Zero(t, act)
			assert.Equal(t, s.HeldBlocks, held+inact, "Stats and Snapshot: held blocks")
			assert.Equal(t, s.HeldBytes, hb, "Stats and Snapshot: held bytes")
			checkSnapshot(t, snap)
			pooltest.CheckStats(t, s)
			assert.NoError(t, mempool.CheckBlockCounts(f.pool))
			var req int64
			for _, qs := range s.Queues {
				req += qs.Requests
			}
			assert.Equal(t, int64(3*3*tasks), req, "requests, per queue lines summed")
			assert.Equal(t, 0, s.ActiveBlocks)
			assert.LessOrEqual(t, statesAfterNextQueue(t, f.pool, f.q), 2*mempool.ForgetMin+2)
			if strings.TrimSpace(out.String()) != "" {
				t.Logf("sanitizer output:\n%s", out.String())
			}
		})
	}
}

// Tasks whose buffers are declared used on other tasks' live queues
// (RecordQueue), each task running a slow kernel before it closes its
// buffers, hands one to another goroutine, and releases its queue, while
// a poller calls Findings: the sanitizer orders each Close after other
// tasks' queues, which are being released at any time. Nothing may hang.
func TestHostileS36cCrossTaskReleasesWithSlowKernels(t *testing.T) {
	out := &syncBuffer{}
	f := newFixture(t, nil, mempool.WithSanitizer(), mempool.WithSanitizerOutput(out))
	const n = 64
	iters := int32(cltest.Size(f.q, 2000, 100000))
	x, err := f.q.Context().CreateBuffer(cl.MemReadWrite, 4*n)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Release()
	scratch, err := f.q.Context().CreateBuffer(cl.MemReadWrite, 4*n)
	if err != nil {
		t.Fatal(err)
	}
	defer scratch.Release()
	prog, err := f.q.Context().BuildProgram(cltest.SlowRead, "")
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Release()
	const workers = 4
	var cur [workers]atomic.Pointer[cl.CommandQueue]
	var sink errSink
	fail := sink.add
	toClose := make(chan *mempool.PooledBuffer, 64)
	var stop atomic.Bool
	tasks := cltest.Size(f.q, 5, 40)
	ok := withinWork(t, "cross-task closes and releases", func() {
		var wg, side sync.WaitGroup
		side.Go(func() {
			for b := range toClose {
				fail(b.Close())
			}
		})
		side.Go(func() {
			for !stop.Load() {
				_ = f.pool.Findings()
				_ = f.pool.Stats()
			}
		})
		for g := range workers {
			wg.Go(func() {
				k, err := prog.Kernel("slow_read")
				if err != nil {
					fail(err)
					return
				}
				defer k.Release()
				for i := range tasks {
					q, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
					if err != nil {
						fail(err)
						return
					}
					cur[g].Store(q)
					var bs []*mempool.PooledBuffer
					for j := range 2 {
						b, err := f.pool.On(q).Allocate(int64(1024 * (1 + (i+j)%4)))
						if err != nil {
							fail(err)
							continue
						}
						if o := cur[(g+1+j)%workers].Load(); o != nil && o != q {
							if err := b.RecordQueue(o); err != nil {
								fail(fmt.Errorf("RecordQueue: %w", err))
							}
						}
						bs = append(bs, b)
					}
					fail(k.SetArgs(x, scratch, iters))
					fail(q.EnqueueKernel(k, []int{n}, nil))
					fail(q.Flush())
					for j, b := range bs {
						if j == 0 {
							toClose <- b
						} else {
							fail(b.Close())
						}
					}
					cur[g].Store(nil)
					fail(q.Release())
				}
			})
		}
		wg.Wait()
		close(toClose)
		stop.Store(true)
		side.Wait()
	})
	if !ok {
		return
	}
	assert.NoError(t, sink.err())
	assert.NotContains(t, out.String(), "cannot check")
	assert.Empty(t, f.pool.Findings())
}
