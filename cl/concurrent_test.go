package cl_test

import (
	"sync"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
)

// TestConcurrentUse has goroutines create, fill, read and release buffers on
// one context and queue at once. Oclgrind corrupts its heap under this
// unless the binding serializes its calls.
func TestConcurrentUse(t *testing.T) {
	q := cltest.Queue(t)
	assert.Equal(t, cltest.Simulator(q), q.Context().Serialized())
	rounds := cltest.Size(q, 200, 2000)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := make([]byte, 64)
			for i := range rounds {
				b, err := q.Context().CreateBuffer(cl.MemReadWrite, 64)
				if !assert.NoError(t, err) {
					return
				}
				if i%10 == 0 {
					assert.NoError(t, q.WriteBuffer(b, 0, []byte{byte(w)}))
					assert.NoError(t, q.ReadBuffer(b, 0, got))
					assert.Equal(t, byte(w), got[0])
				}
				assert.NoError(t, b.Release())
			}
		}()
	}
	wg.Wait()
}
