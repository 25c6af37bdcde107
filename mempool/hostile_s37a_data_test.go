package mempool_test

import (
	"bytes"
	"testing"

	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A small request that takes the top of an own segment's tail (commit
// 108ec60): its sub-buffer and the large block's hold their own bytes, and
// with the sanitizer (the block's guard at the segment's very end) a
// write one byte past the request is found at its offset, and nothing
// else is. Holds today.
func TestHostileS37aTopCutBlockDataAndGuard(t *testing.T) {
	const kib, mib = 1 << 10, 1 << 20
	for _, san := range []bool{false, true} {
		out := &syncBuffer{}
		opts := []mempool.Option{mempool.WithArena()}
		if san {
			opts = append(opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(out))
		}
		f := newFixture(t, nil, opts...)
		big, err := f.pool.Allocate(8 * mib)
		require.NoError(t, err)
		segSize := big.Base().Size()
		t.Logf("segment %d", segSize)
		require.NoError(t, big.Close())
		if san { // push big out of the quarantine
			for range mempool.SanitizerQuarantineBlocks + 1 {
				x, err := f.pool.Allocate(1)
				require.NoError(t, err)
				require.NoError(t, x.Close())
			}
		}
		large, err := f.pool.Allocate(6 * mib)
		require.NoError(t, err)
		require.Zero(t, large.Offset())
		const small = 600 * kib
		s, err := f.pool.Allocate(small)
		require.NoError(t, err)
		t.Logf("small at %d, base %p large base %p", s.Offset(), s.Base(), large.Base())
		require.Same(t, large.Base(), s.Base())
		fill := func(b *mempool.PooledBuffer, v byte, n int64) {
			ev, err := f.q.EnqueueFillBuffer(b.Buffer(), []byte{v}, 0, n)
			require.NoError(t, err)
			require.NoError(t, ev.Release())
		}
		fill(large, 0xCD, 6*mib)
		fill(s, 0xAB, small)
		got := make([]byte, segSize)
		_, err = f.q.EnqueueReadBuffer(large.Base(), true, 0, got)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(got[:6*mib], bytes.Repeat([]byte{0xCD}, 6*mib)))
		assert.True(t, bytes.Equal(got[s.Offset():s.Offset()+small], bytes.Repeat([]byte{0xAB}, small)))
		if san {
			ev, err := f.q.EnqueueFillBuffer(s.Base(), []byte{1}, s.Offset()+small, 1)
			require.NoError(t, err)
			require.NoError(t, ev.Release())
		}
		sid := s.ID()
		require.NoError(t, s.Close())
		require.NoError(t, large.Close())
		if san {
			fs := f.pool.Findings()
			require.Len(t, fs, 1)
			assert.Equal(t, mempool.OutOfBounds, fs[0].Kind)
			assert.Equal(t, sid, fs[0].BlockID)
			assert.Equal(t, int64(small), fs[0].Offset)
		}
		require.NoError(t, mempool.CheckBlockCounts(f.pool))
	}
}
