package memhooks_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/require"
)

// TestHostileS41bTraceMatchesStats records a pool's trace (TraceRecorder,
// registered before the first request) through one goroutine's random
// work on several queues, under a budget that refuses, with FreeHeld
// and SetLimit, then checks the trace's
// summary against the pool's Stats: the recorder's doc says the trace
// has "the pool's own managed bytes at every moment", and trace.Summary's
// that PeakSegmentBytes is "the pool's peak managed bytes". It passes (a
// regression guard): from one goroutine, the trace's figures are the pool's.
func TestHostileS41bTraceMatchesStats(t *testing.T) {
	for _, c := range []struct{ arena, drop, san bool }{
		{false, true, false}, {true, true, false}, {true, false, false}, {false, false, false}, {true, true, true}, {false, true, true},
	} {
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("arena=%v/drop=%v/san=%v/seed=%d", c.arena, c.drop, c.san, seed), func(t *testing.T) {
				q := cltest.Queue(t)
				qs := []*cl.CommandQueue{q, cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, cl.QueueOutOfOrder)}
				p, count := s41BudgetPool(t, q, c.arena, c.drop, c.san, 10<<20)
				var buf bytes.Buffer
				rec := memhooks.NewTraceRecorder(&buf, memhooks.WithFlushEvery(0), memhooks.WithSites())
				remove := p.AddHook(rec)
				rng := rand.New(rand.NewPCG(41, seed))
				sizes := []int64{0, 1, 100, 4096, 5000, 65536, 300 << 10, 1 << 20, 3 << 20}
				type open struct {
					b    *mempool.PooledBuffer
					size int64
				}
				var list []open
				var ok, live, peakLive int64
				for range cltest.Size(q, 60, 300) {
					switch op := rng.IntN(16); {
					case op < 8:
						size := sizes[rng.IntN(len(sizes))]
						b, err := p.On(qs[rng.IntN(len(qs))]).Allocate(size)
						if err != nil {
							require.ErrorIs(t, err, mempool.ErrOutOfMemory)
							break
						}
						ok++
						live += size
						peakLive = max(peakLive, live)
						list = append(list, open{b, size})
					case op < 14:
						if len(list) > 0 {
							i := rng.IntN(len(list))
							require.NoError(t, list[i].b.Close())
							live -= list[i].size
							list = append(list[:i], list[i+1:]...)
						}
					case op == 14:
						require.NoError(t, p.FreeHeld())
					case op == 15:
						require.NoError(t, p.SetLimit([]int64{0, 0, 4 << 20, 6 << 20}[rng.IntN(4)]))
					}
				}
				mid := p.Stats()
				require.NoError(t, rec.Flush())
				events, err := trace.ReadComplete(bytes.NewReader(buf.Bytes()))
				require.NoError(t, err)
				sum := trace.Summarize(events)
				require.Equal(t, ok, int64(sum.Allocs), "every successful Allocate is an a line")
				require.Equal(t, peakLive, sum.PeakLiveBytes)
				require.Equal(t, mid.PeakActiveBytes, sum.PeakLiveBytes, "the trace's peak live bytes are the pool's peak active bytes")
				require.Equal(t, mid.DeviceAllocs, int64(sum.SegmentAllocs), "every device allocation is an A line")
				require.Equal(t, mid.DeviceFrees, int64(sum.SegmentFrees), "every device free is an F line")
				require.Equal(t, mid.PeakManagedBytes, sum.PeakSegmentBytes, "the trace's peak segment bytes are the pool's peak managed bytes")
				// Managed bytes now, from the segments the trace leaves live.
				liveSeg := map[int64]int64{}
				for _, ev := range events {
					switch ev.Op {
					case trace.SegmentAlloc:
						liveSeg[ev.ID] = ev.Size
					case trace.SegmentFree:
						delete(liveSeg, ev.ID)
					}
				}
				var managed int64
				for _, n := range liveSeg {
					managed += n
				}
				require.Equal(t, mid.ManagedBytes, managed, "the trace's live segments are the managed bytes")
				for _, o := range list {
					require.NoError(t, o.b.Close())
				}
				require.NoError(t, p.Close())
				remove()
				require.NoError(t, rec.Close())
				events, err = trace.ReadComplete(bytes.NewReader(buf.Bytes()))
				require.NoError(t, err)
				sum = trace.Summarize(events)
				s := p.Stats()
				require.Zero(t, sum.Leaked, "every block freed")
				require.Equal(t, sum.SegmentAllocs, sum.SegmentFrees, "every segment freed at Close")
				require.Equal(t, s.DeviceFrees, int64(sum.SegmentFrees))
				require.Zero(t, count.Stats().Live)
			})
		}
	}
}

// s41BudgetPool returns a pool on q (WithArena if arena, drop safety as
// drop says, the sanitizer, writing nowhere, if san) over a Budget of
// budget bytes, over the Counting of an Immediate allocator, which it
// returns too.
func s41BudgetPool(t *testing.T, q *cl.CommandQueue, arena, drop, san bool, budget int64) (*mempool.Pool, *allocator.Counting) {
	t.Helper()
	opts := []mempool.Option{mempool.WithDropSafety(drop)}
	if arena {
		opts = append(opts, mempool.WithArena())
	}
	if san {
		opts = append(opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil))
	}
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	count := allocator.NewCounting(imm)
	p, err := mempool.New(allocator.NewBudget(count, budget), opts...)
	require.NoError(t, err)
	return p, count
}
