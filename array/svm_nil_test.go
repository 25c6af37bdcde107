package array_test

import (
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
)

// A nil pointer of an allocator type passed to SVMAlloc is an error at the
// first allocation, as a nil allocator is, not a panic.
func TestSVMAllocTypedNil(t *testing.T) {
	q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
	var a *allocator.SVM
	assert.NotPanics(t, func() {
		_, err := array.Zeros[float32](q, 4, array.SVMAlloc(a))
		assert.Error(t, err)
	})
}
