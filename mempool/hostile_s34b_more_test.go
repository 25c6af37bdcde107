package mempool_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PASSES (port of RMM's PoolTest.ForceGrowth): a pool of a few kilobytes at most
// serves small requests, refuses one over its maximum, and still serves
// small ones after.
func TestHostileS34bForceGrowthTinyLimit(t *testing.T) {
	for _, v := range s34bVariants() {
		for _, limit := range []int64{3000, 4096, 5000} {
			t.Run(fmt.Sprintf("%s/%d", v.name, limit), func(t *testing.T) {
				p, q, _ := peerPool(t, v.pp, nil, mempool.WithLimit(limit))
				alloc := s34bAllocFn(p, q, v.on)
				a, err := alloc(1000)
				require.NoError(t, err)
				_, err = alloc(limit + 1)
				require.ErrorIs(t, err, mempool.ErrOutOfMemory)
				b, err := alloc(1000)
				require.NoError(t, err, "a second 1000 bytes fits in %d (managed %d)", limit, p.ManagedBytes())
				assert.LessOrEqual(t, p.ManagedBytes(), limit)
				require.NoError(t, a.Close())
				require.NoError(t, b.Close())
			})
		}
	}
}

// PASSES (port of RMM's PoolTest.MultidirectionalCoalesce): three neighbours given
// back in the order first, last, middle merge into one block that serves
// their sum with no new device allocation.
func TestHostileS34bMultidirectionalCoalesce(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprint(on), func(t *testing.T) {
			p, q, count := peerPool(t, peerPolicies[1], nil)
			alloc := s34bAllocFn(p, q, on)
			const n = 100 << 10
			var bufs [3]*mempool.PooledBuffer
			for i := range bufs {
				b, err := alloc(n)
				require.NoError(t, err)
				bufs[i] = b
			}
			base := bufs[0].Base()
			off := bufs[0].Offset()
			require.Same(t, base, bufs[1].Base())
			require.Same(t, base, bufs[2].Base())
			for _, i := range []int{0, 2, 1} {
				require.NoError(t, bufs[i].Close())
			}
			allocs := count.Stats().Allocs
			b, err := alloc(3 * n)
			require.NoError(t, err)
			assert.Equal(t, allocs, count.Stats().Allocs, "the merged block serves the sum")
			assert.Same(t, base, b.Base())
			assert.Equal(t, off, b.Offset())
			require.NoError(t, b.Close())
		})
	}
}

// PASSES (port of torch's test_caching_allocator_record_stream_oom): blocks
// recorded on another queue are given back and reused round after round
// under a budget of a few blocks; the pool never runs out.
func TestHostileS34bRecordQueueNoOOM(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		const n = 1 << 20
		p, q, _ := peerPool(t, pp, func(a allocator.Allocator) allocator.Allocator { return allocator.NewBudget(a, 4*n) })
		q2 := cltest.SecondQueue(t, q, 0)
		y, err := p.On(q2).Allocate(n)
		require.NoError(t, err)
		for i := 0; i < 100; i++ {
			x, err := p.On(q).Allocate(n)
			require.NoError(t, err, "round %d: %v", i, p.Stats())
			ev, err := q2.EnqueueCopyBuffer(x.Buffer(), y.Buffer(), 0, 0, n)
			require.NoError(t, err)
			ev.Release()
			require.NoError(t, x.RecordQueue(q2))
			require.NoError(t, x.Close())
		}
		require.NoError(t, q2.Finish())
		require.NoError(t, y.Close())
	})
}

// PASSES (RMM's statistics_resource_adaptor MultiThreaded): many
// goroutines allocating and freeing; at the end the totals are exact and
// nothing is current.
func TestHostileS34bStatisticsConcurrent(t *testing.T) {
	for _, v := range s34bVariants() {
		t.Run(v.name, func(t *testing.T) {
			p, q, _ := peerPool(t, v.pp, nil)
			const G, N = 4, 200
			var wg sync.WaitGroup
			var mu sync.Mutex
			var total int64
			for g := 0; g < G; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					alloc := s34bAllocFn(p, q, v.on)
					var sum int64
					for i := 0; i < N; i++ {
						n := int64(64 + (i*37+g*11)%5000)
						b, err := alloc(n)
						if !assert.NoError(t, err) {
							return
						}
						sum += n
						assert.NoError(t, b.Close())
					}
					mu.Lock()
					total += sum
					mu.Unlock()
				}(g)
			}
			wg.Wait()
			s := p.Stats()
			assert.Equal(t, mempool.Stat{Current: 0, Peak: s.Allocation.All.Peak, Allocated: G * N, Freed: G * N}, s.Allocation.All)
			assert.LessOrEqual(t, s.Allocation.All.Peak, int64(G))
			assert.GreaterOrEqual(t, s.Allocation.All.Peak, int64(1))
			assert.Equal(t, total, s.RequestedBytes.All.Allocated)
			assert.Equal(t, total, s.RequestedBytes.All.Freed)
			assert.Equal(t, s.Hits+s.Misses, int64(G*N))
			assert.Zero(t, s.ActiveBytes)
			assert.Equal(t, s.ManagedBytes, s.HeldBytes)
		})
	}
}
