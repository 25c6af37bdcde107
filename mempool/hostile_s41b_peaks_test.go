package mempool_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/require"
)

// s41bPeakRun runs one goroutine's random requests on several queues,
// with nothing inspecting the pool between them when watch is false, and
// returns the stats at the end and, when watch is true, the highest each
// current reached, read after every operation.
func s41bPeakRun(t *testing.T, arena, drop bool, seed uint64, watch bool) (end mempool.Stats, highs map[string]int64, tallyPeakReq, tallyPeakN int64) {
	qs, p := s41bPool(t, arena, drop)
	defer p.Close()
	rng := rand.New(rand.NewPCG(4141, seed))
	type open struct {
		b    *mempool.PooledBuffer
		size int64
	}
	var list []open
	var req, n int64
	highs = map[string]int64{}
	note := func() {
		s := p.Stats()
		for k, v := range map[string]int64{
			"allocation": s.Allocation.All.Current, "allocation.small": s.Allocation.Small.Current,
			"allocated_bytes": s.AllocatedBytes.All.Current, "requested_bytes": s.RequestedBytes.All.Current,
			"inactive_split": s.InactiveSplit.All.Current, "inactive_split_bytes": s.InactiveSplitBytes.All.Current,
			"inactive_split.small": s.InactiveSplit.Small.Current, "inactive_split_bytes.small": s.InactiveSplitBytes.Small.Current,
			"segment": s.Segment.All.Current, "reserved_bytes": s.ReservedBytes.All.Current,
		} {
			highs[k] = max(highs[k], v)
		}
	}
	sizes := []int64{512, 1000, 4096, 4096, 8192, 70000, 200000}
	for range 600 {
		if len(list) < 12 && rng.IntN(2) == 0 {
			size := sizes[rng.IntN(len(sizes))]
			b, err := p.On(qs[rng.IntN(len(qs))]).Allocate(size)
			require.NoError(t, err)
			list = append(list, open{b, size})
			req += size
			n++
			tallyPeakReq, tallyPeakN = max(tallyPeakReq, req), max(tallyPeakN, n)
		} else if len(list) > 0 {
			i := rng.IntN(len(list))
			require.NoError(t, list[i].b.Close())
			req -= list[i].size
			n--
			list = append(list[:i], list[i+1:]...)
		}
		if watch {
			note()
		}
	}
	for _, o := range list {
		require.NoError(t, o.b.Close())
		if watch {
			note()
		}
	}
	return p.Stats(), highs, tallyPeakReq, tallyPeakN
}

// TestHostileS41bPeaksOneGoroutineManyQueues: package doc, Many
// goroutines: "the counters still see every operation in order ... so
// only a peak across queues used by goroutines at the same time can be
// off". One goroutine on three queues makes its requests in an order,
// so every peak must be exact: the peaks of a pool nobody inspects must
// be those of an identical pool read after every operation, and the
// requested bytes' and allocations' peaks those of the test's own tally.
// It passes (a regression guard for the turn-by-turn cache flush).
func TestHostileS41bPeaksOneGoroutineManyQueues(t *testing.T) {
	for _, arena := range []bool{false, true} {
		for _, drop := range []bool{false, true} {
			for seed := range uint64(3) {
				t.Run(fmt.Sprintf("arena=%v/drop=%v/seed=%d", arena, drop, seed), func(t *testing.T) {
					blind, _, peakReq, peakN := s41bPeakRun(t, arena, drop, seed, false)
					watched, highs, _, _ := s41bPeakRun(t, arena, drop, seed, true)
					require.Equal(t, peakReq, blind.PeakActiveBytes, "peak requested bytes, unwatched")
					require.Equal(t, peakN, blind.Allocation.All.Peak, "peak allocations, unwatched")
					require.Equal(t, peakReq, watched.PeakActiveBytes, "peak requested bytes, watched")
					require.Equal(t, peakN, watched.Allocation.All.Peak, "peak allocations, watched")
					// The watched pool's peaks are at least what was read.
					for k, v := range highs {
						var got int64
						switch k {
						case "allocation":
							got = watched.Allocation.All.Peak
						case "allocation.small":
							got = watched.Allocation.Small.Peak
						case "allocated_bytes":
							got = watched.AllocatedBytes.All.Peak
						case "requested_bytes":
							got = watched.RequestedBytes.All.Peak
						case "inactive_split":
							got = watched.InactiveSplit.All.Peak
						case "inactive_split_bytes":
							got = watched.InactiveSplitBytes.All.Peak
						case "inactive_split.small":
							got = watched.InactiveSplit.Small.Peak
						case "inactive_split_bytes.small":
							got = watched.InactiveSplitBytes.Small.Peak
						case "segment":
							got = watched.Segment.All.Peak
						case "reserved_bytes":
							got = watched.ReservedBytes.All.Peak
						}
						require.Equal(t, v, got, "%s: the peak is the highest value read", k)
					}
					// Same workload, same pool: the same peaks whether read or not.
					for name, pair := range map[string][2]mempool.StatGroup{
						"allocated_bytes":      {blind.AllocatedBytes, watched.AllocatedBytes},
						"inactive_split":       {blind.InactiveSplit, watched.InactiveSplit},
						"inactive_split_bytes": {blind.InactiveSplitBytes, watched.InactiveSplitBytes},
						"reserved_bytes":       {blind.ReservedBytes, watched.ReservedBytes},
					} {
						require.Equal(t, pair[1].All.Peak, pair[0].All.Peak, "%s peak, unwatched vs watched", name)
						require.Equal(t, pair[1].Small.Peak, pair[0].Small.Peak, "%s small peak", name)
						require.Equal(t, pair[1].All.Allocated, pair[0].All.Allocated, "%s allocated", name)
					}
				})
			}
		}
	}
}

// s41bPool returns three in-order queues (the first the pool's own) and
// a pool over an Immediate allocator on the first, WithArena if arena,
// drop safety as drop says.
func s41bPool(t *testing.T, arena, drop bool) ([]*cl.CommandQueue, *mempool.Pool) {
	t.Helper()
	q := cltest.Queue(t)
	qs := []*cl.CommandQueue{q, cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, 0)}
	opts := []mempool.Option{mempool.WithDropSafety(drop)}
	if arena {
		opts = append(opts, mempool.WithArena())
	}
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	p, err := mempool.New(imm, opts...)
	require.NoError(t, err)
	return qs, p
}
