// Package cltest gives tests a command queue on the device CLPOOL_DEVICE
// names, released when the test ends. Queue never skips: a test that needs
// a device and finds none fails. Device skips a test that needs a
// particular runtime (Oclgrind, say) where it is not installed.
package cltest

import (
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/stretchr/testify/require"
)

// Queue returns a profiling, in-order queue (and its own context) on the
// selected device, released at the end of the test.
func Queue(tb testing.TB) *cl.CommandQueue {
	tb.Helper()
	q, err := cl.DefaultQueueWith(cl.QueueProfiling)
	require.NoError(tb, err, "no OpenCL device: run through `make test`, which installs POCL and Oclgrind")
	tb.Cleanup(func() { require.NoError(tb, q.Release()) })
	return q
}

// Device returns the first device that name matches (cl.Device.Matches:
// "pocl", "oclgrind"), and skips the test, saying why, if none does.
func Device(tb testing.TB, name string) *cl.Device {
	tb.Helper()
	all, err := cl.AllDevices()
	require.NoError(tb, err)
	for _, d := range all {
		if d.Matches(name) {
			return d
		}
	}
	tb.Skipf("this test needs a %q device, and none is installed (`make deps` installs POCL and Oclgrind)", name)
	return nil
}

// Simulator reports whether q runs on a simulator (Oclgrind), where every
// work-item is simulated and tests keep their sizes small.
func Simulator(q *cl.CommandQueue) bool {
	return q.Device().IsSimulator()
}

// Size returns small on a simulator or under -short, else full.
func Size(q *cl.CommandQueue, small, full int) int {
	if Simulator(q) || testing.Short() {
		return small
	}
	return full
}

// SecondQueue returns another in-order queue (with flags props) on q's
// context and device, released at the end of the test.
func SecondQueue(tb testing.TB, q *cl.CommandQueue, props cl.QueueProperties) *cl.CommandQueue {
	tb.Helper()
	q2, err := cl.NewCommandQueue(q.Context(), q.Device(), props)
	require.NoError(tb, err)
	tb.Cleanup(func() { require.NoError(tb, q2.Release()) })
	return q2
}

// SlowRead is a kernel that reads x[i] iters times, late and through a
// volatile pointer so that no read is hoisted, and writes the sum to
// out[i]: a command that still uses x long after it was enqueued.
const SlowRead = `
kernel void slow_read(volatile global const int *x, global int *out, int iters) {
	int i = get_global_id(0);
	int acc = 0;
	for (int k = 0; k < iters; k++) acc += x[i];
	out[i] = acc;
}`

// SlowReadKernel builds SlowRead on q's context and returns its kernel,
// released (with its program) at the end of the test.
func SlowReadKernel(tb testing.TB, q *cl.CommandQueue) *cl.Kernel {
	tb.Helper()
	prog, err := q.Context().BuildProgram(SlowRead, "")
	require.NoError(tb, err)
	tb.Cleanup(func() { prog.Release() })
	k, err := prog.Kernel("slow_read")
	require.NoError(tb, err)
	tb.Cleanup(func() { k.Release() })
	return k
}
