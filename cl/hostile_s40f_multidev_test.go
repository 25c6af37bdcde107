package cl_test

import (
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/require"
)

// TestS40fQueueOnDeviceOutsideContext: NewCommandQueue's doc says dev must
// be one of ctx's devices, else ErrInvalidDevice. With two devices of one
// platform (POCL_DEVICES="pthread pthread"), a queue of a context of the
// first on the second is refused, and so is a buffer of that context used
// on a queue of a context of the second device (ErrInvalidContext), which
// a runtime sharing host memory would otherwise accept.
func TestS40fQueueOnDeviceOutsideContext(t *testing.T) {
	cltest.RunOnTwoPOCLDevices(t, "TestS40fQueueOnDeviceOutsideContextChild")
}

func TestS40fQueueOnDeviceOutsideContextChild(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	d0, d1 := cltest.TwoDevices(t)
	ctx0, err := cl.CreateContext(d0)
	require.NoError(t, err)
	defer func() { require.NoError(t, ctx0.Release()) }()
	q, err := cl.NewCommandQueue(ctx0, d1, 0)
	if q != nil {
		require.NoError(t, q.Release())
	}
	assertCallErr(t, err, cl.ErrInvalidDevice, "clCreateCommandQueue")

	ctx1, err := cl.CreateContext(d1)
	require.NoError(t, err)
	defer func() { require.NoError(t, ctx1.Release()) }()
	q1, err := cl.NewCommandQueue(ctx1, d1, 0)
	require.NoError(t, err)
	defer func() { require.NoError(t, q1.Release()) }()
	b0, err := ctx0.CreateBuffer(cl.MemReadWrite, 64)
	require.NoError(t, err)
	defer b0.Release()
	assertCallErr(t, q1.WriteBuffer(b0, 0, make([]byte, 8)), cl.ErrInvalidContext, "clEnqueueWriteBuffer")
	_, err = q1.EnqueueMigrate([]*cl.Buffer{b0}, 0, false)
	assertCallErr(t, err, cl.ErrInvalidContext, "clEnqueueMigrateMemObjects")
}
