package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An SVM pool: a queue per task, each filling its block with a kernel,
// the block closed before or after the queue's release; FreeHeld and
// StopHolding between. Every SVM is freed once (the fixture's check), the
// data each task wrote is its own, and queue states stay bounded.
func TestHostileS36aSVMQueuePerTask(t *testing.T) {
	for _, pol := range policies {
		t.Run(pol.name, func(t *testing.T) {
			f := newSVMFixture(t, false, nil, pol.opts...)
			k := buildFill(t, f.q)
			const n = 256
			var late []*mempool.PooledBuffer
			for i := range 6 * mempool.ForgetMin {
				q, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
				require.NoError(t, err)
				b, err := f.pool.On(q).Allocate(int64(4*n) << (i % 3))
				require.NoError(t, err)
				require.NoError(t, k.SetArgSVMPointer(0, b.SVM(), b.Offset()))
				require.NoError(t, k.SetArg(1, int32(i+1)))
				require.NoError(t, q.EnqueueKernel(k, []int{n}, nil))
				require.NoError(t, q.Finish())
				got := readSVM(t, q, b, n)
				assert.Equal(t, []int32{int32(i + 1), int32(i + 1)}, []int32{got[0], got[n-1]})
				if i%2 == 0 {
					require.NoError(t, b.Close())
				} else {
					late = append(late, b)
				}
				require.NoError(t, q.Release())
				if i%5 == 0 {
					require.NoError(t, f.pool.FreeHeld())
				}
				if len(late) > 3 {
					require.NoError(t, late[0].Close())
					late = late[1:]
				}
			}
			assert.LessOrEqual(t, mempool.QueueStates(f.pool), mempool.ForgetMin+1)
			for _, b := range late {
				require.NoError(t, b.Close())
			}
			s := f.pool.Stats()
			pooltest.CheckStats(t, s)
			require.NoError(t, mempool.CheckBlockCounts(f.pool))
			act, held, inact, hb := s36aSnapCounts(f.pool.Snapshot())
			assert.Zero(t, act)
			assert.Equal(t, s.HeldBlocks, held+inact)
			assert.Equal(t, s.HeldBytes, hb)
			require.NoError(t, f.pool.StopHolding())
			assert.Zero(t, f.pool.Stats().ManagedBytes)
		})
	}
}
