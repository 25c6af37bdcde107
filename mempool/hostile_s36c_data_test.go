package mempool_test

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
)

// Tasks on goroutines of their own, each with a queue of its own: it
// allocates, writes a value of its own slowly-after a slow kernel, reads
// its block back, and checks that it holds its value only (no other task
// had the block meanwhile); half its buffers are closed by a consumer
// goroutine after the task released its queue. A hook reads Stats on
// every event. Buffer and SVM pools, sanitizer on.
func TestHostileS36cQueuePerTaskDataIntegrity(t *testing.T) {
	for _, svm := range []bool{false, true} {
		for _, arena := range []bool{false, true} {
			t.Run(fmt.Sprintf("svm=%v/arena=%v", svm, arena), func(t *testing.T) {
				out := &syncBuffer{}
				opts := append(policyOptions(arena), mempool.WithSanitizer(), mempool.WithSanitizerOutput(out))
				var pool *mempool.Pool
				var ctxq *cl.CommandQueue
				if svm {
					sf := newSVMFixture(t, false, nil, opts...)
					pool, ctxq = sf.pool, sf.q
				} else {
					f := newFixture(t, nil, opts...)
					pool, ctxq = f.pool, f.q
				}
				remove := pool.AddHook(mempool.HookFunc(func(e mempool.Event) { _ = pool.Stats() }))
				defer remove()
				tasks := cltest.Size(ctxq, 8, 40)
				var sink errSink
				fail := sink.add
				toClose := make(chan *mempool.PooledBuffer, 256)
				var mapMu sync.Mutex
				ok := withinWork(t, "the tasks", func() {
					var closers, workers sync.WaitGroup
					closers.Go(func() {
						for b := range toClose {
							fail(b.Close())
						}
					})
					for g := range 3 {
						workers.Go(func() {
							for i := range tasks {
								v := byte(1 + (g*tasks+i)%250)
								q, err := cl.NewCommandQueue(ctxq.Context(), ctxq.Device(), 0)
								if err != nil {
									fail(err)
									return
								}
								size := int64(256 << ((g + i) % 5))
								b, err := pool.On(q).Allocate(size)
								if err != nil {
									fail(fmt.Errorf("task %d/%d: %w", g, i, err))
									fail(q.Release())
									continue
								}
								var ev *cl.Event
								if svm {
									ev, err = q.EnqueueSVMMemFill(b.SVM(), []byte{v}, b.Offset(), size)
								} else {
									ev, err = q.EnqueueFillBuffer(b.Base(), []byte{v}, b.Offset(), size)
								}
								if err == nil {
									_ = ev.Release()
								}
								fail(err)
								got := make([]byte, size)
								if svm {
									// One map of an SVM at a time (cl's EnqueueSVMMap doc).
									mapMu.Lock()
									host, err := q.EnqueueSVMMap(b.SVM(), false, b.Offset(), size)
									if err == nil {
										copy(got, host)
										fail(q.EnqueueSVMUnmap(b.SVM()))
									}
									fail(err)
									fail(q.Finish())
									mapMu.Unlock()
								} else {
									_, err := q.EnqueueReadBuffer(b.Base(), true, b.Offset(), got)
									fail(err)
								}
								if want := bytes.Repeat([]byte{v}, int(size)); !bytes.Equal(got, want) {
									fail(fmt.Errorf("task %d/%d: its block holds another's bytes", g, i))
								}
								if i%2 == 0 {
									fail(b.Close())
									fail(q.Release())
								} else {
									fail(q.Release())
									toClose <- b
								}
							}
						})
					}
					workers.Wait()
					close(toClose)
					closers.Wait()
				})
				if !ok {
					return
				}
				assert.NoError(t, sink.err())
				assert.Empty(t, pool.Findings())
				assert.False(t, strings.Contains(out.String(), "cannot check"), out.String())
				assert.Equal(t, 0, pool.Stats().ActiveBlocks)
			})
		}
	}
}
