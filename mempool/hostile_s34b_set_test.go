package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PASSES (CuPy's TestMemoryPool on a Set: used/free/total bytes,
// n_free_blocks, free_all_blocks, set_limit before the device's first
// use, an over-limit malloc).
func TestHostileS34bSetAsCupyMemoryPool(t *testing.T) {
	for _, pp := range peerPolicies {
		t.Run(pp.name, func(t *testing.T) {
			t.Setenv(mempool.LimitEnv, "")
			q := cltest.Queue(t)
			var count *allocator.Counting
			set := mempool.NewSet(func(q *cl.CommandQueue) (allocator.Allocator, error) {
				imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
				if err != nil {
					return nil, err
				}
				count = allocator.NewCounting(imm)
				return count, nil
			}, pp.opts...)
			s := set.Stats()
			assert.Zero(t, s.ActiveBytes)
			assert.Zero(t, s.HeldBlocks)
			require.NoError(t, set.FreeHeld(), "free_all_blocks without malloc")
			require.NoError(t, set.SetLimit(q.Context(), 4<<20))
			b, err := set.On(q).Allocate(1)
			require.NoError(t, err)
			s = set.Stats()
			assert.Equal(t, int64(1), s.ActiveBytes)
			if !pp.arena { // an arena's segment keeps its free tail, held
				assert.Zero(t, s.HeldBlocks)
			}
			require.NoError(t, b.Close())
			s = set.Stats()
			assert.Positive(t, s.HeldBlocks)
			assert.Equal(t, s.ManagedBytes, s.HeldBytes)
			require.NoError(t, set.FreeHeld())
			s = set.Stats()
			assert.Zero(t, s.HeldBlocks)
			assert.Zero(t, s.ManagedBytes)
			_, err = set.On(q).Allocate(5 << 20)
			require.ErrorIs(t, err, mempool.ErrOutOfMemory)
			s = set.Stats()
			assert.Equal(t, int64(1), s.OOMs)
			require.Len(t, s.Devices, 1)
			assert.Equal(t, int64(4<<20), s.Devices[0].Stats.Limit)
			m := set.MemoryStats()
			assert.Equal(t, int64(1), m["device.0.num_ooms"])
			require.NoError(t, set.Close())
			cs := count.Stats()
			assert.Zero(t, cs.Live)
			assert.Zero(t, cs.BadFrees)
		})
	}
}
