package mempool_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// SetLimit below what the pool manages, all of it held (some in queue
// caches of two queues): the pool frees held memory, largest first,
// until it is within the limit, and keeps the rest.
func TestHostileS33FSetLimitFreesLargestFirst(t *testing.T) {
	cltest.Watchdog(t, 30*time.Second)
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			opts := policyOptions(arena)
			if arena {
				opts = append(opts, mempool.WithMaxSplitSize(512<<10))
			}
			f := newFixture(t, nil, opts...)
			q2 := cltest.SecondQueue(t, f.q, 0)
			var bs []*mempool.PooledBuffer
			for i, n := range []int64{4 << 20, 1 << 20, 600 << 10, 4096, 512} {
				qq := f.q
				if i%2 == 1 {
					qq = q2
				}
				b, err := f.pool.On(qq).Allocate(n)
				require.NoError(t, err)
				bs = append(bs, b)
			}
			for _, b := range bs {
				require.NoError(t, b.Close())
			}
			before := f.pool.Stats()
			require.Greater(t, before.ManagedBytes, int64(4<<20))
			limit := before.ManagedBytes - 1
			require.NoError(t, f.pool.SetLimit(limit))
			after := f.pool.Stats()
			assert.LessOrEqual(t, after.ManagedBytes, limit)
			assert.Equal(t, limit, after.Limit)
			assert.Equal(t, limit, f.pool.Limit())
			// Freeing the 4 MiB block (or its segment) was enough.
			assert.Greater(t, after.ManagedBytes, int64(1<<20), "freed more than the largest segment: %d -> %d", before.ManagedBytes, after.ManagedBytes)
			assert.Equal(t, before.DeviceFrees+1, after.DeviceFrees, "one segment, the largest, was enough")
		})
	}
}

// The environment's limit and the fractions: Limit and Stats.Limit say
// the same, for buffer and SVM pools, and a Set's pools each get it.
func TestHostileS33FEnvLimitAndFractions(t *testing.T) {
	q := cltest.Queue(t)
	total := q.Device().GlobalMemSize
	require.Positive(t, total)
	t.Setenv(mempool.LimitEnv, "25%")
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	p, err := mempool.New(imm)
	require.NoError(t, err)
	defer p.Close()
	assert.Equal(t, int64(0.25*float64(total)), p.Limit())
	assert.Equal(t, p.Limit(), p.Stats().Limit)

	p2, err := mempool.New(imm, mempool.WithLimitFraction(0.5))
	require.NoError(t, err)
	defer p2.Close()
	assert.Equal(t, int64(0.5*float64(total)), p2.Limit(), "the option overrides the environment")
	assert.Equal(t, p2.Limit(), p2.Stats().Limit)

	s := mempool.NewSet(nil)
	defer s.Close()
	sp, err := s.Pool(q)
	require.NoError(t, err)
	assert.Equal(t, int64(0.25*float64(total)), sp.Limit(), "a Set's pool reads the environment too")

	if q.Context().SVMCapabilities()&cl.SVMCoarseGrainBuffer != 0 {
		svm, err := allocator.NewImmediateSVM(q, false)
		require.NoError(t, err)
		sp, err := mempool.NewSVM(svm)
		require.NoError(t, err)
		defer sp.Close()
		assert.Equal(t, int64(0.25*float64(total)), sp.Limit(), "an SVM pool reads the environment's percentage")
		sp2, err := mempool.NewSVM(svm, mempool.WithLimitFraction(0.5))
		require.NoError(t, err)
		defer sp2.Close()
		assert.Equal(t, int64(0.5*float64(total)), sp2.Limit())
		ss := mempool.NewSVMSet(nil, mempool.WithLimitFraction(0.5))
		defer ss.Close()
		ssp, err := ss.Pool(q)
		require.NoError(t, err)
		assert.Equal(t, int64(0.5*float64(total)), ssp.Limit())
		require.NoError(t, ss.SetLimit(q.Context(), 0))
		assert.Zero(t, ssp.Limit())
		assert.Zero(t, ssp.Stats().Limit)
	}
}
