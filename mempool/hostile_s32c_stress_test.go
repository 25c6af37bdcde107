package mempool_test

// Hostile tests (s32c) of many goroutines on several queues (in order
// and out of order) sharing a pool, with Stats and Snapshot readers.

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkSnapshot checks what one Snapshot must say of itself: its
// segments' sizes sum to ManagedBytes ("the segments' bytes"), the
// blocks of each segment tile it in offset order, and the active blocks'
// requested bytes sum to ActiveBytes; the peaks are at least the
// current figures.
func checkSnapshot(tb testing.TB, s mempool.Snapshot) {
	tb.Helper()
	var managed, active int64
	for _, seg := range s.Segments {
		managed += seg.Size
		var off int64
		for _, b := range seg.Blocks {
			if !assert.Equal(tb, off, b.Offset, "segment %d: blocks tile it", seg.ID) {
				return
			}
			off += b.Size
			if b.State == mempool.StateActive {
				active += b.Requested
			}
		}
		assert.Equal(tb, seg.Size, off, "segment %d: blocks cover it", seg.ID)
	}
	assert.Equal(tb, s.ManagedBytes, managed, "ManagedBytes is the segments' bytes")
	assert.Equal(tb, s.ActiveBytes, active, "ActiveBytes is the active blocks' requested bytes")
	assert.GreaterOrEqual(tb, s.PeakManagedBytes, s.ManagedBytes)
	assert.GreaterOrEqual(tb, s.PeakActiveBytes, s.ActiveBytes)
}

// Holds (passing exploration): six goroutines, two on each of three
// queues (two in order, one out of order), each holding up to three
// blocks of random sizes at once, while one goroutine reads Stats
// (pooltest.CheckStats, and per-queue sums) and another takes Snapshots
// and FreeHeld. At the end every count is exact: requests per queue,
// hits plus misses, allocations and frees, bytes back to zero, and (the
// fixture checks) every device buffer freed once.
func TestHostileS32cManyGoroutinesSeveralQueuesCountsExact(t *testing.T) {
	for _, pol := range []struct {
		name string
		opts []mempool.Option
	}{
		{"bins", nil},
		{"arena", []mempool.Option{mempool.WithArena()}},
		{"arena/nodrop", []mempool.Option{mempool.WithArena(), mempool.WithDropSafety(false)}},
	} {
		t.Run(pol.name, func(t *testing.T) {
			q := cltest.Queue(t)
			queues := []*cl.CommandQueue{cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, cl.QueueOutOfOrder)}
			p := pooltest.New(t, q, pol.opts...)
			const perQueue, hold = 2, 3
			rounds := cltest.Size(q, 50, 400)
			sizes := []int64{0, 1, 100, 256, 512, 4096, 5000, 65536, 1 << 20, 3 << 20}
			var peakHeld atomic.Int64 // blocks open at once, as the workers see them
			var open atomic.Int64
			stop := pooltest.ReadStats(t, p, func(i int) {
				s := p.Stats()
				var req, hits int64
				for _, qs := range s.Queues {
					req += qs.Requests
					hits += qs.Hits
					assert.LessOrEqual(t, qs.Hits, qs.Requests)
				}
				assert.Equal(t, s.Hits, hits, "the queues' hits are the pool's (every request is on a queue)")
				assert.Equal(t, s.Hits+s.Misses, req, "every request is a hit or a miss")
				if i%4 == 0 {
					checkSnapshot(t, p.Snapshot())
				}
				if i%16 == 0 {
					assert.NoError(t, p.FreeHeld())
				}
			})
			var wg sync.WaitGroup
			errs := make(chan error, len(queues)*perQueue)
			perQ := make([]atomic.Int64, len(queues))
			for qi, qu := range queues {
				for g := range perQueue {
					wg.Go(func() {
						r := rand.New(rand.NewPCG(uint64(qi), uint64(g)))
						on := p.On(qu)
						var bs []*mempool.PooledBuffer
						for i := range rounds {
							if i%16 == 15 {
								// POCL's out-of-order queue slows down with
								// every pending command (the pool's markers and
								// barriers): let it drain now and then.
								if err := qu.Finish(); err != nil {
									errs <- err
									return
								}
							}
							n := 1 + r.IntN(hold)
							for range n {
								b, err := on.Allocate(sizes[r.IntN(len(sizes))])
								if err != nil {
									errs <- fmt.Errorf("queue %d: %w", qi, err)
									return
								}
								perQ[qi].Add(1)
								bs = append(bs, b)
								o := open.Add(1)
								for {
									old := peakHeld.Load()
									if o <= old || peakHeld.CompareAndSwap(old, o) {
										break
									}
								}
							}
							for _, b := range bs {
								open.Add(-1)
								if err := b.Close(); err != nil {
									errs <- err
									return
								}
							}
							bs = bs[:0]
						}
					})
				}
			}
			wg.Wait()
			stop()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			s := p.Stats()
			var total int64
			for qi, qu := range queues {
				qs := queueStats(t, s, qu)
				assert.Equal(t, perQ[qi].Load(), qs.Requests, "queue %d's requests", qi)
				total += perQ[qi].Load()
			}
			assert.Equal(t, total, s.Hits+s.Misses)
			assert.Equal(t, total, s.Allocation.All.Allocated)
			assert.Equal(t, total, s.Allocation.All.Freed)
			assert.Zero(t, s.ActiveBlocks)
			assert.Zero(t, s.ActiveBytes)
			assert.Zero(t, s.AllocatedBytes.All.Current)
			assert.Equal(t, s.AllocatedBytes.All.Allocated, s.AllocatedBytes.All.Freed)
			assert.Equal(t, s.RequestedBytes.All.Allocated, s.RequestedBytes.All.Freed)
			assert.GreaterOrEqual(t, s.Allocation.All.Peak, int64(hold), "some goroutine held three at once")
			checkSnapshot(t, p.Snapshot())
			t.Logf("%d requests, %d hits, peak %d blocks (workers saw %d)", total, s.Hits, s.Allocation.All.Peak, peakHeld.Load())
		})
	}
}
