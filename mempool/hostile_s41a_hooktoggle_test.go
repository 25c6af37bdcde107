package mempool_test

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PASSES (regression guard): hooks added and removed over and over while
// goroutines on queues of their own hit their caches (small exact sizes),
// with and without drop safety, bins and arena, and a queue's FreeHeld
// and Snapshot beside: no hook sees a free of a block it saw handed out
// twice or a block handed out twice while open; once quiet, the books
// balance and a final Close frees every segment (pooltest's checks).
func TestS41aHooksToggledWhileCachesHit(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []mempool.Option
	}{
		{"bins", nil},
		{"bins-nodrop", []mempool.Option{mempool.WithDropSafety(false)}},
		{"arena", []mempool.Option{mempool.WithArena()}},
		{"arena-nodrop", []mempool.Option{mempool.WithArena(), mempool.WithDropSafety(false)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := cltest.Queue(t)
			qs := []*cl.CommandQueue{cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, 0)}
			p := pooltest.New(t, q, c.opts...)
			var stop atomic.Bool
			var sink errSink
			var wg sync.WaitGroup
			var ops atomic.Int64
			for g, qq := range qs {
				on := p.On(qq)
				wg.Go(func() {
					for i := 0; !stop.Load(); i++ {
						var open []*mempool.PooledBuffer
						for j := range 3 {
							b, err := on.Allocate(int64(256 * (1 + (i+j+g)%4)))
							if err != nil {
								sink.add(err)
								return
							}
							open = append(open, b)
						}
						for _, b := range open {
							sink.add(b.Close())
						}
						if i%50 == 49 {
							sink.add(on.FreeHeld())
						}
						ops.Add(1)
					}
				})
			}
			var tallies []*s41aTally
			wg.Go(func() {
				for i := 0; !stop.Load(); i++ {
					h := newS41aTally()
					h.lenient = true // blocks handed out before it are freed under it
					tallies = append(tallies, h)
					remove := p.AddHook(h)
					for range 20 {
						runtime.Gosched()
					}
					if i%7 == 3 {
						_ = p.Snapshot()
					}
					pooltest.CheckStats(t, p.Stats())
					remove()
					for range 20 {
						runtime.Gosched()
					}
				}
			})
			if !withinWork(t, "the work", func() {
				for ops.Load() < 3000 {
					runtime.Gosched()
				}
			}) {
				return
			}
			stop.Store(true)
			if !withinWork(t, "goroutines", wg.Wait) {
				return
			}
			require.NoError(t, sink.err())
			for _, h := range tallies {
				h.mu.Lock()
				assert.Empty(t, h.bad)
				h.mu.Unlock()
			}
			require.NoError(t, mempool.CheckBlockCounts(p))
			s := p.Stats()
			pooltest.CheckStats(t, s)
			assert.Zero(t, s.ActiveBlocks)
			assert.Equal(t, s.ReservedBytes.All.Current, s.HeldBytes, "idle: every reserved byte held")
			var cached int64
			for _, l := range s.Queues {
				cached += l.Cached
			}
			assert.LessOrEqual(t, cached, int64(s.HeldBlocks), fmt.Sprintf("%+v", s.Queues))
			require.NoError(t, p.FreeHeld())
			s = p.Stats()
			assert.Zero(t, s.HeldBlocks)
			assert.Zero(t, s.ManagedBytes)
		})
	}
}
