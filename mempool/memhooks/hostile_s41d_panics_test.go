package memhooks_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHostileS41dPanickingHookBesideRecorders: a hook that panics on one
// kind of event (every third time), registered before and after a
// TraceRecorder, a History and a LineProfile. mempool.Hook's doc: "A
// hook that panics does not stop the others", a failed Allocate's block
// goes back, "every hook sees each block it saw allocated freed". Once
// every block is closed and the pool closed, the recorder's trace must
// leave no block nor segment live, count the device allocations and
// frees the counting allocator counts, and the profile hold nothing in
// use.
func TestHostileS41dPanickingHookBesideRecorders(t *testing.T) {
	kinds := []mempool.EventKind{mempool.AllocBefore, mempool.AllocAfter, mempool.MallocBefore, mempool.MallocAfter, mempool.FreeBefore, mempool.FreeAfter, mempool.SegmentFree}
	for _, kind := range kinds {
		for _, first := range []bool{true, false} {
			for _, arena := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/first=%v/arena=%v", kind, first, arena), func(t *testing.T) {
					q := cltest.Queue(t)
					q2 := cltest.SecondQueue(t, q, 0)
					imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
					require.NoError(t, err)
					count := allocator.NewCounting(imm)
					opts := []mempool.Option{}
					if arena {
						opts = append(opts, mempool.WithArena())
					}
					p, err := mempool.New(allocator.NewBudget(count, 8<<20), opts...)
					require.NoError(t, err)
					var n atomic.Int64
					bad := mempool.HookFunc(func(e mempool.Event) {
						if e.Kind == kind && n.Add(1)%3 == 0 {
							panic("s41d")
						}
					})
					var buf bytes.Buffer
					rec := memhooks.NewTraceRecorder(&buf, memhooks.WithFlushEvery(0), memhooks.WithSites())
					h := memhooks.NewHistory(1 << 16)
					lp := memhooks.NewLineProfile()
					if first {
						p.AddHook(bad)
					}
					p.AddHook(rec)
					p.AddHook(h)
					p.AddHook(lp)
					if !first {
						p.AddHook(bad)
					}
					rng := rand.New(rand.NewPCG(3, 41))
					sizes := []int64{1, 100, 4096, 65536, 300 << 10, 1 << 20, 3 << 20}
					var open []*mempool.PooledBuffer
					for range cltest.Size(q, 100, 250) {
						switch op := rng.IntN(10); {
						case op < 5:
							a := p.On([]*cl.CommandQueue{q, q2}[rng.IntN(2)])
							b, err := a.Allocate(sizes[rng.IntN(len(sizes))])
							if err != nil {
								if !errors.Is(err, mempool.ErrPanicked) {
									require.ErrorIs(t, err, mempool.ErrOutOfMemory)
								}
								break
							}
							open = append(open, b)
						case op < 9:
							if len(open) > 0 {
								i := rng.IntN(len(open))
								if err := open[i].Close(); err != nil {
									require.ErrorIs(t, err, mempool.ErrPanicked)
								}
								open = append(open[:i], open[i+1:]...)
							}
						default:
							if err := p.FreeHeld(); err != nil {
								require.ErrorIs(t, err, mempool.ErrPanicked)
							}
						}
					}
					for _, b := range open {
						if err := b.Close(); err != nil {
							require.ErrorIs(t, err, mempool.ErrPanicked)
						}
					}
					if err := p.Close(); err != nil {
						require.ErrorIs(t, err, mempool.ErrPanicked)
					}
					require.Zero(t, p.ActiveBlocks())
					require.NoError(t, rec.Close())
					events, live, liveSeg := s41dCheck(t, buf.Bytes())
					assert.Zero(t, live, "blocks left live in the trace")
					assert.Zero(t, liveSeg, "segment bytes left live in the trace")
					s, cs := trace.Summarize(events), count.Stats()
					assert.Equal(t, int(cs.Allocs), s.SegmentAllocs, "device allocations")
					assert.Equal(t, int(cs.Frees), s.SegmentFrees, "device frees")
					assert.Zero(t, cs.Live)
					assert.Zero(t, cs.BadFrees)
					var hb bytes.Buffer
					require.NoError(t, h.WriteTrace(&hb))
					hev, err := trace.ReadComplete(bytes.NewReader(hb.Bytes()))
					require.NoError(t, err)
					_, hlive, hseg := s41dCheckWindow(hev)
					assert.Zero(t, hlive, "History: blocks left live")
					assert.Zero(t, hseg, "History: segments left live")
					for _, sm := range lp.Profile().Sample {
						assert.Zero(t, sm.Value[2], "LineProfile: inuse_objects")
						assert.Zero(t, sm.Value[3], "LineProfile: inuse_space")
					}
				})
			}
		}
	}
}
