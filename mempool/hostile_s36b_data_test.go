package mempool_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tasks with a queue each, on several goroutines: each task fills its
// blocks with its own byte and reads them back (they must hold it), then
// enqueues a late write (a slow kernel, then a fill of 0xEE), closes its
// blocks and releases its queue. Another task that takes a block before
// the late write ran must come after it (a marker on the releasing queue,
// or its Release's finish): it must never read 0xEE. Nothing may fail,
// the pool forgets the queues, and its counts stay right.
func TestHostileS36bQueuePerTaskDataAndCounts(t *testing.T) {
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			f := newFixture(t, nil, policyOptions(arena)...)
			const n = 64
			iters := int32(cltest.Size(f.q, 10, 200000))
			tasks := cltest.Size(f.q, 4, 120)
			const gs = 3
			ks := make([]*cl.Kernel, gs)
			outs := make([]*cl.Buffer, gs)
			for g := range gs {
				ks[g] = cltest.SlowReadKernel(t, f.q)
				b, err := f.q.Context().CreateBuffer(cl.MemReadWrite, 4*n)
				require.NoError(t, err)
				t.Cleanup(func() { b.Release() })
				outs[g] = b
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			var errs []error
			var bad, allocs atomic.Int64
			fail := func(err error) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			for g := range gs {
				wg.Go(func() {
					for i := range tasks {
						q, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
						if err != nil {
							fail(err)
							return
						}
						a := f.pool.On(q)
						var bs []*mempool.PooledBuffer
						for j := range 3 {
							size := int64(1024 << ((g + i + j) % 6))
							b, err := a.Allocate(size)
							if err != nil {
								fail(err)
								continue
							}
							allocs.Add(1)
							mine := byte(1 + (g*31+i*7+j)%200)
							ev, err := q.EnqueueFillBuffer(b.Buffer(), []byte{mine}, 0, size)
							if err != nil {
								fail(err)
							} else {
								_ = ev.Release()
							}
							got := make([]byte, size)
							if err := q.ReadBuffer(b.Buffer(), 0, got); err != nil {
								fail(err)
							}
							for _, c := range got {
								if c != mine {
									bad.Add(1)
									break
								}
							}
							// The late write.
							if err := ks[g].SetArgs(b.Buffer(), outs[g], iters); err != nil {
								fail(err)
							} else if err := q.EnqueueKernel(ks[g], []int{n}, nil); err != nil {
								fail(err)
							}
							if ev, err := q.EnqueueFillBuffer(b.Buffer(), []byte{0xEE}, 0, size); err != nil {
								fail(err)
							} else {
								_ = ev.Release()
							}
							bs = append(bs, b)
						}
						_ = q.Flush()
						for _, b := range bs {
							if err := b.Close(); err != nil {
								fail(err)
							}
						}
						if i%4 == 0 {
							_ = f.pool.FreeHeld()
						}
						if err := q.Release(); err != nil {
							fail(err)
						}
					}
				})
			}
			require.True(t, withinWork(t, "the tasks", wg.Wait))
			for _, err := range errs[:min(len(errs), 3)] {
				assert.NoError(t, err)
			}
			assert.Zero(t, bad.Load(), "blocks that did not hold their task's own fill (another task's late write)")
			require.NoError(t, mempool.CheckBlockCounts(f.pool))
			s := f.pool.Stats()
			var requests, cached int64
			for _, q := range s.Queues {
				requests += q.Requests
				cached += q.Cached
			}
			assert.Equal(t, allocs.Load(), requests, "requests over Stats.Queues")
			assert.Len(t, s.Queues, gs*tasks+1, "a line per queue")
			assert.Zero(t, s.ActiveBlocks, "active blocks")
			snap := f.pool.Snapshot()
			var managed, held int64
			for _, seg := range snap.Segments {
				managed += seg.Size
				for _, b := range seg.Blocks {
					assert.NotEqual(t, mempool.StateActive, b.State, "an active block in the snapshot, none open")
					held += b.Size
				}
			}
			assert.Equal(t, s.ManagedBytes, managed, "Stats.ManagedBytes vs the snapshot's segments")
			assert.Equal(t, s.HeldBytes, held, "Stats.HeldBytes vs the snapshot's blocks")
			assert.LessOrEqual(t, statesAfterNextQueue(t, f.pool, f.q), 2*mempool.ForgetMin+gs+2, "queue states kept")
		})
	}
}
