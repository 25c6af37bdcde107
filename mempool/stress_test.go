package mempool_test

import (
	"errors"
	"fmt"
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

// stressSizes spans a few shared bins, so goroutines hit each other's blocks.
var stressSizes = []int64{0, 1, 64, 100, 101, 4096, 4100, 5000, 65536, 70000, 1 << 20}

// TestStress runs goroutines that allocate, write, close and sometimes drop
// buffers of random sizes while another frees held blocks, then checks that
// the counters add up and every device allocation was freed once. Without
// drop safety, nothing is dropped (it would leak).
func TestStress(t *testing.T) {
	t.Run("drop safety", func(t *testing.T) { stress(t, true) })
	t.Run("without drop safety", func(t *testing.T) { stress(t, false) })
}

func stress(t *testing.T, dropSafety bool) {
	f := newFixture(t, nil, mempool.WithDropSafety(dropSafety))
	workers, ops := 8, 2000
	if testing.Short() {
		ops = 300
	}
	var allocs, drops atomic.Int64
	var wg sync.WaitGroup
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			default:
				f.pool.FreeHeld()
				runtime.Gosched()
			}
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var live []*mempool.PooledBuffer
			for range ops {
				if len(live) < 5 && rng.IntN(3) > 0 {
					b, err := f.pool.Allocate(stressSizes[rng.IntN(len(stressSizes))])
					if !assert.NoError(t, err) {
						return
					}
					allocs.Add(1)
					live = append(live, b)
					continue
				}
				if len(live) == 0 {
					continue
				}
				i := rng.IntN(len(live))
				b := live[i]
				live = append(live[:i], live[i+1:]...)
				if dropSafety && rng.IntN(50) == 0 {
					drops.Add(1) // dropped: the GC gives it back
					continue
				}
				assert.NoError(t, b.Close())
			}
			for _, b := range live {
				assert.NoError(t, b.Close())
			}
		}()
	}
	wg.Wait()
	close(stop)
	<-stopped // a FreeHeld still freeing would leave DeviceFrees behind
	require.Eventually(t, func() bool {
		runtime.GC()
		return f.pool.ActiveBlocks() == 0
	}, 10*time.Second, 10*time.Millisecond, "dropped buffers come back")

	s := f.pool.Stats()
	assert.Equal(t, allocs.Load(), s.Hits+s.Misses)
	assert.Equal(t, s.Misses, s.DeviceAllocs, "every miss allocated")
	assert.Equal(t, drops.Load(), s.Reclaimed)
	assert.Zero(t, s.ActiveBytes)
	assert.Equal(t, s.HeldBytes, s.ManagedBytes, "with nothing active, the pool manages what it holds")
	assert.Equal(t, int(s.DeviceAllocs-s.DeviceFrees), s.HeldBlocks)
	assert.Positive(t, s.Hits)
	t.Logf("%d allocations: %d hits, %d misses, %d reclaimed", allocs.Load(), s.Hits, s.Misses, s.Reclaimed)
}

// TestStressUnderALimit races goroutines against a limit that cannot hold
// all their buffers: requests fail only with ErrOutOfMemory, managed bytes
// never pass the limit, and nothing leaks.
func TestStressUnderALimit(t *testing.T) {
	const limit = 1 << 21
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator { return allocator.NewBudget(a, limit) },
		mempool.WithLimit(limit))
	ops := 1000
	if testing.Short() {
		ops = 200
	}
	var ooms atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			var live []*mempool.PooledBuffer
			for range ops {
				if len(live) < 3 && rng.IntN(2) == 0 {
					b, err := f.pool.Allocate(stressSizes[rng.IntN(len(stressSizes))])
					if err != nil {
						if !assert.True(t, errors.Is(err, mempool.ErrOutOfMemory), "%v", err) {
							return
						}
						ooms.Add(1)
						continue
					}
					live = append(live, b)
				} else if len(live) > 0 {
					assert.NoError(t, live[0].Close())
					live = live[1:]
				}
				assert.LessOrEqual(t, f.pool.ManagedBytes(), int64(limit))
			}
			for _, b := range live {
				assert.NoError(t, b.Close())
			}
		}()
	}
	wg.Wait()
	s := f.pool.Stats()
	assert.Equal(t, ooms.Load(), s.OOMs)
	assert.Zero(t, s.ActiveBlocks)
	assert.Equal(t, s.HeldBytes, s.ManagedBytes)
	t.Logf("%d refusals, %d OOM retries", s.OOMs, s.OOMRetries)
}

// Closes racing on one buffer: exactly one wins, the others return
// ErrClosed, and the pool counts one free. The mark is set under the lock
// of the buffer's queue's cache; with no queue (a Deferred allocator),
// of the pool's host cache, as a queue's.
func TestRacingCloses(t *testing.T) {
	for _, dropSafe := range []bool{false, true} {
		t.Run(fmt.Sprintf("queue/dropsafety=%v", dropSafe), func(t *testing.T) {
			f := newFixture(t, nil, mempool.WithDropSafety(dropSafe))
			racingCloses(t, f.pool, true)
		})
		t.Run(fmt.Sprintf("noqueue/dropsafety=%v", dropSafe), func(t *testing.T) {
			d, err := allocator.NewDeferred(cltest.Queue(t).Context(), cl.MemReadWrite)
			require.NoError(t, err)
			p, err := mempool.New(pooltest.Counting(t, d), mempool.WithDropSafety(dropSafe))
			require.NoError(t, err)
			racingCloses(t, p, false)
			require.NoError(t, p.Close())
		})
	}
}

func racingCloses(t *testing.T, p *mempool.Pool, queue bool) {
	for i := range 300 {
		b, err := p.Allocate(int64(100 + i%7*1000))
		require.NoError(t, err)
		require.Equal(t, queue, b.Queue() != nil)
		errs := make([]error, 3)
		var wg sync.WaitGroup
		for k := range errs {
			wg.Add(1)
			go func() { defer wg.Done(); errs[k] = b.Close() }()
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
			} else {
				assert.ErrorIs(t, err, mempool.ErrClosed)
			}
		}
		require.Equal(t, 1, won)
	}
	s := p.Stats()
	assert.Zero(t, s.ActiveBlocks)
	assert.Equal(t, int64(300), s.Allocation.All.Freed)
}
