package mempool_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
)

// s41cOp is one step of a scripted sequence, drawn once and run on
// several pools.
type s41cOp struct {
	kind  int   // 0 allocate, 1 close, 2 pool FreeHeld, 3 queue FreeHeld, 4 ResetPeak, 5 Snapshot, 6 ResetAccumulated
	q     int   // allocator index
	size  int64 // allocate
	which int   // close: index into open (from the end)
}

// s41cScript draws a sequence biased to round trips of split blocks on
// several queues: allocate-close-allocate of the same size on one queue,
// runs on one queue then another, and long stretches with no flush.
func s41cScript(seed uint64, nq, steps int, sizes []int64, extras bool) []s41cOp {
	rng := rand.New(rand.NewPCG(seed, 41))
	var ops []s41cOp
	open := 0
	for len(ops) < steps {
		r := rng.IntN(100)
		switch {
		case r < 20 && open > 0: // round trips: close newest and allocate its size again, k times
			q := rng.IntN(nq)
			size := sizes[rng.IntN(len(sizes))]
			ops = append(ops, s41cOp{kind: 0, q: q, size: size})
			open++
			k := 1 + rng.IntN(40)
			if rng.IntN(6) == 0 {
				k = 100 + rng.IntN(200)
			}
			for range k {
				ops = append(ops, s41cOp{kind: 1, which: 0})
				ops = append(ops, s41cOp{kind: 0, q: q, size: size})
			}
			if rng.IntN(2) == 0 {
				ops = append(ops, s41cOp{kind: 1, which: 0})
				open--
			}
		case r < 55:
			ops = append(ops, s41cOp{kind: 0, q: rng.IntN(nq), size: sizes[rng.IntN(len(sizes))]})
			open++
		case r < 93:
			if open == 0 {
				continue
			}
			w := rng.IntN(min(open, 4))
			if rng.IntN(4) == 0 {
				w = rng.IntN(open)
			}
			ops = append(ops, s41cOp{kind: 1, which: w})
			open--
		case !extras:
		case r < 95:
			ops = append(ops, s41cOp{kind: 2})
		case r < 97:
			ops = append(ops, s41cOp{kind: 3, q: rng.IntN(nq)})
		case r < 98:
			ops = append(ops, s41cOp{kind: 4})
		case r < 99:
			ops = append(ops, s41cOp{kind: 5})
		default:
			ops = append(ops, s41cOp{kind: 6})
		}
	}
	return ops
}

type s41cResult struct {
	at    []mempool.Stats // Stats at each ResetPeak/ResetAccumulated/end (read in both pools)
	final mempool.Stats
}

// s41cRun runs ops on p over allocs (and frees: p's and each queue's
// FreeHeld); with look, it reads Stats after every step.
func s41cRun(t *testing.T, p *mempool.Pool, allocs []func(int64) (*mempool.PooledBuffer, error), frees []func() error, ops []s41cOp, look bool) s41cResult {
	var res s41cResult
	var open []*mempool.PooledBuffer
	for i, op := range ops {
		switch op.kind {
		case 0:
			b, err := allocs[op.q](op.size)
			require.NoError(t, err, "step %d", i)
			open = append(open, b)
		case 1:
			j := len(open) - 1 - op.which
			require.NoError(t, open[j].Close(), "step %d", i)
			open = append(open[:j], open[j+1:]...)
		case 2:
			require.NoError(t, p.FreeHeld())
		case 3:
			require.NoError(t, frees[op.q]())
		case 4:
			res.at = append(res.at, p.Stats())
			p.ResetPeak()
		case 5:
			_ = p.Snapshot()
		case 6:
			res.at = append(res.at, p.Stats())
			p.ResetAccumulated()
		}
		if look {
			_ = p.Stats()
		}
	}
	for _, b := range open {
		require.NoError(t, b.Close())
		if look {
			_ = p.Stats()
		}
	}
	res.at = append(res.at, p.Stats())
	require.NoError(t, mempool.CheckBlockCounts(p))
	return res
}

// s41cCompare requires two Stats to agree on every torch group (peaks,
// totals), the held figures and each queue's requests, hits and cached.
func s41cCompare(t *testing.T, what string, want, got mempool.Stats) {
	t.Helper()
	require.Equal(t, []int64{want.DeviceAllocs, want.DeviceFrees, want.Misses, want.Hits}, []int64{got.DeviceAllocs, got.DeviceFrees, got.Misses, got.Hits}, "%s: the same choices", what)
	require.Equal(t, want.HeldBlocks, got.HeldBlocks, "%s: HeldBlocks", what)
	require.Equal(t, want.HeldBytes, got.HeldBytes, "%s: HeldBytes", what)
	require.Equal(t, want.PeakActiveBytes, got.PeakActiveBytes, "%s: PeakActiveBytes", what)
	wg, gg := hsGroups(want), hsGroups(got)
	for _, name := range []string{"allocation", "allocated_bytes", "requested_bytes", "active", "active_bytes", "inactive_split", "inactive_split_bytes", "segment", "reserved_bytes"} {
		require.Equal(t, wg[name], gg[name], "%s: %s (stepwise vs batched)", what, name)
	}
	require.Equal(t, len(want.Queues), len(got.Queues))
	for i := range want.Queues {
		w, g := want.Queues[i], got.Queues[i]
		require.Equal(t, []int64{w.Requests, w.Hits, w.Cached}, []int64{g.Requests, g.Hits, g.Cached}, "%s: queue %d requests, hits, cached", what, i)
	}
}

// TestHostileS41cBatchedAsStepwiseQueues: one goroutine on the pool's own
// allocator and two in-order queues (and, some runs, an out-of-order
// one), long round trips of split blocks, FreeHeld of the pool and of a
// queue, ResetPeak, ResetAccumulated and Snapshot in between. A pool
// whose Stats is read after every step (each read flushes every cache)
// and one read only where both are must show the same statistics, peaks
// and totals included: the doc of qflush.go says one goroutine's
// operations on several queues count in its order, peaks included.
func TestHostileS41cBatchedAsStepwiseQueues(t *testing.T) {
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	q3 := cltest.SecondQueue(t, q, 0)
	q4 := cltest.SecondQueue(t, q, cl.QueueOutOfOrder)
	for _, tc := range []struct {
		name   string
		big    int64 // a buffer kept open: the caches' share grows with the pool
		sizes  []int64
		extras bool
		ooo    bool
	}{
		{"small pool", 0, []int64{512, 4096, 4096, 8192, 20 << 10}, true, false},
		{"shares", 48 << 20, []int64{4096, 8192, 64 << 10, 128 << 10, 200 << 10, 300 << 10}, true, false},
		{"shares ooo", 48 << 20, []int64{4096, 64 << 10, 200 << 10}, true, true},
		{"no extras", 48 << 20, []int64{4096, 8192, 64 << 10, 128 << 10, 200 << 10}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seeds, n := uint64(6), 700
			nq := 3
			if tc.ooo {
				// An out-of-order queue's handovers wait on the host
				// (POCL: minutes for six seeds of 700 steps).
				seeds, n, nq = 1, 150, 4
			}
			for seed := range seeds {
				ops := s41cScript(seed, nq, n, tc.sizes, tc.extras)
				var res [2]s41cResult
				for i, look := range []bool{true, false} {
					p := hsPool(t, q, mempool.WithArena())
					var keep *mempool.PooledBuffer
					if tc.big > 0 {
						keep = hsAlloc(t, p.Allocate, tc.big)
					}
					a2, a3, a4 := p.On(q2), p.On(q3), p.On(q4)
					allocs := []func(int64) (*mempool.PooledBuffer, error){p.Allocate, a2.Allocate, a3.Allocate, a4.Allocate}
					frees := []func() error{p.FreeHeld, a2.FreeHeld, a3.FreeHeld, a4.FreeHeld}
					res[i] = s41cRun(t, p, allocs, frees, ops, look)
					if keep != nil {
						require.NoError(t, keep.Close())
					}
					require.NoError(t, p.Close())
				}
				require.Equal(t, len(res[0].at), len(res[1].at))
				for k := range res[0].at {
					s41cCompare(t, fmt.Sprintf("seed %d reading %d of %d", seed, k, len(res[0].at)), res[0].at[k], res[1].at[k])
				}
			}
		})
	}
}

// TestHostileS41cBatchedAsStepwiseManyQueues: as
// TestHostileS41cBatchedAsStepwiseQueues, with ten in-order queues and
// the pool's own queue through On (its turns pass maxTurns between
// flushes), with and without drop safety.
func TestHostileS41cBatchedAsStepwiseManyQueues(t *testing.T) {
	q := cltest.Queue(t)
	queues := []*cl.CommandQueue{q}
	for range 10 {
		queues = append(queues, cltest.SecondQueue(t, q, 0))
	}
	for _, tc := range []struct {
		name string
		opts []mempool.Option
		big  int64
	}{
		{"drop safety", []mempool.Option{mempool.WithArena()}, 48 << 20},
		{"no drop safety", []mempool.Option{mempool.WithArena(), mempool.WithDropSafety(false)}, 48 << 20},
		{"small", []mempool.Option{mempool.WithArena(), mempool.WithDropSafety(false)}, 0},
		{"max split", []mempool.Option{mempool.WithArena(), mempool.WithMaxSplitSize(2 << 20)}, 48 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := range uint64(4) {
				nq := len(queues) + 1
				ops := s41cScript(seed+100, nq, 900, []int64{512, 4096, 8192, 64 << 10, 128 << 10, 200 << 10}, true)
				var res [2]s41cResult
				for i, look := range []bool{true, false} {
					p := hsPool(t, q, tc.opts...)
					var keep *mempool.PooledBuffer
					if tc.big > 0 {
						keep = hsAlloc(t, p.Allocate, tc.big)
					}
					allocs := []func(int64) (*mempool.PooledBuffer, error){p.Allocate}
					frees := []func() error{p.FreeHeld}
					for _, qq := range queues {
						a := p.On(qq)
						allocs = append(allocs, a.Allocate)
						frees = append(frees, a.FreeHeld)
					}
					res[i] = s41cRun(t, p, allocs, frees, ops, look)
					if keep != nil {
						require.NoError(t, keep.Close())
					}
					require.NoError(t, p.Close())
				}
				require.Equal(t, len(res[0].at), len(res[1].at))
				for k := range res[0].at {
					s41cCompare(t, fmt.Sprintf("seed %d reading %d of %d", seed, k, len(res[0].at)), res[0].at[k], res[1].at[k])
				}
			}
		})
	}
}
