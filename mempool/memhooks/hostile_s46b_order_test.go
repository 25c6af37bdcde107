package memhooks_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Session 41's review s41b left this open: from several goroutines a
// segment_free was told once the allocator's Free had returned, so
// another goroutine's segment, allocated in the room just freed, could be
// told (alloc_after) first, and a trace recorded under a device Budget
// showed more segment bytes live than the Budget lets exist. A hook that
// takes its time (registered before the recorder) made it happen on most
// runs: the recorder heard of the free late. Now segment_free is told
// before the allocator's Free and alloc_after once the pool counts the
// segment, so the trace's segments are at every moment among those the
// device holds, and its peak is at most the Budget.
func TestHostileS46bTraceOfGoroutinesStaysWithinTheBudget(t *testing.T) {
	const budget = 6 << 20
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			q := cltest.Queue(t)
			p, count := s41BudgetPool(t, q, arena, true, false, budget)
			p.AddHook(mempool.HookFunc(func(e mempool.Event) {
				if e.Kind == mempool.SegmentFree {
					time.Sleep(200 * time.Microsecond)
				}
			}))
			var buf bytes.Buffer
			rec := memhooks.NewTraceRecorder(&buf, memhooks.WithFlushEvery(0))
			p.AddHook(rec)
			sizes := []int64{100 << 10, 700 << 10, 1 << 20, 2 << 20, 3 << 20}
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(46, uint64(g)))
					var open []*mempool.PooledBuffer
					for range cltest.Size(q, 40, 200) {
						switch op := rng.IntN(8); {
						case op < 4:
							b, err := p.Allocate(sizes[rng.IntN(len(sizes))])
							if err == nil {
								open = append(open, b)
							} else {
								assert.ErrorIs(t, err, mempool.ErrOutOfMemory)
							}
						case op < 7:
							if len(open) > 0 {
								i := rng.IntN(len(open))
								assert.NoError(t, open[i].Close())
								open = append(open[:i], open[i+1:]...)
							}
						default:
							assert.NoError(t, p.FreeHeld())
						}
					}
					for _, b := range open {
						assert.NoError(t, b.Close())
					}
				})
			}
			wg.Wait()
			require.NoError(t, p.Close())
			require.NoError(t, rec.Close())
			events, err := trace.ReadComplete(bytes.NewReader(buf.Bytes()))
			require.NoError(t, err)
			sum := trace.Summarize(events)
			assert.LessOrEqual(t, sum.PeakSegmentBytes, int64(budget), "the trace's segments live at once fit the Budget")
			assert.Equal(t, sum.SegmentAllocs, sum.SegmentFrees)
			assert.Zero(t, count.Stats().Live)
		})
	}
}
