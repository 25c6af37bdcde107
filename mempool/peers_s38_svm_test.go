package mempool_test

// Session s38 ports of PyOpenCL's test_wrapper.py test_svm_mempool (an
// SVMPool over an SVMAllocator with a queue: many sizes allocated and
// given back) and RMM's mixed random allocation test, against an SVM pool
// (mempool.NewSVM) of either policy, on two queues; the RMM ForceGrowth
// test over an allocator.SVMBudget.

import (
	"math/rand"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PyOpenCL test_svm_mempool with RMM's mixed pattern: live blocks of one
// SVM never overlap, the counts follow, and FreeHeld gives every SVM back.
func TestPeersS38PyOpenCLSVMMempoolMixed(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		t.Setenv(mempool.LimitEnv, "")
		f := newSVMFixture(t, false, nil, pp.opts...)
		p := f.pool
		ons := []*mempool.QueueAllocator{p.On(f.q), p.On(cltest.SecondQueue(t, f.q, 0))}
		rng := rand.New(rand.NewSource(1000))
		type live struct {
			b    *mempool.PooledBuffer
			size int64
		}
		var ls []live
		var bytes int64
		defer func() {
			for _, l := range ls {
				l.b.Close()
			}
		}()
		for i := range 150 {
			if len(ls) == 0 || rng.Intn(100) < 55 {
				size := 1 + rng.Int63n(200<<10)
				b, err := ons[rng.Intn(2)].Allocate(size)
				require.NoError(t, err, "step %d", i)
				require.NotNil(t, b.SVM())
				assert.Nil(t, b.Buffer(), "an SVM pool's block has no buffer")
				ls = append(ls, live{b, size})
				bytes += size
			} else {
				j := rng.Intn(len(ls))
				require.NoError(t, ls[j].b.Close())
				bytes -= ls[j].size
				ls = append(ls[:j], ls[j+1:]...)
			}
			s := p.Stats()
			require.Equal(t, len(ls), s.ActiveBlocks, "step %d", i)
			require.Equal(t, bytes, s.ActiveBytes, "step %d", i)
			require.Equal(t, s.ManagedBytes, s.AllocatedBytes.All.Current+s.HeldBytes, "step %d: used + free == total", i)
		}
		for i := range ls {
			for j := range i {
				a, b := ls[i], ls[j]
				if a.b.SVM() != b.b.SVM() {
					continue
				}
				if a.b.Offset() < b.b.Offset()+b.size && b.b.Offset() < a.b.Offset()+a.size {
					t.Errorf("live SVM blocks %d and %d overlap", i, j)
				}
			}
		}
		peerCheckSnapshot(t, p, "svm mixed")
		for _, l := range ls {
			require.NoError(t, l.b.Close())
		}
		ls = nil
		require.NoError(t, p.FreeHeld())
		s := p.Stats()
		assert.Zero(t, s.ManagedBytes)
		assert.Equal(t, s.DeviceAllocs, s.DeviceFrees)
	})
}

// RMM PoolTest.ForceGrowth over an SVM budget: the pool grows for 1, 4
// and 0.5 MiB, refuses 2 MiB more with an out-of-memory error that wraps
// the budget's, and serves it once the rest is given back.
func TestPeersS38RmmSVMForceGrowth(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		t.Setenv(mempool.LimitEnv, "")
		const mib = int64(1 << 20)
		sizes := []int64{mib, 4 * mib, mib / 2}
		budget := 6 * mib
		if !pp.arena {
			budget = mib / 4
			for _, s := range sizes {
				budget += mempool.AllocSize(mempool.BinNumber(s, 4), 4)
			}
		}
		f := newSVMFixture(t, false, func(a allocator.SVMAllocator) allocator.SVMAllocator {
			return allocator.NewSVMBudget(a, budget)
		}, pp.opts...)
		p := f.pool
		on := p.On(f.q)
		var bs []*mempool.PooledBuffer
		for _, s := range sizes {
			b, err := on.Allocate(s)
			require.NoError(t, err, "%d bytes", s)
			bs = append(bs, b)
		}
		_, err := on.Allocate(2 * mib)
		require.ErrorIs(t, err, mempool.ErrOutOfMemory)
		assert.ErrorIs(t, err, cl.ErrMemObjectAllocationFailure)
		assert.LessOrEqual(t, p.ManagedBytes(), budget)
		mustClose(t, bs...)
		b, err := on.Allocate(2 * mib)
		require.NoError(t, err, "fits once the rest is given back")
		require.NoError(t, b.Close())
	})
}
