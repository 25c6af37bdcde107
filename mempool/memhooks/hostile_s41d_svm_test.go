package memhooks_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHostileS41dSVMAndPinnedPoolsRecorded: an SVM pool and a pinned
// pool (whose segments are freed after waiting for their uses), used by
// goroutines on two queues, with blocks dropped to the finalizer, a
// recorder and a History registered throughout, and Pool.Close while
// blocks are open. The recorder's trace must read back, number as
// documented, and leave nothing live once all is closed; so must the
// History's.
func TestHostileS41dSVMAndPinnedPoolsRecorded(t *testing.T) {
	cltest.Watchdog(t, 200*time.Second)
	for _, kind := range []string{"svm", "pinned"} {
		for _, arena := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/arena=%v", kind, arena), func(t *testing.T) {
				var q *cl.CommandQueue
				var p *mempool.Pool
				var err error
				opts := []mempool.Option{mempool.WithDropSafety(true)}
				if arena {
					opts = append(opts, mempool.WithArena())
				}
				if kind == "svm" {
					q = cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
					a, err2 := allocator.NewImmediateSVM(q, false)
					require.NoError(t, err2)
					p, err = mempool.NewSVM(a, opts...)
				} else {
					q = cltest.Queue(t)
					a, err2 := allocator.NewPinned(q)
					require.NoError(t, err2)
					p, err = mempool.New(a, opts...)
				}
				require.NoError(t, err)
				q2 := cltest.SecondQueue(t, q, 0)
				var buf s41dLockedBuf
				rec := memhooks.NewTraceRecorder(&buf, memhooks.WithSites(), memhooks.WithFlushEvery(time.Millisecond))
				h := memhooks.NewHistory(1 << 16)
				p.AddHook(rec)
				p.AddHook(h)
				var wg sync.WaitGroup
				var mu sync.Mutex
				var left []*mempool.PooledBuffer
				for g := range 2 {
					wg.Go(func() {
						rng := rand.New(rand.NewPCG(uint64(g), 9))
						a := p.On([]*cl.CommandQueue{q, q2}[g])
						var mine []*mempool.PooledBuffer
						for i := range cltest.Size(q, 60, 150) {
							if rng.IntN(2) == 0 || len(mine) == 0 {
								b, err := a.Allocate(int64(1 + rng.IntN(2<<20)))
								if assert.NoError(t, err) {
									mine = append(mine, b)
								}
								continue
							}
							j := rng.IntN(len(mine))
							b := mine[j]
							mine = append(mine[:j], mine[j+1:]...)
							if i%5 == 0 {
								continue // dropped
							}
							assert.NoError(t, b.Close())
							if i%20 == 0 {
								runtime.GC()
								assert.NoError(t, p.FreeHeld())
							}
						}
						mu.Lock()
						left = append(left, mine...)
						mu.Unlock()
					})
				}
				wg.Wait()
				require.NoError(t, p.Close())
				for _, b := range left {
					require.NoError(t, b.Close())
				}
				s41dSettle(t, p)
				require.NoError(t, rec.Close())
				events, live, liveSeg := s41dCheck(t, buf.Bytes())
				assert.Zero(t, live)
				assert.Zero(t, liveSeg)
				s := trace.Summarize(events)
				st := p.Stats()
				assert.Equal(t, int(st.DeviceAllocs), s.SegmentAllocs)
				assert.Equal(t, int(st.DeviceFrees), s.SegmentFrees)
				var hb bytes.Buffer
				require.NoError(t, h.WriteTrace(&hb))
				hev, err := trace.ReadComplete(bytes.NewReader(hb.Bytes()))
				require.NoError(t, err)
				_, hl, hs := s41dCheckWindow(hev)
				assert.Zero(t, hl)
				assert.Zero(t, hs)
			})
		}
	}
}
