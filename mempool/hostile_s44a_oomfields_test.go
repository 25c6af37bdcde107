package mempool_test

import (
	"errors"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s44aHidden is an allocator that says nothing of its context, device or
// queue (no Context, Queue or Unwrap method): the pool knows no device.
type s44aHidden struct{ a allocator.Allocator }

func (h s44aHidden) Allocate(n int64) (*cl.Buffer, error) { return h.a.Allocate(n) }
func (h s44aHidden) Free(b *cl.Buffer) error              { return h.a.Free(b) }

// Review s44a: the *OutOfMemoryError of a request over the largest size (the
// device's largest buffer; over an allocator that names no device, 2^60
// bytes) reported nothing active, nothing held and nothing managed, whatever
// the pool held: refuseSize filled in only Requested, AllocSize,
// DeviceMaxAlloc, DeviceTotal and Limit. Over an allocator that names no
// device its message was the ordinary one, and said so in words: "0 blocks
// active holding 0 bytes requested, 0 blocks held (0 bytes), 0 bytes
// managed".
//
// errors.go, OutOfMemoryError: "the error of a request the pool could not
// serve: what was asked, and where the memory is", with "ActiveBlocks int
// // blocks in use", "HeldBlocks ... blocks held for reuse", "ManagedBytes
// ... bytes the pool owns"; README: "An out-of-memory error says what was
// asked, what is active, what is held (and its largest bin), the limit and
// the device's total memory."
func TestHostileS44aOversizeOOMErrorSaysWhatIsActiveAndHeld(t *testing.T) {
	q := cltest.Queue(t)
	for _, tc := range []struct {
		name string
		pool func(t *testing.T) *mempool.Pool
		over func(p *mempool.Pool) int64
	}{
		{"device known", func(t *testing.T) *mempool.Pool { return pooltest.New(t, q) },
			func(p *mempool.Pool) int64 { return p.Device().MaxMemAllocSize + 1 }},
		{"no device", func(t *testing.T) *mempool.Pool {
			p, _ := pooltest.NewOver(t, q, func(a allocator.Allocator) allocator.Allocator { return s44aHidden{a} })
			require.Nil(t, p.Device())
			return p
		}, func(*mempool.Pool) int64 { return 1<<60 + 1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.pool(t)
			active, err := p.Allocate(4096)
			require.NoError(t, err)
			defer func() { require.NoError(t, active.Close()) }()
			held, err := p.Allocate(3 << 20) // closed: held (too large for a queue cache)
			require.NoError(t, err)
			require.NoError(t, held.Close())
			s := p.Stats()
			require.Equal(t, 1, s.ActiveBlocks)
			require.Positive(t, s.HeldBlocks)

			_, err = p.Allocate(tc.over(p))
			var oom *mempool.OutOfMemoryError
			require.True(t, errors.As(err, &oom), "%v", err)
			t.Logf("error: %v", err)
			assert.Equal(t, s.ActiveBlocks, oom.ActiveBlocks, "ActiveBlocks: blocks in use")
			assert.Equal(t, s.ActiveBytes, oom.ActiveBytes, "ActiveBytes")
			assert.Equal(t, s.HeldBlocks, oom.HeldBlocks, "HeldBlocks: the request freed nothing")
			assert.Equal(t, s.HeldBytes, oom.HeldBytes, "HeldBytes")
			assert.Equal(t, s.ManagedBytes, oom.ManagedBytes, "ManagedBytes: bytes the pool owns")
			assert.Positive(t, oom.LargestHeldSize, "largest held")
		})
	}
}
