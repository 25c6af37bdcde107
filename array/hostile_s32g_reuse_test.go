package array_test

import (
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PASSES (exploration): the array kernels are cached per context and keep
// their last arguments; an op after the previous op's arrays were freed
// (their buffers released, their SVM freed) must still run, since every op
// sets all its arguments. Buffers, and SVM where the device has it.
func TestHostileS32gArrayOpsAfterRelease(t *testing.T) {
	cltest.Watchdog(t, 200*time.Second)
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	allocs := map[string]array.Alloc{"buffer": array.Alloc(func(s int64) (array.Block, error) { return imm.Allocate(s) })}
	if q.Context().SVMCapabilities()&cl.SVMCoarseGrainBuffer != 0 {
		s, err := allocator.NewImmediateSVM(q, false)
		require.NoError(t, err)
		allocs["svm"] = array.SVMAlloc(s)
	}
	n := cltest.Size(q, 100, 5000)
	for name, alloc := range allocs {
		for round := 0; round < 3; round++ {
			x, err := array.Arange(q, n, float32(0), float32(1), alloc)
			require.NoError(t, err, name)
			y, err := array.Full(q, n, float32(2), alloc)
			require.NoError(t, err, name)
			z, err := array.Add(x, y)
			require.NoError(t, err, "%s round %d", name, round)
			w, err := array.Axpy(float32(3), x, z)
			require.NoError(t, err, "%s round %d", name, round)
			s, err := array.Sum(w)
			require.NoError(t, err, "%s round %d", name, round)
			assert.InDelta(t, float64(4*(n-1)*n/2+2*n), float64(s), float64(n), name)
			d, err := array.Dot(x, y)
			require.NoError(t, err, "%s round %d", name, round)
			assert.InDelta(t, float64((n-1)*n), float64(d), float64(n), name)
			for _, a := range []*array.Array[float32]{x, y, z, w} {
				require.NoError(t, a.Close())
			}
			require.NoError(t, q.Finish())
		}
	}
}
