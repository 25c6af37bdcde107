package allocator_test

// Session s38b: allocator.HostOf's doc: through "wrappers whose Unwrap
// returns an Allocator", a user's too.

import (
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s38bWrapper is a user's wrapper with an Unwrap returning an Allocator:
// the kind walk follows.
type s38bWrapper struct{ inner allocator.Allocator }

func (w s38bWrapper) Allocate(n int64) (*cl.Buffer, error) { return w.inner.Allocate(n) }
func (w s38bWrapper) Free(b *cl.Buffer) error              { return w.inner.Free(b) }
func (w s38bWrapper) Unwrap() allocator.Allocator          { return w.inner }

// A user's wrapper whose Unwrap returns an Allocator is seen through,
// under a Budget and a Counting too.
func TestHostileS38bHostOfThroughUserWrapper(t *testing.T) {
	q := cltest.Queue(t)
	pinned, err := allocator.NewPinned(q)
	require.NoError(t, err)
	buf, err := pinned.Allocate(64)
	require.NoError(t, err)
	defer pinned.Free(buf)
	for _, a := range []allocator.Allocator{s38bWrapper{pinned}, allocator.NewCounting(s38bWrapper{allocator.NewBudget(pinned, 1<<20)})} {
		host := allocator.HostOf(a)
		require.NotNil(t, host)
		assert.Len(t, host(buf), 64)
	}
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	assert.Nil(t, allocator.HostOf(s38bWrapper{imm}))
	assert.Nil(t, allocator.HostOf(s38bWrapper{}), "a wrapper of nothing")
}
