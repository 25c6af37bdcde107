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

// An arena aligns its blocks for the most demanding device of its context:
// a copy of the test device that asks for 16 KiB (its handle the real
// one's) stands for one.
func TestArenaAlignsForItsContext(t *testing.T) {
	dev := *cltest.Queue(t).Device()
	dev.MemBaseAddrAlign = 16 << 10
	ctx, err := cl.CreateContext(&dev)
	require.NoError(t, err)
	defer func() { require.NoError(t, ctx.Release()) }()
	q, err := cl.NewCommandQueue(ctx, &dev, 0)
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Release()) }()
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	p, err := mempool.New(imm, mempool.WithArena())
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close()) }()

	a, err := p.Allocate(100)
	require.NoError(t, err)
	b, err := p.Allocate(100)
	require.NoError(t, err)
	assert.Same(t, a.Base(), b.Base())
	assert.Equal(t, int64(16<<10), b.Offset()-a.Offset(), "blocks 16 KiB apart")
	require.NotNil(t, b.Buffer(), "a sub-buffer at the alignment")
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
}

// One pool serves a context of two devices: a block given back on device
// 0's queue right after a slow kernel there is reused by device 1's queue,
// ordered after the kernel (the marker and barrier of queue-ordered reuse
// work across devices of one context), and blocks cut from one segment
// serve kernels on either device. It runs where two devices show
// (TestPoolOnTwoPOCLDevices makes POCL show two).
func TestPoolOnSeveralDevices(t *testing.T) {
	q0, q1 := twoDeviceQueues(t)
	ctx := q0.Context()

	for _, pol := range policies[:2] {
		t.Run(pol.name, func(t *testing.T) {
			imm, err := allocator.NewImmediate(q0, cl.MemReadWrite)
			require.NoError(t, err)
			count := allocator.NewCounting(imm)
			p, err := mempool.New(count, pol.opts...)
			require.NoError(t, err)
			k := cltest.SlowReadKernel(t, q0)
			n, iters, trials := 64, 1000000, 5
			out, err := ctx.CreateBuffer(cl.MemReadWrite, int64(4*n))
			require.NoError(t, err)
			defer out.Release()
			corrupted := 0
			for range trials {
				x, err := p.On(q0).Allocate(int64(4 * n))
				require.NoError(t, err)
				require.NoError(t, q0.WriteBuffer(x.Base(), x.Offset(), cl.Bytes(allOnes(n))))
				require.NoError(t, k.SetArgs(x.Buffer(), out, int32(iters)))
				require.NoError(t, q0.EnqueueKernel(k, []int{n}, nil))
				require.NoError(t, q0.Flush())
				base := x.Base()
				require.NoError(t, x.Close())

				y, err := p.On(q1).Allocate(int64(4 * n))
				require.NoError(t, err)
				require.Same(t, base, y.Base(), "the test must exercise reuse")
				fillWait(t, q1, y, 7)
				require.NoError(t, y.Close())

				if slowReadCorrupted(t, q0, out, n, iters) {
					corrupted++
				}
			}
			assert.Zero(t, corrupted, "results corrupted by a reuse on the other device, of %d", trials)
			require.NoError(t, p.Close())
			c := count.Stats()
			assert.Zero(t, c.Live)
			assert.Equal(t, c.Allocs, c.Frees)
		})
	}
}

func TestPoolOnTwoPOCLDevices(t *testing.T) {
	cltest.RunOnTwoPOCLDevices(t, "TestPoolOnSeveralDevices")
}

// twoDeviceQueues returns a queue on each of two devices of one new
// context (cltest.TwoDevices; the test skips without them), released with
// the context when t ends.
func twoDeviceQueues(t *testing.T) (q0, q1 *cl.CommandQueue) {
	d0, d1 := cltest.TwoDevices(t)
	ctx, err := cl.CreateContext(d0, d1)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ctx.Release()) })
	q0, err = cl.NewCommandQueue(ctx, d0, 0)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q0.Release()) })
	q1, err = cl.NewCommandQueue(ctx, d1, 0)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q1.Release()) })
	return q0, q1
}
