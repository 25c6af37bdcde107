package memhooks_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHostileS41dWrappedRingSegmentsAreManagedBytes: one goroutine, a
// History registered before the first request, rings of 1 to 17 that
// wrap many times. The History's doc says WriteTrace's "segment events
// give the pool's managed bytes as they change ... of the segments
// allocated since the History was registered", with the segments whose
// allocation left the ring written first; and that Site knows every live
// block it saw allocated "even once their events have left the ring".
// At every step, the trace WriteTrace writes must read back, its live
// segment bytes be the pool's ManagedBytes, and Site name each open block.
func TestHostileS41dWrappedRingSegmentsAreManagedBytes(t *testing.T) {
	for _, c := range []struct{ arena, san bool }{{false, false}, {true, false}, {true, true}} {
		for _, n := range []int{1, 2, 3, 5, 17} {
			t.Run(fmt.Sprintf("arena=%v/san=%v/n=%d", c.arena, c.san, n), func(t *testing.T) {
				q := cltest.Queue(t)
				q2 := cltest.SecondQueue(t, q, 0)
				var opts []mempool.Option
				if c.arena {
					opts = append(opts, mempool.WithArena())
				}
				if c.san {
					opts = append(opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil))
				}
				p, _ := pooltest.NewOver(t, q, func(a allocator.Allocator) allocator.Allocator { return allocator.NewBudget(a, 8<<20) }, opts...)
				h := memhooks.NewHistory(n, memhooks.WithSites())
				p.AddHook(h)
				rng := rand.New(rand.NewPCG(uint64(n), 41))
				sizes := []int64{1, 100, 4096, 65536, 300 << 10, 1 << 20, 3 << 20}
				var open []*mempool.PooledBuffer
				for step := range cltest.Size(q, 40, 200) {
					switch op := rng.IntN(10); {
					case op < 5:
						a := p.On([]*cl.CommandQueue{q, q2}[rng.IntN(2)])
						b, err := a.Allocate(sizes[rng.IntN(len(sizes))])
						if err != nil {
							require.ErrorIs(t, err, mempool.ErrOutOfMemory)
							break
						}
						open = append(open, b)
					case op < 9:
						if len(open) > 0 {
							i := rng.IntN(len(open))
							require.NoError(t, open[i].Close())
							open = append(open[:i], open[i+1:]...)
						}
					default:
						require.NoError(t, p.FreeHeld())
					}
					var buf bytes.Buffer
					require.NoError(t, h.WriteTrace(&buf))
					events, err := trace.ReadComplete(bytes.NewReader(buf.Bytes()))
					require.NoError(t, err, "step %d:\n%s", step, buf.String())
					assert.Equal(t, p.ManagedBytes(), s41dLiveSeg(events), "step %d: the trace's live segment bytes are the pool's managed bytes:\n%s", step, buf.String())
					for _, b := range open {
						_, ok := h.Site(b.ID())
						assert.True(t, ok, "step %d: Site of an open block", step)
					}
				}
				for _, b := range open {
					require.NoError(t, b.Close())
				}
			})
		}
	}
}

// s41dLiveSeg returns the bytes of the segments events leave live.
func s41dLiveSeg(events []trace.Event) int64 {
	_, _, b := s41dCheckWindow(events)
	return b
}
