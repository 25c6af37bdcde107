package mempool_test

import (
	"fmt"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/require"
)

// TestHostileS41bStopHoldingThenIdle: after StopHolding, "every later
// Close free[s] its block at once" (package doc, Lifecycle). Blocks of
// several queues, some sharing arena segments, closed after StopHolding:
// once the last is closed the pool holds nothing, manages nothing, and
// every device buffer is freed; the snapshot agrees at every step. It
// passes (a regression guard).
func TestHostileS41bStopHoldingThenIdle(t *testing.T) {
	for _, c := range []struct{ arena, drop, san bool }{{false, true, false}, {true, true, false}, {true, false, false}, {true, true, true}, {false, true, true}} {
		t.Run(fmt.Sprintf("arena=%v/drop=%v/san=%v", c.arena, c.drop, c.san), func(t *testing.T) {
			q := cltest.Queue(t)
			qs := []*cl.CommandQueue{q, cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, cl.QueueOutOfOrder)}
			opts := []mempool.Option{mempool.WithDropSafety(c.drop)}
			if c.arena {
				opts = append(opts, mempool.WithArena())
			}
			if c.san {
				opts = append(opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil))
			}
			imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
			require.NoError(t, err)
			count := allocator.NewCounting(imm)
			p, err := mempool.New(count, opts...)
			require.NoError(t, err)
			defer func() { require.NoError(t, p.Close()) }()
			var bs []*mempool.PooledBuffer
			for i := range 24 {
				b, err := p.On(qs[i%3]).Allocate([]int64{512, 4096, 5000, 70000}[i%4])
				require.NoError(t, err)
				bs = append(bs, b)
			}
			// Some back before StopHolding: cached, held.
			for _, b := range bs[:8] {
				require.NoError(t, b.Close())
			}
			require.NoError(t, p.StopHolding())
			s := p.Stats()
			require.False(t, s.Holding)
			s41bCheckSnapshot(t, "after StopHolding", s, p.Snapshot())
			for i, b := range bs[8:] {
				require.NoError(t, b.Close())
				s := p.Stats()
				s41bCheckStats(t, fmt.Sprint("close ", i), s)
				s41bCheckSnapshot(t, fmt.Sprint("close ", i), s, p.Snapshot())
			}
			s = p.Stats()
			require.Zero(t, s.ActiveBlocks)
			require.Zero(t, s.HeldBlocks, "nothing held after StopHolding")
			require.Zero(t, s.HeldBytes)
			require.Zero(t, s.ManagedBytes)
			require.Zero(t, s.InactiveSplit.All.Current)
			require.Zero(t, count.Stats().Live, "every device buffer freed")
			// A request after StopHolding is served, and its Close frees it.
			b, err := p.On(qs[1]).Allocate(4096)
			require.NoError(t, err)
			require.NoError(t, b.Close())
			s = p.Stats()
			require.Zero(t, s.HeldBlocks)
			require.Zero(t, s.ManagedBytes)
			require.Zero(t, count.Stats().Live)
		})
	}
}
