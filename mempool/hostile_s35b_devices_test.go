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

// PASSES (exploration, where two devices show: run through
// TestHostileS35bTwoDevicesShareASegmentOnPOCL). The package doc: "A
// context of several devices is one pool, whose blocks suit every device
// of it", and devices_test.go: "blocks cut from one segment serve kernels
// on either device". An arena's two neighbouring blocks of one segment,
// each used by an owning kernel on its own device's queue at the same
// time, then each read back: a runtime that migrated whole buffers
// between devices would make one device's writes overwrite the other's
// block. Then both blocks go back and the merged block goes to device 1
// while device 0's kernel on its half still runs.
func TestHostileS35bTwoDevicesShareASegment(t *testing.T) {
	q0, q1 := twoDeviceQueues(t)

	imm, err := allocator.NewImmediate(q0, cl.MemReadWrite)
	require.NoError(t, err)
	count := allocator.NewCounting(imm)
	p, err := mempool.New(count, mempool.WithArena(), mempool.WithoutQueueCaches())
	require.NoError(t, err)
	own := newS35bOwners(t, q0)
	k0, k1 := own.kernel(t), own.kernel(t)
	const n = 1024
	iters := 200000
	for trial := range 3 {
		x0, err := p.On(q0).Allocate(4 * n)
		require.NoError(t, err)
		x1, err := p.On(q1).Allocate(4 * n)
		require.NoError(t, err)
		require.Same(t, x0.Base(), x1.Base(), "one segment")
		v0, v1 := int32(100+trial), int32(200+trial)
		require.NoError(t, own.run(k0, q0, x0.Base(), x0.Offset(), n, v0, iters))
		require.NoError(t, own.run(k1, q1, x1.Base(), x1.Offset(), n, v1, iters))
		require.NoError(t, q0.Finish())
		require.NoError(t, q1.Finish())
		got0 := s35bRead(t, q0, x0.Base(), x0.Offset(), n)
		got1 := s35bRead(t, q1, x1.Base(), x1.Offset(), n)
		assert.Equal(t, v0, got0[0])
		assert.Equal(t, v0, got0[n-1])
		assert.Equal(t, v1, got1[0])
		assert.Equal(t, v1, got1[n-1])
		// Device 0's kernel over x0 again, then both back, and the merged
		// block to device 1 at once.
		require.NoError(t, own.run(k0, q0, x0.Base(), x0.Offset(), n, v0+1000, iters))
		lo := min(x0.Offset(), x1.Offset())
		require.NoError(t, x0.Close())
		require.NoError(t, x1.Close())
		y, err := p.On(q1).Allocate(8 * n)
		require.NoError(t, err)
		require.Equal(t, lo, y.Offset(), "the merged block")
		require.NoError(t, own.run(k1, q1, y.Base(), y.Offset(), 2*n, v1+1000, iters/4))
		require.NoError(t, q1.Finish())
		require.NoError(t, q0.Finish())
		goty := s35bRead(t, q1, y.Base(), y.Offset(), 2*n)
		assert.Equal(t, v1+1000, goty[0])
		assert.Equal(t, v1+1000, goty[2*n-1])
		require.NoError(t, y.Close())
	}
	assert.Zero(t, own.bads(t, q0, q0, q1), "elements where an owning kernel saw another's write")
	require.NoError(t, p.Close())
}

func TestHostileS35bTwoDevicesShareASegmentOnPOCL(t *testing.T) {
	cltest.RunOnTwoPOCLDevices(t, "TestHostileS35bTwoDevicesShareASegment")
}
