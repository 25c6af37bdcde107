package allocator_test

import (
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestS40fImmediateProbeKeepsDataOfAnotherDevice: allocator.Immediate's
// doc promises that the probe (a migration with undefined content to the
// probe queue's device) "writes nothing: data written to the buffer
// through another queue, before or after the probe, stays as written".
// In a context of two devices, the other queue may be on the other
// device: a write there right after Allocate, and the probe's migration
// (not waited for, not even flushed) running after it, moves the buffer
// to the probe's device with undefined content.
func TestS40fImmediateProbeKeepsDataOfAnotherDevice(t *testing.T) {
	cltest.RunOnTwoPOCLDevices(t, "TestS40fImmediateProbeKeepsDataOfAnotherDeviceChild")
}

func TestS40fImmediateProbeKeepsDataOfAnotherDeviceChild(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	d0, d1 := cltest.TwoDevices(t)
	ctx, err := cl.CreateContext(d0, d1)
	require.NoError(t, err)
	defer func() { require.NoError(t, ctx.Release()) }()
	q0, err := cl.NewCommandQueue(ctx, d0, 0)
	require.NoError(t, err)
	defer func() { require.NoError(t, q0.Release()) }()
	q1, err := cl.NewCommandQueue(ctx, d1, 0)
	require.NoError(t, err)
	defer func() { require.NoError(t, q1.Release()) }()

	a, err := allocator.NewImmediate(q0, cl.MemReadWrite)
	require.NoError(t, err)
	c := allocator.NewCounting(a)
	const n = 100
	bufs := make([]*cl.Buffer, n)
	for i := range bufs {
		bufs[i], err = c.Allocate(64)
		require.NoError(t, err)
		require.NoError(t, q1.WriteBuffer(bufs[i], 0, []byte{byte(i), 1, 2, 3}))
	}
	require.NoError(t, q0.Finish())
	lostOn1, lostOn0 := 0, 0
	for i, b := range bufs {
		got := make([]byte, 4)
		require.NoError(t, q1.ReadBuffer(b, 0, got))
		if got[0] != byte(i) || got[3] != 3 {
			lostOn1++
		}
		require.NoError(t, q0.ReadBuffer(b, 0, got))
		if got[0] != byte(i) || got[3] != 3 {
			lostOn0++
		}
		require.NoError(t, c.Free(b))
	}
	assert.Zero(t, lostOn1, "buffers of %d whose data, written on device 1, the probe lost (read on device 1)", n)
	assert.Zero(t, lostOn0, "buffers of %d whose data, written on device 1, the probe lost (read on device 0)", n)
	assert.Zero(t, c.Stats().Live)
}
