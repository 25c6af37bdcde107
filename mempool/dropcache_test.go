package mempool_test

import (
	"math/rand/v2"
	"runtime"
	"sync"
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

// Under a limit, dropped buffers that the out-of-memory ladder's GC pass
// brings back must make room: reserve collects them after its one drain of
// the queue caches, and with drop safety they land in a queue cache (on
// the default queue), where TakeLargest cannot see them until drained.
func TestLimitReclaimedIntoCacheMakesRoom(t *testing.T) {
	limit := 2 * allocSize(4096)
	f := newFixture(t, nil, mempool.WithLimit(limit))
	func() {
		for range 2 {
			_, err := f.pool.Allocate(4096) // dropped, never closed
			require.NoError(t, err)
		}
	}()
	require.LessOrEqual(t, allocSize(8000), limit)
	b, err := f.pool.Allocate(8000)
	require.NoError(t, err, "the GC pass brings the dropped blocks back, and they are freed to make room")
	require.NoError(t, b.Close())
}

// Same with Pool.On: the reclaimed blocks go to the queue's cache.
func TestLimitReclaimedIntoQueueCacheMakesRoom(t *testing.T) {
	limit := 2 * allocSize(4096)
	f := newFixture(t, nil, mempool.WithLimit(limit))
	on := f.pool.On(cltest.SecondQueue(t, f.q, 0))
	func() {
		for range 2 {
			_, err := on.Allocate(4096)
			require.NoError(t, err)
		}
	}()
	b, err := on.Allocate(2000) // another bin: no cache hit possible
	require.NoError(t, err, "the GC pass brings the dropped blocks back, and one is freed to make room")
	require.NoError(t, b.Close())
}

// After a device out-of-memory, the GC pass's dropped block of the right
// size should serve the request (allocateBlock's GetOn after
// collectDropped), not be freed and re-allocated.
func TestDeviceOOMReusesReclaimedBlock(t *testing.T) {
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator { return allocator.NewBudget(a, allocSize(4096)) })
	func() {
		_, err := f.pool.Allocate(4096) // dropped, never closed
		require.NoError(t, err)
	}()
	b, err := f.pool.Allocate(4096)
	require.NoError(t, err)
	s := f.pool.Stats()
	assert.Equal(t, int64(1), s.Reclaimed)
	assert.Equal(t, int64(1), s.DeviceAllocs, "the reclaimed block served the request")
	assert.Zero(t, s.DeviceFrees, "the reclaimed block was freed and allocated again")
	require.NoError(t, b.Close())
}

// Many goroutines on a few queues, drop safety on, some buffers dropped,
// GC forced meanwhile, Stats and RecordQueue and FreeHeld racing; then
// every count adds up and (fixture cleanup) every device buffer is freed
// exactly once.
func TestDropSafetyQueuesStress(t *testing.T) {
	for _, arena := range []bool{false, true} {
		t.Run(map[bool]string{false: "bins", true: "arena"}[arena], func(t *testing.T) {
			opts := policyOptions(arena)
			f := newFixture(t, nil, opts...)
			qs := []*cl.CommandQueue{f.q, cltest.SecondQueue(t, f.q, 0), cltest.SecondQueue(t, f.q, 0)}
			ons := make([]*mempool.QueueAllocator, len(qs))
			for i, q := range qs {
				ons[i] = f.pool.On(q)
			}
			var allocs, drops atomic.Int64
			stopReading := pooltest.ReadStats(t, f.pool, func(i int) {
				switch i % 4 {
				case 0:
					runtime.GC()
				case 1:
					_ = f.pool.FreeHeld()
				}
				runtime.Gosched()
			})
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(uint64(w), 99))
					on := ons[w%len(ons)]
					var live []*mempool.PooledBuffer
					for range 1500 {
						if len(live) < 6 && rng.IntN(3) > 0 {
							b, err := on.Allocate(stressSizes[rng.IntN(len(stressSizes))])
							if !assert.NoError(t, err) {
								return
							}
							allocs.Add(1)
							if rng.IntN(8) == 0 {
								_ = b.RecordQueue(qs[rng.IntN(len(qs))])
							}
							live = append(live, b)
							continue
						}
						if len(live) == 0 {
							continue
						}
						i := rng.IntN(len(live))
						b := live[i]
						live = append(live[:i], live[i+1:]...)
						if rng.IntN(10) == 0 {
							drops.Add(1)
							continue
						}
						assert.NoError(t, b.Close())
						assert.ErrorIs(t, b.Close(), mempool.ErrClosed)
					}
					for _, b := range live {
						assert.NoError(t, b.Close())
					}
				}()
			}
			wg.Wait()
			stopReading()
			require.Eventually(t, func() bool {
				runtime.GC()
				return f.pool.ActiveBlocks() == 0
			}, 10*time.Second, 10*time.Millisecond, "dropped buffers come back")
			// Extra GCs: a finalizer left set on a buffer whose block went
			// back would give it back a second time.
			for range 5 {
				runtime.GC()
				time.Sleep(5 * time.Millisecond)
			}
			s := f.pool.Stats()
			assert.Equal(t, allocs.Load(), s.Hits+s.Misses)
			var requests int64
			for _, q := range s.Queues {
				requests += q.Requests
			}
			assert.Equal(t, allocs.Load(), requests)
			assert.Equal(t, drops.Load(), s.Reclaimed)
			assert.Zero(t, s.ActiveBlocks)
			assert.Zero(t, s.ActiveBytes)
			assert.Equal(t, s.HeldBytes, s.ManagedBytes)
			t.Logf("%d allocations: %d hits, %d misses, %d reclaimed, %d device allocs", allocs.Load(), s.Hits, s.Misses, s.Reclaimed, s.DeviceAllocs)
		})
	}
}

// Close of the pool racing finalizers and Closes on queues with caches.
func TestCloseRacesReclaim(t *testing.T) {
	for range 20 {
		q := cltest.Queue(t)
		imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
		require.NoError(t, err)
		count := allocator.NewCounting(imm)
		p, err := mempool.New(count)
		require.NoError(t, err)
		q2 := cltest.SecondQueue(t, q, 0)
		on := p.On(q2)
		var keep []*mempool.PooledBuffer
		func() {
			for i := range 64 {
				b, err := on.Allocate(int64(64 << (i % 6)))
				require.NoError(t, err)
				if i%2 == 0 {
					keep = append(keep, b)
				}
			}
		}()
		// Warm the cache: close and re-allocate half.
		for _, b := range keep[:len(keep)/2] {
			require.NoError(t, b.Close())
		}
		keep = keep[len(keep)/2:]
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); runtime.GC(); runtime.GC() }()
		go func() {
			defer wg.Done()
			for _, b := range keep {
				_ = b.Close()
			}
		}()
		require.NoError(t, p.Close())
		wg.Wait()
		require.Eventually(t, func() bool {
			runtime.GC()
			return p.ActiveBlocks() == 0
		}, 10*time.Second, 10*time.Millisecond)
		for range 3 {
			runtime.GC()
			time.Sleep(2 * time.Millisecond)
		}
		c := count.Stats()
		assert.Zero(t, c.Live, "device buffers never freed")
		assert.Zero(t, c.BadFrees, "device buffers freed twice")
		s := p.Stats()
		assert.Zero(t, s.HeldBlocks)
		assert.Equal(t, c.Frees, s.DeviceFrees)
	}
}

func allocSize(n int64) int64 { return mempool.AllocSize(mempool.BinNumber(n, 4), 4) }

// An OutOfMemoryError's figures count what the queue caches did since
// their last flush: a block given back into a cache shows as held, as
// Stats shows it, also when the request fails before any drain (one that
// could not fit the limit even in an empty pool) on another queue.
func TestOOMErrorFiguresSeeCaches(t *testing.T) {
	f := newFixture(t, nil, mempool.WithLimit(1<<20))
	b, err := f.pool.On(cltest.SecondQueue(t, f.q, 0)).Allocate(4096)
	require.NoError(t, err)
	require.NoError(t, b.Close())     // into the second queue's cache
	_, err = f.pool.Allocate(2 << 20) // on the first queue
	var oom *mempool.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	s := f.pool.Stats()
	require.Equal(t, 1, s.HeldBlocks)
	assert.Equal(t, s.ActiveBlocks, oom.ActiveBlocks)
	assert.Equal(t, s.HeldBlocks, oom.HeldBlocks)
	assert.Equal(t, s.HeldBytes, oom.HeldBytes)
}
