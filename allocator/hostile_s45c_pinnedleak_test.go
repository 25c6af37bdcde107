package allocator_test

import (
	"runtime"
	"testing"
	"weak"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s45cPinnedReleasedBehindItsBack allocates a pinned buffer, releases it
// behind p's back (as arr.Buffer().Release() would), frees it through p,
// and returns a weak pointer to it: nothing should hold the buffer then.
func s45cPinnedReleasedBehindItsBack(t *testing.T, p *allocator.Pinned) weak.Pointer[cl.Buffer] {
	buf, err := p.Allocate(4096)
	require.NoError(t, err)
	require.NoError(t, buf.Release())
	err = p.Free(buf)
	require.ErrorIs(t, err, allocator.ErrFreed, "Pinned.Free's doc: one released behind its back is forgotten, with ErrFreed")
	assert.Nil(t, p.Host(buf))
	return weak.Make(buf)
}

// Pinned.Free's doc says a buffer "released behind its back
// (buf.Release) is forgotten". Pinned forgets it, but Free skips the unmap
// for a released buffer (pinned.go, `if buf.Released() { return released() }`),
// and the unmap was what removed the buffer from cl's table of outstanding
// mappings (cl/map.go's `mapped.by`, which only UnmapBuffer prunes): the
// *cl.Buffer, and its mapping record, stay reachable for the life of the
// process, one per such buffer. A pool over a Pinned whose arrays are
// released directly leaked a Buffer each time (review s45c). Now a
// buffer's release forgets its mapped regions (cl.Buffer.Release).
func TestHostileS45cPinnedReleasedBehindItsBackStaysReachable(t *testing.T) {
	q := cltest.Queue(t)
	p, err := allocator.NewPinned(q)
	require.NoError(t, err)

	w := s45cPinnedReleasedBehindItsBack(t, p)
	for range 3 {
		runtime.GC()
	}
	assert.Nil(t, w.Value(), "the buffer Pinned.Free forgot is still reachable after GC: something still holds it")

	// The control: a buffer freed the ordinary way is collected.
	buf, err := p.Allocate(4096)
	require.NoError(t, err)
	require.NoError(t, p.Free(buf))
	wc := weak.Make(buf)
	buf = nil
	for range 3 {
		runtime.GC()
	}
	assert.Nil(t, wc.Value(), "control: a buffer freed through Pinned.Free is collected")
}
