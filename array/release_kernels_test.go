package array_test

import (
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The kernels built for a context held it for the life of the process (a
// program holds its context), so a suite making a context per test kept
// them all: on NVIDIA's OpenCL, array's tests failed from the 70th or so
// at clCreateContext with CL_OUT_OF_HOST_MEMORY (session 46, H100).
// Releasing a context now releases its kernels.
func TestReleasingTheContextReleasesItsKernels(t *testing.T) {
	for range 3 { // each round a new context: none is kept
		q, err := cl.DefaultQueue()
		require.NoError(t, err)
		ctx := q.Context()
		imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
		require.NoError(t, err)
		x, err := array.Zeros[float32](q, 8, imm.Allocate)
		require.NoError(t, err)
		y, err := array.Zeros[int32](q, 8, imm.Allocate)
		require.NoError(t, err)
		sets, hooked := array.BuiltSets(ctx)
		assert.Equal(t, 2, sets, "float and int kernels built")
		assert.True(t, hooked)
		require.NoError(t, x.Close())
		require.NoError(t, y.Close())
		require.NoError(t, q.Release()) // releases its context
		sets, hooked = array.BuiltSets(ctx)
		assert.Zero(t, sets, "the context's release released its kernels")
		assert.False(t, hooked, "and forgot the context")
		_, err = array.Zeros[float32](q, 8, imm.Allocate)
		assert.Error(t, err, "a released context builds nothing")
		sets, _ = array.BuiltSets(ctx)
		assert.Zero(t, sets)
	}
}

// ReleaseKernels leaves the hook: the kernels built again afterwards are
// released with the context too.
func TestReleaseKernelsThenContextRelease(t *testing.T) {
	q, err := cl.DefaultQueue()
	require.NoError(t, err)
	ctx := q.Context()
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	for range 2 {
		x, err := array.Zeros[float32](q, 8, imm.Allocate)
		require.NoError(t, err)
		require.NoError(t, x.Close())
		array.ReleaseKernels(ctx)
		sets, hooked := array.BuiltSets(ctx)
		assert.Zero(t, sets)
		assert.True(t, hooked)
	}
	x, err := array.Zeros[float32](q, 8, imm.Allocate)
	require.NoError(t, err)
	require.NoError(t, x.Close())
	require.NoError(t, q.Release())
	sets, hooked := array.BuiltSets(ctx)
	assert.Zero(t, sets)
	assert.False(t, hooked)
}
