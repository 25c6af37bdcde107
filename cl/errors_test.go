package cl_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/stretchr/testify/assert"
)

func TestStatusPrintsNameAndNumber(t *testing.T) {
	tests := []struct {
		s    cl.Status
		want string
	}{
		{cl.ErrOutOfResources, "CL_OUT_OF_RESOURCES (-5)"},
		{cl.ErrMemObjectAllocationFailure, "CL_MEM_OBJECT_ALLOCATION_FAILURE (-4)"},
		{cl.ErrOutOfHostMemory, "CL_OUT_OF_HOST_MEMORY (-6)"},
		{cl.ErrInvalidBufferSize, "CL_INVALID_BUFFER_SIZE (-61)"},
		{cl.ErrInvalidValue, "CL_INVALID_VALUE (-30)"},
		{cl.ErrMaxSizeRestrictionExceeded, "CL_MAX_SIZE_RESTRICTION_EXCEEDED (-72)"},
		{cl.Status(-9999), "CL_UNKNOWN_STATUS (-9999)"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.s.Error())
	}
}

func TestCallErrorMatchesItsStatusThroughWrapping(t *testing.T) {
	var err error = &cl.CallError{Call: "clCreateBuffer", Status: cl.ErrOutOfResources}
	assert.Equal(t, "clCreateBuffer: CL_OUT_OF_RESOURCES (-5)", err.Error())
	wrapped := fmt.Errorf("allocating 4096 bytes: %w", err)
	assert.ErrorIs(t, wrapped, cl.ErrOutOfResources)
	assert.NotErrorIs(t, wrapped, cl.ErrMemObjectAllocationFailure)
	var ce *cl.CallError
	assert.True(t, errors.As(wrapped, &ce))
	assert.Equal(t, "clCreateBuffer", ce.Call)
}

func TestIsOutOfMemory(t *testing.T) {
	for _, s := range []cl.Status{cl.ErrMemObjectAllocationFailure, cl.ErrOutOfResources, cl.ErrOutOfHostMemory} {
		assert.True(t, s.IsOutOfMemory(), s.Error())
	}
	for _, s := range []cl.Status{cl.ErrInvalidValue, cl.ErrInvalidBufferSize, cl.Success} {
		assert.False(t, s.IsOutOfMemory(), s.Error())
	}
}

func TestMemFlagsString(t *testing.T) {
	assert.Equal(t, "READ_WRITE", cl.MemReadWrite.String())
	assert.Equal(t, "READ_ONLY|COPY_HOST_PTR", (cl.MemReadOnly | cl.MemCopyHostPtr).String())
	assert.Equal(t, "0", cl.MemFlags(0).String())
	assert.Equal(t, "READ_WRITE|0x100000", (cl.MemReadWrite | 1<<20).String())
}
