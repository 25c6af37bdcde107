package mempool_test

import (
	"github.com/clpool/clpool/cl"
	"math/rand/v2"
	"testing"

	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/require"
)

// A random run of an arena pool over the test device, with requests up to
// 8 MiB so that own segments are made and small requests take the top of
// their tails (commit 108ec60): each buffer is filled through Buffer (its
// sub-buffer, checked to sit at the block's Offset in Base) and read back
// through Base at Offset before Close; after every step the block counts,
// Snapshot against MemoryStats (peerCheckSnapshot) and the inactive split
// in every view agree; at the end every sub-buffer handed out is released
// by the pool's Close (parked caches included). Holds today.
func TestHostileS37aPoolRandomTopCuts(t *testing.T) {
	for _, opts := range [][]mempool.Option{
		{mempool.WithArena()},
		{mempool.WithArena(), mempool.WithoutQueueCaches()},
	} {
		f := newFixture(t, nil, opts...)
		rng := rand.New(rand.NewPCG(5, 37))
		type ob struct {
			b *mempool.PooledBuffer
			v byte
			n int64
		}
		var open []ob
		tops := 0
		subs := map[*cl.Buffer]bool{}
		defer func() { t.Logf("tops %d", tops) }()
		for step := range 400 {
			if len(open) > 0 && rng.IntN(5) < 2 {
				i := rng.IntN(len(open))
				o := open[i]
				got := make([]byte, 1)
				_, err := f.q.EnqueueReadBuffer(o.b.Base(), true, o.b.Offset(), got)
				require.NoError(t, err)
				require.Equal(t, o.v, got[0], "step %d: first byte", step)
				_, err = f.q.EnqueueReadBuffer(o.b.Base(), true, o.b.Offset()+o.n-1, got)
				require.NoError(t, err)
				require.Equal(t, o.v, got[0], "step %d: last byte", step)
				require.NoError(t, o.b.Close())
				open = append(open[:i], open[i+1:]...)
			} else {
				var n int64
				switch rng.IntN(3) {
				case 0:
					n = int64(rng.IntN(8<<20) + 1)
				case 1:
					n = int64(rng.IntN(1<<20) + 1)
				default:
					n = int64(rng.IntN(64<<10) + 1)
				}
				b, err := f.pool.Allocate(n)
				require.NoError(t, err)
				v := byte(step%250 + 1)
				buf := b.Buffer()
				require.NotNil(t, buf)
				if par, off := buf.Parent(); par != nil {
					subs[buf] = true
					require.Same(t, b.Base(), par)
					require.Equal(t, b.Offset(), off, "step %d: the sub-buffer is at the block's offset", step)
					require.GreaterOrEqual(t, buf.Size(), n)
				}
				ev, err := f.q.EnqueueFillBuffer(buf, []byte{v}, 0, n)
				require.NoError(t, err)
				require.NoError(t, ev.Release())
				open = append(open, ob{b, v, n})
				for _, sg := range f.pool.Snapshot().Segments {
					for i, bs := range sg.Blocks {
						if bs.ID == b.ID() && i > 0 && sg.Blocks[i-1].State != mempool.StateActive && i == len(sg.Blocks)-1 {
							tops++
						}
					}
				}
			}
			require.NoError(t, mempool.CheckBlockCounts(f.pool))
			peerCheckSnapshot(t, f.pool, "step")
			st, mem, snap, _ := splitOf(t, f.pool)
			require.Equal(t, st, mem)
			require.Equal(t, st, snap)
		}
		for _, o := range open {
			require.NoError(t, o.b.Close())
		}
		require.NoError(t, f.pool.Close())
		left := 0
		for b := range subs {
			if !b.Released() {
				left++
			}
		}
		require.Zero(t, left, "of %d sub-buffers, some not released after Close", len(subs))
	}
}
