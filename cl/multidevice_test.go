package cl_test

import (
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestVersionNumberParsesDeviceVersions(t *testing.T) {
	for _, c := range []struct {
		version      string
		major, minor int
	}{
		{"OpenCL 3.0 PoCL HSTR: pthread-x86_64-pc-linux-gnu-haswell", 3, 0},
		{"OpenCL 3.0 CUDA", 3, 0},
		{"OpenCL 2.1 AMD-APP (3513.0)", 2, 1},
		{"OpenCL 1.2 (Oclgrind 21.10)", 1, 2},
		{"OpenCL 10.12 future", 10, 12},
		{"OpenCL C 1.2", 0, 0}, // CL_DEVICE_OPENCL_C_VERSION, not a device version
		{"3.0", 0, 0},
		{"", 0, 0},
	} {
		major, minor := (&cl.Device{Version: c.version}).VersionNumber()
		assert.Equal(t, [2]int{c.major, c.minor}, [2]int{major, minor}, "%q", c.version)
	}
}

// A device given twice makes a context of one device, on every runtime:
// POCL ignores the repeat as the specification says, Oclgrind would refuse
// it with CL_INVALID_VALUE.
func TestCreateContextCountsARepeatedDeviceOnce(t *testing.T) {
	dev := cltest.Queue(t).Device()
	ctx, err := cl.CreateContext(dev, dev)
	require.NoError(t, err)
	defer func() { require.NoError(t, ctx.Release()) }()
	require.Len(t, ctx.Devices(), 1)
	assert.Same(t, dev, ctx.Devices()[0])
	assert.Equal(t, dev.MemBaseAddrAlign, ctx.MemBaseAddrAlign())
	assert.Equal(t, dev.MaxMemAllocSize, ctx.MaxMemAllocSize())

	// The program is built for the one device, and runs.
	q, err := cl.NewCommandQueue(ctx, dev, 0)
	require.NoError(t, err)
	defer func() { require.NoError(t, q.Release()) }()
	got := runAffine(t, q, q, 64)
	for i, v := range got {
		require.Equal(t, int32(3*i+1), v, "element %d", i)
	}
}

// affine computes y = 3x + 1.
const affine = `
kernel void affine(global const int *x, global int *y, int n) {
	int i = get_global_id(0);
	if (i < n) y[i] = 3 * x[i] + 1;
}`

// runAffine writes 0..n-1 to a buffer through qw, runs affine on qk, after
// the write by its event, and returns the result read through qk.
func runAffine(t *testing.T, qw, qk *cl.CommandQueue, n int) []int32 {
	t.Helper()
	ctx := qk.Context()
	x := make([]int32, n)
	for i := range x {
		x[i] = int32(i)
	}
	bx, err := ctx.CreateBuffer(cl.MemReadWrite, int64(4*n))
	require.NoError(t, err)
	defer func() { require.NoError(t, bx.Release()) }()
	by, err := ctx.CreateBuffer(cl.MemReadWrite, int64(4*n))
	require.NoError(t, err)
	defer func() { require.NoError(t, by.Release()) }()
	prog, err := ctx.BuildProgram(affine, "")
	require.NoError(t, err)
	defer func() { require.NoError(t, prog.Release()) }()
	k, err := prog.Kernel("affine")
	require.NoError(t, err)
	defer func() { require.NoError(t, k.Release()) }()
	require.NoError(t, k.SetArgs(bx, by, int32(n)))

	wev, err := qw.EnqueueWriteBuffer(bx, false, 0, cl.Bytes(x))
	require.NoError(t, err)
	defer func() { require.NoError(t, wev.Release()) }()
	kev, err := qk.EnqueueNDRangeKernel(k, nil, []int{n}, nil, wev)
	require.NoError(t, err)
	defer func() { require.NoError(t, kev.Release()) }()
	got := make([]int32, n)
	_, err = qk.EnqueueReadBuffer(by, true, 0, cl.Bytes(got), kev)
	require.NoError(t, err)
	return got
}

// A context of two devices: a buffer written through device 0 is read by
// a kernel on device 1, ordered by the write's event, and the result comes
// back through device 1; a copy on device 1 comes back through device 0;
// a sub-buffer at the context's alignment serves both.
func TestContextOfSeveralDevices(t *testing.T) {
	d0, d1 := cltest.TwoDevices(t)
	ctx, err := cl.CreateContext(d0, d1)
	require.NoError(t, err)
	defer func() { require.NoError(t, ctx.Release()) }()
	t.Logf("context of %v and %v", d0, d1)

	devs := ctx.Devices()
	require.Len(t, devs, 2)
	assert.Same(t, d0, devs[0])
	assert.Same(t, d1, devs[1])
	assert.Equal(t, max(d0.MemBaseAddrAlign, d1.MemBaseAddrAlign), ctx.MemBaseAddrAlign())
	assert.Equal(t, min(d0.MaxMemAllocSize, d1.MaxMemAllocSize), ctx.MaxMemAllocSize())

	q0, err := cl.NewCommandQueue(ctx, d0, 0)
	require.NoError(t, err)
	defer func() { require.NoError(t, q0.Release()) }()
	q1, err := cl.NewCommandQueue(ctx, d1, 0)
	require.NoError(t, err)
	defer func() { require.NoError(t, q1.Release()) }()
	assert.Same(t, d1, q1.Device())

	const n = 4096
	y := runAffine(t, q0, q1, n)
	for i, v := range y {
		require.Equal(t, int32(3*i+1), v, "element %d", i)
	}

	// Device 1 copies y into a buffer that device 0 then reads, after the
	// copy by its event; the buffer was last written on device 0.
	by, err := ctx.CreateBufferFromHost(cl.MemReadWrite, cl.Bytes(y))
	require.NoError(t, err)
	defer func() { require.NoError(t, by.Release()) }()
	bz, err := ctx.CreateBuffer(cl.MemReadWrite, 4*n)
	require.NoError(t, err)
	defer func() { require.NoError(t, bz.Release()) }()
	require.NoError(t, q0.WriteBuffer(bz, 0, make([]byte, 4*n)))
	mev, err := q1.EnqueueMigrate([]*cl.Buffer{by, bz}, 0, true)
	require.NoError(t, err)
	defer func() { require.NoError(t, mev.Release()) }()
	cev, err := q1.EnqueueCopyBuffer(by, bz, 0, 0, 4*n, mev)
	require.NoError(t, err)
	defer func() { require.NoError(t, cev.Release()) }()
	z := make([]int32, n)
	_, err = q0.EnqueueReadBuffer(bz, true, 0, cl.Bytes(z), cev)
	require.NoError(t, err)
	assert.Equal(t, y, z)

	// A sub-buffer whose origin is the context's alignment is aligned for
	// both devices.
	align := ctx.MemBaseAddrAlign()
	sub, err := bz.CreateSubBuffer(cl.MemReadWrite, align, align)
	require.NoError(t, err)
	defer func() { require.NoError(t, sub.Release()) }()
	want := cl.Bytes(y)[align : 2*align]
	for _, q := range []*cl.CommandQueue{q0, q1} {
		got := make([]byte, align)
		require.NoError(t, q.ReadBuffer(sub, 0, got), "%v", q.Device())
		assert.Equal(t, want, got, "%v", q.Device())
	}

	// Devices whose limits differ: copies of the two stand for them (their
	// handles are the real ones'), the larger alignment and the smaller
	// allocation limit on either device.
	align0, alloc0 := d0.MemBaseAddrAlign, d0.MaxMemAllocSize
	for i := range 2 {
		a, b := *d0, *d1
		big, small := &a, &b
		if i == 1 {
			big, small = &b, &a
		}
		big.MemBaseAddrAlign = 2 * max(d0.MemBaseAddrAlign, d1.MemBaseAddrAlign)
		small.MaxMemAllocSize = min(d0.MaxMemAllocSize, d1.MaxMemAllocSize) / 2
		c, err := cl.CreateContext(&a, &b)
		require.NoError(t, err)
		assert.Equal(t, big.MemBaseAddrAlign, c.MemBaseAddrAlign(), "larger alignment on device %d", i)
		assert.Equal(t, small.MaxMemAllocSize, c.MaxMemAllocSize(), "smaller allocation limit on device %d", 1-i)
		require.NoError(t, c.Release())
	}
	assert.Equal(t, [2]int64{align0, alloc0}, [2]int64{d0.MemBaseAddrAlign, d0.MaxMemAllocSize}, "the devices are unchanged")
}

// POCL shows two CPU devices when POCL_DEVICES names two before the ICD
// loader starts it, which only a new process can do: this test runs
// TestContextOfSeveralDevices in one that sees POCL alone, so.
func TestContextOfTwoPOCLDevices(t *testing.T) {
	cltest.RunOnTwoPOCLDevices(t, "TestContextOfSeveralDevices")
}
