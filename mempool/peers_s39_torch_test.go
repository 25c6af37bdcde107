package mempool_test

// Session s39 ports of torch's caching-allocator tests (test/test_cuda.py)
// not yet ported: test_memory_stats_multigpu (each device's statistics
// its own, while both allocate at once), and the data half of VMA's
// TestGpuData with torch's test_caching_allocator's "tensors do not share
// memory" check: every live block of many sizes keeps what was written to
// it. Devices are contexts (a Set keeps a pool per context, as torch keeps
// a DeviceCachingAllocator per device); two contexts of the one test
// device stand for two GPUs.

import (
	"fmt"
	"math/rand"
	"sync"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// torch test_memory_stats_multigpu: two devices allocate at once, each its
// own sizes; each device's memory_allocated and peak is its own, exactly,
// and the other device's allocations never show in it. A Set of pools,
// one per context; per-device limits (Set.SetLimit) apply to their own
// device only.
func TestPeersS39TorchMemoryStatsMultiGPU(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		t.Setenv(mempool.LimitEnv, "")
		dev := cltest.Queue(t).Device()
		var queues []*cl.CommandQueue
		for range 2 {
			ctx, err := cl.CreateContext(dev)
			require.NoError(t, err)
			t.Cleanup(func() { ctx.Release() })
			q, err := cl.NewCommandQueue(ctx, dev, 0)
			require.NoError(t, err)
			t.Cleanup(func() { q.Release() })
			queues = append(queues, q)
		}
		set := mempool.NewSet(nil, pp.opts...)
		t.Cleanup(func() { assert.NoError(t, set.Close()) })
		// Device 1 gets a limit of its own before its pool exists.
		const limit1 = 16 << 20
		require.NoError(t, set.SetLimit(queues[1].Context(), limit1))
		// Make the pools in order: device 0 first.
		for _, q := range queues {
			_, err := set.Pool(q)
			require.NoError(t, err)
		}
		sizes := [][]int64{{1000, 4096, 1 << 20}, {3000, 2 << 20, 12345}}
		const rounds = 30
		var wg sync.WaitGroup
		var sink errSink
		for d, q := range queues {
			on := set.On(q)
			wg.Go(func() {
				var live []*mempool.PooledBuffer
				for r := range rounds {
					for _, n := range sizes[d] {
						b, err := on.Allocate(n)
						if err != nil {
							sink.add(fmt.Errorf("device %d round %d: %w", d, r, err))
							return
						}
						live = append(live, b)
					}
					if r%2 == 1 {
						for _, b := range live {
							sink.add(b.Close())
						}
						live = live[:0]
					}
				}
				for _, b := range live {
					sink.add(b.Close())
				}
			})
		}
		wg.Wait()
		require.NoError(t, sink.err())
		st := set.Stats()
		require.Len(t, st.Devices, 2)
		for d, ds := range st.Devices {
			assert.Same(t, queues[d].Context(), ds.Context, "device %d: order of first use", d)
			var sum int64
			for _, n := range sizes[d] {
				sum += n
			}
			s := ds.Stats
			assert.Equal(t, int64(rounds*len(sizes[d])), s.Allocation.All.Allocated, "device %d: its own allocations only", d)
			assert.Equal(t, int64(rounds)*sum, s.RequestedBytes.All.Allocated, "device %d", d)
			assert.Equal(t, 2*sum, s.RequestedBytes.All.Peak, "device %d: peak of two rounds live, its own", d)
			assert.Zero(t, s.RequestedBytes.All.Current, "device %d", d)
		}
		assert.Zero(t, st.Devices[0].Stats.Limit, "device 0 has no limit")
		assert.Equal(t, int64(limit1), st.Devices[1].Stats.Limit, "device 1's limit is its own")
		assert.LessOrEqual(t, st.Devices[1].Stats.PeakManagedBytes, int64(limit1))
		m := set.MemoryStats()
		assert.Equal(t, st.Devices[0].Stats.RequestedBytes.All.Peak, m["device.0.requested_bytes.all.peak"])
		assert.Equal(t, st.Devices[1].Stats.RequestedBytes.All.Peak, m["device.1.requested_bytes.all.peak"])
		assert.Equal(t, st.Devices[0].Stats.ManagedBytes+st.Devices[1].Stats.ManagedBytes, st.ManagedBytes)
		// empty_cache on every device.
		require.NoError(t, set.FreeHeld())
		assert.Zero(t, set.Stats().ManagedBytes)
	})
}

// VMA Tests.cpp TestGpuData (UploadGpuData / ValidateGpuData) and torch's
// caching allocator's promise that live tensors never share memory: many
// blocks of many sizes (odd ones, around the alignment and bin edges)
// live at once, each filled through its own buffer (Buffer(): the block's
// sub-buffer in an arena) with a value of its own over all the bytes
// asked for; read back, each still holds its value: no block's bytes are
// another's. Then half are freed and reallocated with new sizes, and the
// check repeats.
func TestPeersS39TorchLiveBlocksKeepTheirData(t *testing.T) {
	for _, v := range s34bVariants() {
		t.Run(v.name, func(t *testing.T) {
			p, q, _ := peerPool(t, v.pp, nil)
			alloc := s34bAllocFn(p, q, v.on)
			rng := rand.New(rand.NewSource(53434))
			edges := []int64{1, 7, 511, 512, 513, 1023, 4095, 4097, 65535, 65537, 69631, 69632, 1 << 20, 1<<20 + 1}
			type item struct {
				b   *mempool.PooledBuffer
				val byte
			}
			var live []item
			defer func() {
				for _, it := range live {
					it.b.Close()
				}
			}()
			next := byte(1)
			add := func(n int64) {
				t.Helper()
				b, err := alloc(n)
				require.NoError(t, err, "Allocate(%d)", n)
				buf := b.Buffer()
				require.NotNil(t, buf, "Allocate(%d): its buffer", n)
				require.GreaterOrEqual(t, buf.Size(), n)
				data := make([]byte, n)
				for i := range data {
					data[i] = next
				}
				require.NoError(t, q.WriteBuffer(buf, 0, data))
				live = append(live, item{b, next})
				next++
				if next == 0 {
					next = 1
				}
			}
			validate := func(when string) {
				t.Helper()
				for i, it := range live {
					got := make([]byte, it.b.Size())
					require.NoError(t, q.ReadBuffer(it.b.Buffer(), 0, got))
					bad := -1
					for j, c := range got {
						if c != it.val {
							bad = j
							break
						}
					}
					assert.Equal(t, -1, bad, "%s: block %d (%d bytes at offset %d) byte %d was overwritten", when, i, it.b.Size(), it.b.Offset(), bad)
				}
			}
			for _, n := range edges {
				add(n)
			}
			for range 40 {
				add(1 + rng.Int63n(300<<10))
			}
			validate("first fill")
			for round := range 3 {
				rng.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
				half := len(live) / 2
				for _, it := range live[:half] {
					require.NoError(t, it.b.Close())
				}
				live = append([]item(nil), live[half:]...)
				for range half {
					n := edges[rng.Intn(len(edges))]
					if rng.Intn(2) == 0 {
						n = 1 + rng.Int63n(300<<10)
					}
					add(n)
				}
				validate(fmt.Sprintf("round %d", round))
			}
		})
	}
}
