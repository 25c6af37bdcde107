package cl_test

import (
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
)

// SVMAlloc's doc said "Every check clSVMAlloc leaves to its NULL
// result is made here first, so that each says what is wrong", and that
// only a NULL after those checks is an allocation failure. But the
// alignment check (svm.go, `int64(alignment) > 1<<31`) lets through any
// power of two up to 2^31, where the OpenCL 2.0 specification of
// clSVMAlloc allows "a power of two up to the largest data type supported
// by the OpenCL device" (long16: 128 bytes; int16, 64, on an embedded
// device without 64-bit integers). POCL returns NULL for 256 and up, which
// SVMAlloc reports as CL_MEM_OBJECT_ALLOCATION_FAILURE: an invalid
// argument passes for an exhausted device, which a pool answers by freeing
// everything it caches and retrying. (TestSVMAllocNullIsOutOfMemory leaned
// on this very misreport, with 2^31, for its NULL.) Now a NULL for an
// alignment past cl.MaxSVMAlignment is an invalid value; the up-front
// check stays at 2^31, as a runtime may support larger alignments.
func TestHostileS45cSVMAllocAlignmentPastLargestTypeIsNotOutOfMemory(t *testing.T) {
	q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
	ctx := q.Context()

	// Control: the largest legal alignment allocates.
	s, err := ctx.SVMAlloc(0, 256, 128)
	if assert.NoError(t, err, "alignment 128 (long16) is legal") {
		assert.Zero(t, s.Pointer()%128)
		assert.NoError(t, s.Free())
	}

	for _, align := range []int{256, 4096, 1 << 31} {
		s, err := ctx.SVMAlloc(0, 256, align)
		if err == nil {
			// NVIDIA's OpenCL (H100, session 46) allocates with 256
			// and 4096: a runtime may honour larger alignments.
			assert.Zero(t, s.Pointer()%uintptr(align), "alignment %d allocated, so it is honoured", align)
			assert.NoError(t, s.Free())
			continue
		}
		assert.ErrorIs(t, err, cl.ErrInvalidValue, "alignment %d is past the largest data type (128 bytes): an invalid value", align)
		assert.NotErrorIs(t, err, cl.ErrMemObjectAllocationFailure, "alignment %d: not an out-of-memory", align)
	}
}
