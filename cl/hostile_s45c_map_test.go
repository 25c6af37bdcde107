package cl_test

import (
	"runtime"
	"testing"
	"weak"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s45cMappedThenReleased maps a region of a new buffer, releases the
// buffer without unmapping it, and returns a weak pointer to it.
func s45cMappedThenReleased(t *testing.T, q *cl.CommandQueue) weak.Pointer[cl.Buffer] {
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, 4096)
	require.NoError(t, err)
	_, err = q.MapBuffer(b, cl.MapRead, 0, 16)
	require.NoError(t, err)
	require.NoError(t, b.Release())
	return weak.Make(b)
}

// A buffer released with a region still mapped stayed in the binding's
// record of mapped regions for the life of the process (only UnmapBuffer
// pruned it; review s45c found it through Pinned.Free). Release forgets
// the regions: the buffer can be collected.
func TestHostileS45cReleaseForgetsMappedRegions(t *testing.T) {
	q := cltest.Queue(t)
	w := s45cMappedThenReleased(t, q)
	for range 3 {
		runtime.GC()
	}
	assert.Nil(t, w.Value(), "a released buffer whose region was still mapped is still reachable")
}
