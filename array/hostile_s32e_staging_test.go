package array_test

import (
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// offBlock is a block of a Pinned's buffer at an offset it says, of the
// size it says (a hostile or buggy pool).
type offBlock struct {
	buf       *cl.Buffer
	off, size int64
	closed    *int
}

func (b offBlock) Buffer() *cl.Buffer { return b.buf }
func (b offBlock) Base() *cl.Buffer   { return b.buf }
func (b offBlock) Offset() int64      { return b.off }
func (b offBlock) Size() int64        { return b.size }
func (b offBlock) Close() error       { *b.closed++; return nil }

// Staging takes over blocks whose offset is past the end, or negative:
// Alloc's doc: "A call whose allocator panics, or returns a block of
// fewer bytes than it asked for (the block is closed), fails with an
// error." FAILED on 62b8031 for the negative offset: take computes has = len(host) -
// off (more than the buffer), takes min with the block's Size, and
// slices host[off:off+size] with off < 0: a slice-bounds panic escapes
// NewPinnedSlice and GetPinned instead of an error, and the block is
// never closed.
func TestHostileS32eStagingOffsets(t *testing.T) {
	q := cltest.Queue(t)
	p, err := allocator.NewPinned(q)
	require.NoError(t, err)
	buf, err := p.Allocate(1024)
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Free(buf)) }()
	x, err := array.Arange[float32](q, 16, 0, 1, array.Alloc(nil))
	require.NoError(t, err)
	defer x.Close()
	for _, c := range []struct {
		name      string
		off, size int64
		ok        bool
	}{
		{"past the end", 2000, 64, false},
		{"at the end", 1024, 64, false},
		{"straddling the end", 1000, 64, false},
		{"inside", 512, 64, true},
		{"negative", -64, 1024 + 64, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			closed := 0
			s, err := array.NewStaging(p, func(size int64) (offBlock, error) {
				return offBlock{buf: buf, off: c.off, size: c.size, closed: &closed}, nil
			})
			require.NoError(t, err)
			var gerr error
			require.NotPanics(t, func() { gerr = x.GetPinned(s, make([]float32, 16)) })
			if c.ok {
				assert.NoError(t, gerr)
			} else {
				assert.Error(t, gerr)
				t.Logf("%v", gerr)
			}
			assert.Equal(t, 1, closed, "the block closed once")
		})
	}
}
