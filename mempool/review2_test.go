package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// snapCounts counts the held and active blocks of a snapshot.
func review2SnapCounts(s mempool.Snapshot) (active, held int, heldBytes int64) {
	for _, seg := range s.Segments {
		for _, b := range seg.Blocks {
			switch b.State {
			case mempool.StateActive:
				active++
			default:
				held++
				heldBytes += b.Size
			}
		}
	}
	return
}

// Closing many small blocks of one queue makes its arena cache evict by
// count and by bytes; Stats, Snapshot and the queue's Cached agree after.
func TestReview2EvictionCountsAgree(t *testing.T) {
	for _, drop := range []bool{true, false} {
		q := cltest.Queue(t)
		p := pooltest.New(t, q, mempool.WithArena(), mempool.WithDropSafety(drop))
		var bs []*mempool.PooledBuffer
		for i := range 200 {
			b, err := p.Allocate(int64(256 * (1 + i%37)))
			require.NoError(t, err)
			bs = append(bs, b)
		}
		for i, b := range bs {
			require.NoError(t, b.Close())
			s := p.Stats()
			qs := queueStats(t, s, q)
			assert.LessOrEqual(t, qs.Cached, int64(16), "step %d", i)
			assert.GreaterOrEqual(t, qs.Cached, int64(0), "step %d", i)
			assert.Equal(t, len(bs)-i-1, s.ActiveBlocks, "step %d", i)
		}
		s := p.Stats()
		sn := p.Snapshot()
		a, h, hb := review2SnapCounts(sn)
		assert.Equal(t, 0, a)
		assert.Equal(t, s.HeldBytes, hb)
		_ = h
		require.NoError(t, p.FreeHeld())
		assert.Zero(t, queueStats(t, p.Stats(), q).Cached)
	}
}

// Findings racing Closes of blocks and the pool's Close: no hang, no
// finding on correct use, every device buffer freed (pooltest checks).
func TestReview2SanitizerFindingsRacingClose(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q, mempool.WithArena(), mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil))
	var bs []*mempool.PooledBuffer
	for i := range 300 {
		b, err := p.Allocate(int64(64 + i*13))
		require.NoError(t, err)
		bs = append(bs, b)
	}
	var fs []mempool.Finding
	ok := withinWork(t, "Closes racing Findings", func() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 20 {
				fs = append(fs, p.Findings()...)
			}
		}()
		for _, b := range bs {
			_ = b.Close()
		}
		<-done
	})
	if !ok {
		return
	}
	require.True(t, within(t, "Findings", func() { fs = append(fs, p.Findings()...) }))
	assert.Empty(t, fs)
}
