package mempool_test

import (
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PASSES (so far): the other ways an SVM pool frees a block a kernel on
// another queue still reads ("FreeHeld, StopHolding, Close, the
// out-of-memory ladder, or a Close after StopHolding"): SetLimit below
// what it manages, QueueAllocator.FreeHeld, a Close after StopHolding,
// and Pool.Close. Each must wait for the kernel before clSVMFree.
func TestHostileS33FSVMEveryFreeWaitsForTheKernel(t *testing.T) {
	cltest.Watchdog(t, 120*time.Second)
	for _, how := range []string{"setlimit", "queue-freeheld", "close-after-stopholding", "pool-close"} {
		for _, pol := range policies[:2] {
			t.Run(how+"/"+pol.name, func(t *testing.T) {
				q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
				kq := cltest.SecondQueue(t, q, 0) // the kernel's queue, not the allocator's
				k := cltest.SlowReadKernel(t, kq)
				n, iters := 1<<14, cltest.Size(q, 100, 20000)
				out, err := q.Context().CreateBuffer(cl.MemReadWrite, int64(4*n))
				require.NoError(t, err)
				defer out.Release()
				raw, err := allocator.NewSVM(q.Context(), false)
				require.NoError(t, err)
				imm, err := allocator.NewImmediateSVM(q, false)
				require.NoError(t, err)
				p, err := mempool.NewSVM(imm, pol.opts...)
				require.NoError(t, err)
				defer p.Close()
				corrupted := 0
				for range 3 {
					x, err := p.On(kq).Allocate(int64(4 * n))
					require.NoError(t, err)
					ev, err := kq.EnqueueSVMMemFill(x.SVM(), cl.Bytes([]int32{1}), x.Offset(), x.Size())
					require.NoError(t, err)
					require.NoError(t, ev.Release())
					require.NoError(t, k.SetArgSVMPointer(0, x.SVM(), x.Offset()))
					require.NoError(t, k.SetArg(1, out))
					require.NoError(t, k.SetArg(2, int32(iters)))
					require.NoError(t, kq.EnqueueKernel(k, []int{n}, nil))
					require.NoError(t, kq.Flush())
					switch how {
					case "setlimit":
						require.NoError(t, x.Close())
						require.NoError(t, p.SetLimit(1))
						require.NoError(t, p.SetLimit(0))
					case "queue-freeheld":
						require.NoError(t, x.Close())
						require.NoError(t, p.On(kq).FreeHeld())
					case "close-after-stopholding":
						require.NoError(t, p.StopHolding())
						require.NoError(t, x.Close())
					case "pool-close":
						require.NoError(t, x.Close())
						require.NoError(t, p.Close())
					}
					assert.Zero(t, p.Stats().ManagedBytes, "the block's SVM was freed")
					y, err := raw.Allocate(int64(4 * n))
					require.NoError(t, err)
					fill, err := q.EnqueueSVMMemFill(y, cl.Bytes([]int32{7}), 0, int64(4*n))
					require.NoError(t, err)
					require.NoError(t, fill.Wait())
					require.NoError(t, fill.Release())
					if slowReadCorrupted(t, kq, out, n, iters) {
						corrupted++
					}
					require.NoError(t, raw.Free(y))
					if how == "pool-close" {
						break
					}
				}
				assert.Zero(t, corrupted, "a kernel read SVM the pool had freed")
			})
		}
	}
}
