package mempool_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// policies are the pool's two policies, for tests that run over both.
var policies = []struct {
	name string
	opts []mempool.Option
}{
	{"bins", []mempool.Option{mempool.WithoutQueueCaches()}},
	{"arena", []mempool.Option{mempool.WithArena(), mempool.WithoutQueueCaches()}},
	// Blocks given back wait in their queue's cache (here without drop
	// safety; the tests that use the default options cover it with).
	{"bins/cached", []mempool.Option{mempool.WithDropSafety(false)}},
	{"arena/cached", []mempool.Option{mempool.WithArena(), mempool.WithDropSafety(false)}},
	// The default: drop safety, and blocks wait in their queue's cache.
	{"bins/default", nil},
}

// allOnes returns n ones.
func allOnes(n int) []int32 {
	xs := make([]int32, n)
	for i := range xs {
		xs[i] = 1
	}
	return xs
}

// fillWait fills b's block with v on q and waits for it.
func fillWait(t *testing.T, q *cl.CommandQueue, b *mempool.PooledBuffer, v int32) {
	t.Helper()
	fill, err := q.EnqueueFillBuffer(b.Base(), cl.Bytes([]int32{v}), b.Offset(), b.Size())
	require.NoError(t, err)
	require.NoError(t, fill.Wait())
	require.NoError(t, fill.Release())
}

// slowReadCorrupted reads the n results of cltest.SlowRead from out
// through q and reports whether any differs from what iters reads of ones
// give: whether a reuse overwrote the kernel's input while it ran.
func slowReadCorrupted(t *testing.T, q *cl.CommandQueue, out *cl.Buffer, n, iters int) bool {
	t.Helper()
	got := make([]int32, n)
	require.NoError(t, q.ReadBuffer(out, 0, cl.Bytes(got)))
	for _, v := range got {
		if v != int32(iters) {
			return true
		}
	}
	return false
}

// PyOpenCL #447: a buffer closed right after a slow kernel on queue A is
// enqueued, then taken by queue B and overwritten there, must not change
// what the kernel reads. Before queue-ordered reuse this corrupted 10 of
// 10 results on POCL, which runs queues concurrently. With an arena's
// queue caches, the rest of the block's segment is taken first, so that
// B's request misses, drains A's cache and gets the block from there.
func TestCrossQueueReuseWaitsForTheKernel(t *testing.T) {
	for _, pol := range policies {
		t.Run(pol.name, func(t *testing.T) {
			f := newFixture(t, nil, pol.opts...)
			qa, qb := f.q, cltest.SecondQueue(t, f.q, 0)
			k := cltest.SlowReadKernel(t, qa)
			n, iters := 64, cltest.Size(qa, 100, 1000000)
			trials := cltest.Size(qa, 3, 10)
			ones := allOnes(n)
			out, err := qa.Context().CreateBuffer(cl.MemReadWrite, int64(4*n))
			require.NoError(t, err)
			defer out.Release()

			corrupted := 0
			for range trials {
				// 4 KiB, not the kernel's 256 bytes: a tiny request's
				// segment (see policy.TinyBlock) serves no other, which
				// fillSegmentOf needs.
				x, err := f.pool.On(qa).Allocate(4096)
				require.NoError(t, err)
				var fill []*mempool.PooledBuffer
				if pol.name == "arena/cached" {
					fill = fillSegmentOf(t, f.pool, x)
				}
				require.NoError(t, qa.WriteBuffer(x.Base(), x.Offset(), cl.Bytes(ones)))
				require.NoError(t, k.SetArgs(x.Buffer(), out, int32(iters)))
				require.NoError(t, qa.EnqueueKernel(k, []int{n}, nil))
				require.NoError(t, qa.Flush())
				base, off := x.Base(), x.Offset()
				require.NoError(t, x.Close()) // legal right after the enqueue

				y, err := f.pool.On(qb).Allocate(4096)
				require.NoError(t, err)
				require.Same(t, base, y.Base(), "the test must exercise reuse")
				require.Equal(t, off, y.Offset())
				fillWait(t, qb, y, 7)
				require.NoError(t, y.Close())

				if slowReadCorrupted(t, qa, out, n, iters) {
					corrupted++
				}
				for _, b := range fill {
					require.NoError(t, b.Close())
				}
			}
			assert.Zero(t, corrupted, "results corrupted by a reuse on another queue, of %d", trials)
			s := f.pool.Stats()
			require.Len(t, s.Queues, 2)
			qs := s.Queues[1]
			assert.Same(t, qb, qs.Queue)
			assert.Equal(t, int64(trials), qs.Handovers)
			assert.Equal(t, int64(trials), qs.Ready+qs.Barriers)
			assert.Positive(t, s.Queues[0].Markers)
		})
	}
}

// Reuse on the same in-order queue needs no marker; a queue's
// allocations after a handover reuse the marker while it covers them.
func TestSameQueueReuseMakesNoMarker(t *testing.T) {
	for _, pol := range policies {
		t.Run(pol.name, func(t *testing.T) {
			f := newFixture(t, nil, pol.opts...)
			on := f.pool.On(f.q)
			for range 10 {
				b, err := on.Allocate(4096)
				require.NoError(t, err)
				assert.Same(t, f.q, b.Queue())
				require.NoError(t, b.Close())
			}
			s := f.pool.Stats()
			require.Len(t, s.Queues, 1)
			qs := s.Queues[0]
			assert.LessOrEqual(t, qs.Cached, int64(1), "the block waits in the queue's cache, if it has one")
			qs.Cached = 0
			assert.Equal(t, mempool.QueueStats{Queue: f.q, Requests: 10, Hits: 9}, qs)
		})
	}
}

// RecordQueue: a buffer allocated on A and also used on B is handed back
// to A only after B's commands.
func TestRecordQueueOrdersTheOtherQueue(t *testing.T) {
	for _, pol := range policies {
		t.Run(pol.name, func(t *testing.T) {
			f := newFixture(t, nil, pol.opts...)
			qa, qb := f.q, cltest.SecondQueue(t, f.q, 0)
			k := cltest.SlowReadKernel(t, qb)
			n, iters := 64, cltest.Size(qa, 100, 1000000)
			ones := allOnes(n)
			out, err := qa.Context().CreateBuffer(cl.MemReadWrite, int64(4*n))
			require.NoError(t, err)
			defer out.Release()

			x, err := f.pool.On(qa).Allocate(int64(4 * n))
			require.NoError(t, err)
			require.NoError(t, qa.WriteBuffer(x.Base(), x.Offset(), cl.Bytes(ones)))
			require.NoError(t, x.RecordQueue(qb))
			require.NoError(t, x.RecordQueue(qb), "twice is once")
			require.NoError(t, x.RecordQueue(qa), "its own queue: nothing to record")
			require.NoError(t, k.SetArgs(x.Buffer(), out, int32(iters)))
			require.NoError(t, qb.EnqueueKernel(k, []int{n}, nil))
			require.NoError(t, qb.Flush())
			require.NoError(t, x.Close())
			assert.ErrorIs(t, x.RecordQueue(qb), mempool.ErrClosed)

			y, err := f.pool.On(qa).Allocate(int64(4 * n))
			require.NoError(t, err)
			fillWait(t, qa, y, 7)
			require.NoError(t, y.Close())
			got := make([]int32, n)
			require.NoError(t, qb.ReadBuffer(out, 0, cl.Bytes(got)))
			for i := range got {
				require.Equal(t, int32(iters), got[i], "element %d", i)
			}
			assert.Equal(t, int64(1), f.pool.Stats().Queues[0].Handovers)
		})
	}
}

// An out-of-order queue's own reuse goes through a marker and a barrier.
func TestOutOfOrderQueueReuseIsOrdered(t *testing.T) {
	f := newFixture(t, nil)
	ooo := cltest.SecondQueue(t, f.q, cl.QueueOutOfOrder)
	on := f.pool.On(ooo)
	for range 3 {
		b, err := on.Allocate(4096)
		require.NoError(t, err)
		require.NoError(t, ooo.WriteBuffer(b.Base(), b.Offset(), []byte{1, 2, 3, 4}))
		require.NoError(t, b.Close())
	}
	require.NoError(t, ooo.Finish())
	qs := queueStats(t, f.pool.Stats(), ooo)
	assert.Equal(t, int64(2), qs.Handovers, "every reuse on an out-of-order queue")
	assert.Equal(t, int64(2), qs.Ready+qs.Barriers)
}

// A request on no queue (pool.Allocate over an allocator without one)
// waits on the host for a block last used on a queue.
func TestNoQueueRequestWaitsOnTheHost(t *testing.T) {
	// The wrapper shows the allocator's methods only: not its queue.
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator { return struct{ allocator.Allocator }{a} })
	b, err := f.pool.On(f.q).Allocate(4096)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	c, err := f.pool.Allocate(4096)
	require.NoError(t, err)
	assert.Nil(t, c.Queue())
	require.NoError(t, c.Close())
	qs := f.pool.Stats().Queues[0]
	assert.Equal(t, int64(1), qs.Markers, "a marker on the queue it was last used on")
	assert.LessOrEqual(t, qs.HostWaits, int64(1), "waited for unless complete already (Oclgrind runs commands at once)")
	assert.Equal(t, int64(1), f.pool.Stats().Hits)
}

func TestOnMisuse(t *testing.T) {
	f := newFixture(t, nil)
	_, err := f.pool.On(nil).Allocate(8)
	assert.ErrorIs(t, err, cl.ErrInvalidCommandQueue)
	other, err := cl.DefaultQueue()
	require.NoError(t, err)
	defer other.Release()
	imm, err := allocator.NewImmediate(f.q, cl.MemReadWrite)
	require.NoError(t, err)
	p, err := mempool.New(imm)
	require.NoError(t, err)
	defer p.Close()
	_, err = p.On(other).Allocate(8)
	assert.ErrorIs(t, err, mempool.ErrQueueMismatch)
	assert.ErrorIs(t, p.On(other).FreeHeld(), mempool.ErrQueueMismatch)
	b, err := p.Allocate(8)
	require.NoError(t, err)
	assert.Same(t, f.q, b.Queue(), "pool.Allocate is on the allocator's queue")
	assert.ErrorIs(t, b.RecordQueue(other), mempool.ErrQueueMismatch)
	assert.ErrorIs(t, b.RecordQueue(nil), cl.ErrInvalidCommandQueue)
	require.NoError(t, b.Close())
	var nilBuf *mempool.PooledBuffer
	assert.ErrorIs(t, nilBuf.Close(), mempool.ErrClosed)
	assert.ErrorIs(t, nilBuf.RecordQueue(f.q), mempool.ErrClosed)
}

// FreeHeld of one queue frees only the segments only it may still use.
func TestQueueFreeHeld(t *testing.T) {
	for _, pol := range policies {
		t.Run(pol.name, func(t *testing.T) {
			f := newFixture(t, nil, pol.opts...)
			qb := cltest.SecondQueue(t, f.q, 0)
			a, err := f.pool.On(f.q).Allocate(4 << 20)
			require.NoError(t, err)
			b, err := f.pool.On(qb).Allocate(8 << 20)
			require.NoError(t, err)
			require.NoError(t, a.Close())
			require.NoError(t, b.Close())
			before := f.pool.ManagedBytes()
			require.NoError(t, f.pool.On(qb).FreeHeld())
			after := f.pool.ManagedBytes()
			assert.Less(t, after, before)
			assert.GreaterOrEqual(t, after, int64(4<<20), "queue A's segment stays")
			require.NoError(t, f.pool.On(f.q).FreeHeld())
			assert.Zero(t, f.pool.ManagedBytes())
		})
	}
}

// Eight goroutines on eight queues share one pool: counters stay
// consistent, memory is reused across queues, every device buffer is
// freed exactly once (newFixture checks), and no data race (-race).
func TestEightQueuesStress(t *testing.T) {
	for _, pol := range policies {
		t.Run(pol.name, func(t *testing.T) {
			f := newFixture(t, nil, pol.opts...)
			const goroutines = 8
			rounds := cltest.Size(f.q, 20, 200)
			var wg sync.WaitGroup
			errs := make(chan error, goroutines)
			for g := range goroutines {
				q := cltest.SecondQueue(t, f.q, 0)
				wg.Add(1)
				go func() {
					defer wg.Done()
					on := f.pool.On(q)
					for i := range rounds {
						size := int64(1024 << ((g + i) % 6))
						b, err := on.Allocate(size)
						if err != nil {
							errs <- err
							return
						}
						if err := q.WriteBuffer(b.Base(), b.Offset(), []byte{byte(g), byte(i)}); err != nil {
							errs <- fmt.Errorf("goroutine %d: %w", g, err)
							return
						}
						if err := b.Close(); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			s := f.pool.Stats()
			require.Len(t, s.Queues, goroutines+1, "the allocator's queue, and the goroutines'")
			var requests, hits, handovers int64
			for _, qs := range s.Queues {
				requests += qs.Requests
				hits += qs.Hits
				handovers += qs.Handovers
				assert.GreaterOrEqual(t, qs.Ready+qs.Barriers, qs.Handovers, "a merged block may wait for several queues")
			}
			assert.Equal(t, int64(goroutines*rounds), requests)
			assert.Equal(t, s.Hits, hits)
			assert.Equal(t, requests, s.Hits+s.Misses)
			assert.Zero(t, s.ActiveBlocks)
			assert.Less(t, s.DeviceAllocs, int64(goroutines*6), "memory is reused across queues, not kept apart")
			t.Logf("%d requests, %d hits, %d handovers, %d device allocations", requests, hits, handovers, s.DeviceAllocs)
		})
	}
}
