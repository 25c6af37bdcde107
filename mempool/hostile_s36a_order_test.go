package mempool_test

import (
	"fmt"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A block allocated on queue B (a task's), RecordQueue'd on A, where a
// slow kernel reads it; B is released and forgotten; the block is closed
// (its queue gone), then taken on C (in order or not) and filled there:
// A's kernel must read what was written before, never the fill.
func TestHostileS36aForgottenOwnerKeepsRecordedOrder(t *testing.T) {
	for _, arena := range []bool{false, true} {
		for _, props := range []cl.QueueProperties{0, cl.QueueOutOfOrder} {
			t.Run(fmt.Sprintf("arena=%v/ooo=%v", arena, props != 0), func(t *testing.T) {
				f := newFixture(t, nil, append(policyOptions(arena), mempool.WithoutQueueCaches())...)
				qa := cltest.SecondQueue(t, f.q, 0)
				qc := cltest.SecondQueue(t, f.q, props)
				k := cltest.SlowReadKernel(t, qa)
				n := 64
				iters := cltest.Size(f.q, 100, 60000000)
				out, err := f.q.Context().CreateBuffer(cl.MemReadWrite, int64(4*n))
				require.NoError(t, err)
				defer out.Release()
				corrupted, reused := 0, 0
				for range 4 {
					qb, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
					require.NoError(t, err)
					x, err := f.pool.On(qb).Allocate(int64(4 * n))
					require.NoError(t, err)
					require.NoError(t, qb.WriteBuffer(x.Base(), x.Offset(), cl.Bytes(allOnes(n))))
					require.NoError(t, x.RecordQueue(qa))
					require.NoError(t, k.SetArgs(x.Buffer(), out, int32(iters)))
					require.NoError(t, qa.EnqueueKernel(k, []int{n}, nil))
					require.NoError(t, qa.Flush())
					require.NoError(t, qb.Release())
					for range 2*mempool.QueueStates(f.pool) + mempool.ForgetMin + 1 {
						useOnce(t, f, 1<<16)
					}
					base, off := x.Base(), x.Offset()
					require.NoError(t, x.Close())
					y, err := f.pool.On(qc).Allocate(int64(4 * n))
					require.NoError(t, err)
					if y.Base() == base && y.Offset() == off {
						reused++
					}
					ev, err := qc.EnqueueFillBuffer(y.Base(), cl.Bytes([]int32{7}), y.Offset(), int64(4*n))
					require.NoError(t, err)
					require.NoError(t, ev.Wait())
					require.NoError(t, ev.Release())
					require.NoError(t, qa.Finish())
					if slowReadCorrupted(t, qa, out, n, iters) {
						corrupted++
					}
					require.NoError(t, y.Close())
				}
				require.Positive(t, reused)
				assert.Zero(t, corrupted)
			})
		}
	}
}
