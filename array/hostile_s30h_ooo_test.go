package array_test

import (
	"testing"

	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func s30hOOOQueue(t *testing.T) *cl.CommandQueue {
	q := cltest.Queue(t)
	return cltest.SecondQueue(t, q, cl.QueueOutOfOrder)
}

// A chain of dependent element-wise operations and a reduction on an
// out-of-order queue gave wrong results: the package enqueues every kernel
// and transfer with no event wait list and no barrier, so on an
// out-of-order queue (POCL runs its commands concurrently) later commands
// ran before the ones they read (8 chained Adds: up to every element
// wrong; a Sum of 2^18 ones: 0 or garbage), and nothing refused such a
// queue. The package now refuses it at every constructor, with an error
// matching cl.ErrInvalidCommandQueue; an in-order queue of the same device
// still works.
func TestHostileS30hOutOfOrderQueueRefused(t *testing.T) {
	q := s30hOOOQueue(t)
	const n = 1 << 10
	for name, mk := range map[string]func() (*array.Array[float32], error){
		"Empty":    func() (*array.Array[float32], error) { return array.Empty[float32](q, n, array.Alloc(nil)) },
		"Zeros":    func() (*array.Array[float32], error) { return array.Zeros[float32](q, n, array.Alloc(nil)) },
		"Full":     func() (*array.Array[float32], error) { return array.Full[float32](q, n, 1, array.Alloc(nil)) },
		"Arange":   func() (*array.Array[float32], error) { return array.Arange[float32](q, n, 0, 1, array.Alloc(nil)) },
		"FromHost": func() (*array.Array[float32], error) { return array.FromHost(q, make([]float32, n), array.Alloc(nil)) },
	} {
		a, err := mk()
		assert.ErrorIs(t, err, cl.ErrInvalidCommandQueue, name)
		assert.Nil(t, a, name)
	}
	in := cltest.Queue(t)
	x, err := array.Full[float32](in, n, 1, array.Alloc(nil))
	require.NoError(t, err)
	defer x.Close()
	sum, err := array.Sum(x)
	require.NoError(t, err)
	assert.Equal(t, float32(n), sum)
}
