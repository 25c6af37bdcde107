package mempool_test

import (
	"fmt"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s39aNilAlloc is an allocator that answers every request with no buffer
// and no error, as allocator.Allocator answers only a request of 0 bytes
// (a wrapper that mimics PyOpenCL's allocators, which return None).
type s39aNilAlloc struct{ allocator.Allocator }

func (s39aNilAlloc) Allocate(int64) (*cl.Buffer, error) { return nil, nil }

// FAILS (low severity: the allocator breaks its own contract): a pool over
// an allocator that returns a nil buffer and no error for a positive size
// hands out a PooledBuffer with no memory at all (Buffer and Base nil,
// though not closed) and no error, and counts the missing segment as
// managed memory (1023 bytes with bins, a 32 KiB segment in an arena)
// and a device allocation. The pool checks its allocator for panics
// (PanicError) and typed nils (New), but not this.
//
// Contracts: Pool.Allocate: "Allocate returns a buffer of at least size
// bytes"; PooledBuffer.Buffer: "Buffer returns a device buffer covering
// exactly the block, or nil after Close"; Stats.DeviceAllocs: "buffers
// the allocator handed out". allocator.Allocator: "Size 0 returns a nil
// buffer and no error" (only 0).
//
// Cause (guess): mempool/ladder.go, Pool.grow takes (mem{}, nil) from
// allocateSegment as a segment and commits it; it could refuse a nil
// buffer (or SVM) for a positive size as an error.
func TestHostileS39aAllocatorReturningNothing(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			p, err := mempool.New(s39aNilAlloc{imm}, policyOptions(arena)...)
			require.NoError(t, err)
			defer func() { assert.NoError(t, p.Close()) }()
			b, err := p.Allocate(1000)
			if err == nil {
				defer func() { assert.NoError(t, b.Close()) }()
				assert.NotNil(t, b.Buffer(), "an open block has a buffer")
				assert.NotNil(t, b.Base())
			}
			assert.Error(t, err, "no buffer came from the allocator: the request fails")
			assert.Zero(t, p.Stats().ManagedBytes, "no memory is managed")
		})
	}
}
