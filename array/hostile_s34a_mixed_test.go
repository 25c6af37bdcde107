package array_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PASSES: the cached array kernels switch between SVM and buffer arrays
// (each switch from SVM to buffer renews the runtime kernel: cl/renew.go),
// in random order, mixed within one op where allowed, with the arrays of
// the previous op closed or kept; every result is read back and checked.
func TestHostileS34aArrayMixedSVMAndBuffers(t *testing.T) {
	cltest.Watchdog(t, 200*time.Second)
	q := cltest.Queue(t)
	if q.Context().SVMCapabilities()&cl.SVMCoarseGrainBuffer == 0 {
		t.Skip("no SVM")
	}
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	s, err := allocator.NewImmediateSVM(q, false)
	require.NoError(t, err)
	allocs := []array.Alloc{
		array.Alloc(func(n int64) (array.Block, error) { return imm.Allocate(n) }),
		array.SVMAlloc(s),
	}
	n := 300
	r := rand.New(rand.NewPCG(34, 1))
	var keep []*array.Array[float32]
	for step := range 40 {
		ax, ay := r.IntN(2), r.IntN(2)
		x, err := array.Arange(q, n, float32(step), float32(1), allocs[ax])
		require.NoError(t, err)
		y, err := array.Full(q, n, float32(2), allocs[ay])
		require.NoError(t, err)
		what := fmt.Sprintf("step %d: x svm=%v, y svm=%v", step, ax == 1, ay == 1)
		z, err := array.Add(x, y)
		if err != nil {
			t.Logf("%s: Add refused: %v", what, err)
			require.NoError(t, x.Close())
			require.NoError(t, y.Close())
			continue
		}
		w, err := array.Axpy(float32(3), x, z)
		require.NoError(t, err, what)
		got, err := w.Get()
		require.NoError(t, err, what)
		for i := range n {
			want := 4*(float32(step)+float32(i)) + 2
			if !assert.Equal(t, want, got[i], "%s, item %d", what, i) {
				return
			}
		}
		for _, a := range []*array.Array[float32]{x, y, z, w} {
			if r.IntN(3) == 0 {
				keep = append(keep, a)
			} else {
				require.NoError(t, a.Close())
			}
		}
	}
	require.NoError(t, q.Finish())
	for _, a := range keep {
		require.NoError(t, a.Close())
	}
}
