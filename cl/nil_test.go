package cl_test

import (
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every exported method on a nil object, and every nil argument, returns an
// error matching the Status of that kind of object, or, for an accessor
// without an error, the zero value; none panics.
func TestNilObjectsAndArguments(t *testing.T) {
	q := cltest.Queue(t)
	var (
		b    *cl.Buffer
		ctx  *cl.Context
		nilQ *cl.CommandQueue
		ev   *cl.Event
		prog *cl.Program
		k    *cl.Kernel
		dev  *cl.Device
		plat *cl.Platform
	)
	require.NotPanics(t, func() {
		assert.ErrorIs(t, b.Release(), cl.ErrInvalidMemObject)
		assert.ErrorIs(t, b.Close(), cl.ErrInvalidMemObject)
		assert.Zero(t, b.Size())
		assert.Zero(t, b.Flags())
		assert.False(t, b.Released(), "a nil buffer was never made, so never released")
		assert.Nil(t, b.Context())
		p, origin := b.Parent()
		assert.Nil(t, p)
		assert.Zero(t, origin)
		assert.Zero(t, b.Handle())
		assert.Nil(t, b.Buffer())
		_, err := b.Info()
		assert.ErrorIs(t, err, cl.ErrInvalidMemObject)
		_, err = b.CreateSubBuffer(0, 0, 64)
		assert.ErrorIs(t, err, cl.ErrInvalidMemObject)

		assert.ErrorIs(t, ctx.Release(), cl.ErrInvalidContext)
		assert.Zero(t, ctx.MaxMemAllocSize())
		assert.Zero(t, ctx.MemBaseAddrAlign())
		assert.Nil(t, ctx.Devices())
		assert.False(t, ctx.Serialized())
		_, err = ctx.CreateBuffer(cl.MemReadWrite, 64)
		assert.ErrorIs(t, err, cl.ErrInvalidContext)
		_, err = ctx.CreateBufferFromHost(cl.MemReadWrite, []byte{1})
		assert.ErrorIs(t, err, cl.ErrInvalidContext)
		_, err = ctx.BuildProgram("kernel void k() {}", "")
		assert.ErrorIs(t, err, cl.ErrInvalidContext)

		assert.ErrorIs(t, nilQ.Release(), cl.ErrInvalidCommandQueue)
		assert.Nil(t, nilQ.Context())
		assert.Nil(t, nilQ.Device())
		assert.Zero(t, nilQ.Properties())
		assert.ErrorIs(t, nilQ.Finish(), cl.ErrInvalidCommandQueue)
		assert.ErrorIs(t, nilQ.Flush(), cl.ErrInvalidCommandQueue)
		assert.ErrorIs(t, nilQ.WriteBuffer(nil, 0, []byte{1}), cl.ErrInvalidCommandQueue)
		_, err = nilQ.EnqueueMarker()
		assert.ErrorIs(t, err, cl.ErrInvalidCommandQueue)

		assert.ErrorIs(t, ev.Release(), cl.ErrInvalidEvent)
		assert.ErrorIs(t, ev.Wait(), cl.ErrInvalidEvent)
		_, err = ev.Status()
		assert.ErrorIs(t, err, cl.ErrInvalidEvent)
		_, err = ev.Done()
		assert.ErrorIs(t, err, cl.ErrInvalidEvent)
		_, err = ev.Profile()
		assert.ErrorIs(t, err, cl.ErrInvalidEvent)
		_, err = ev.Retain()
		assert.ErrorIs(t, err, cl.ErrInvalidEvent)
		assert.ErrorIs(t, cl.WaitAll(ev), cl.ErrInvalidEventWaitList)

		assert.ErrorIs(t, prog.Release(), cl.ErrInvalidProgram)
		_, err = prog.Kernel("k")
		assert.ErrorIs(t, err, cl.ErrInvalidProgram)
		assert.ErrorIs(t, k.Release(), cl.ErrInvalidKernel)
		assert.ErrorIs(t, k.SetArg(0, int32(1)), cl.ErrInvalidKernel)
		assert.ErrorIs(t, k.SetArgs(int32(1)), cl.ErrInvalidKernel)
		assert.Empty(t, k.Name())

		_, err = plat.Devices(cl.DeviceTypeAll)
		assert.ErrorIs(t, err, cl.ErrInvalidPlatform)
		assert.Equal(t, "<nil>", dev.String())
		assert.False(t, dev.Matches("pocl"))
		assert.False(t, dev.IsSimulator())
		major, minor := dev.VersionNumber()
		assert.Zero(t, major+minor)

		// Nil arguments.
		_, err = cl.CreateContext(nil)
		assert.ErrorIs(t, err, cl.ErrInvalidDevice)
		_, err = cl.CreateContext(q.Device(), nil)
		assert.ErrorIs(t, err, cl.ErrInvalidDevice)
		_, err = cl.NewCommandQueue(q.Context(), nil, 0)
		assert.ErrorIs(t, err, cl.ErrInvalidDevice)
		_, err = cl.NewCommandQueue(nil, q.Device(), 0)
		assert.ErrorIs(t, err, cl.ErrInvalidContext)
		assert.ErrorIs(t, q.WriteBuffer(nil, 0, []byte{1}), cl.ErrInvalidMemObject)
		_, err = q.EnqueueCopyBuffer(nil, nil, 0, 0, 1)
		assert.ErrorIs(t, err, cl.ErrInvalidMemObject)
		assert.ErrorIs(t, q.EnqueueKernel(nil, []int{1}, nil), cl.ErrInvalidKernel)
		_, err = q.EnqueueMigrate([]*cl.Buffer{nil}, 0, false)
		assert.ErrorIs(t, err, cl.ErrInvalidMemObject)
		_, err = q.EnqueueMarker(nil)
		assert.ErrorIs(t, err, cl.ErrInvalidEventWaitList)
	})
}
