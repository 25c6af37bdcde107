package mempool_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
)

// Guard (s41g): workers on three queues, eight readers (Stats, Snapshot,
// ResetPeak, ResetAccumulated, LargestHeldBin) whose lockCaches goes to
// its blocking phase (frozen marks), queues registered and released (the
// cache list replaced, forgetReleased), then StopHolding and Close while
// the readers and workers still run. Under -race: no race, no hang, and
// every Stats the readers see is self-consistent (Peak >= Current >= 0,
// Allocated - Freed = Current, ActiveBlocks = Allocation.Current).
func TestHostileS41gFrozenChurnStopCloseNoHang(t *testing.T) {
	for _, arena := range []bool{false, true} {
		for _, san := range []bool{false, true} {
			t.Run(fmt.Sprintf("arena=%v/san=%v", arena, san), func(t *testing.T) {
				q := cltest.Queue(t)
				var opts []mempool.Option
				if arena {
					opts = append(opts, mempool.WithArena())
				}
				if san {
					opts = append(opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil))
				}
				p := hsPool(t, q, opts...)
				queues := []*cl.CommandQueue{q, cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, 0)}
				var stop atomic.Bool
				var bad atomic.Value
				check := func(s mempool.Stats) {
					st := s.Allocation.All
					switch {
					case st.Peak < st.Current || st.Current < 0:
						bad.CompareAndSwap(nil, fmt.Sprintf("allocation peak %d, current %d", st.Peak, st.Current))
					case s.ActiveBlocks != int(st.Current):
						bad.CompareAndSwap(nil, fmt.Sprintf("active blocks %d, allocation current %d", s.ActiveBlocks, st.Current))
					case s.AllocatedBytes.All.Peak < s.AllocatedBytes.All.Current:
						bad.CompareAndSwap(nil, fmt.Sprintf("bytes peak %d < current %d", s.AllocatedBytes.All.Peak, s.AllocatedBytes.All.Current))
					}
				}
				ok := withinLimit(t, "the workload", 60*time.Second, func() {
					var wg, rg sync.WaitGroup
					for _, qq := range queues {
						wg.Go(func() {
							a := p.On(qq)
							var keep []*mempool.PooledBuffer
							for i := 0; !stop.Load(); i++ {
								b, err := a.Allocate(int64(1024 << (i % 4)))
								if err != nil {
									break // closed: the blocks kept are closed below (a Close after the pool's is legal)
								}
								keep = append(keep, b)
								if len(keep) > 2 {
									_ = keep[0].Close()
									keep = keep[1:]
								}
							}
							for _, b := range keep {
								_ = b.Close()
							}
						})
					}
					wg.Go(func() { // queues come and go
						for !stop.Load() {
							nq, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
							if err != nil {
								return
							}
							if b, err := p.On(nq, mempool.QueueName("churn")).Allocate(2048); err == nil {
								_ = b.Close()
							}
							_ = nq.Release()
						}
					})
					readers := []func(){
						func() { check(p.Stats()) }, func() { check(p.Stats()) }, func() { check(p.Stats()) },
						func() { _ = p.Snapshot() }, p.ResetPeak, p.ResetAccumulated,
						func() { _, _ = p.LargestHeldBin() }, func() { _ = p.FreeHeld() },
					}
					for _, r := range readers {
						rg.Go(func() {
							for !stop.Load() {
								r()
							}
						})
					}
					time.Sleep(500 * time.Millisecond)
					_ = p.StopHolding()
					time.Sleep(200 * time.Millisecond)
					_ = p.Close()
					time.Sleep(100 * time.Millisecond)
					stop.Store(true)
					wg.Wait()
					rg.Wait()
					check(p.Stats())
				})
				stop.Store(true)
				if !ok {
					return
				}
				if v := bad.Load(); v != nil {
					t.Errorf("inconsistent Stats: %v", v)
				}
				s := p.Stats()
				assert.Equal(t, int64(0), s.Allocation.All.Current, "every buffer closed")
			})
		}
	}
}

// Guard (s41g, 6f1fdb0): On of one new queue with different names from
// several goroutines at once, beside Stats readers: no Stats ever shows
// the queue's line unnamed, and its final name is one of those given; a
// later On with no QueueName keeps it, QueueName("") takes it away.
func TestHostileS41gConcurrentOnNames(t *testing.T) {
	q := cltest.Queue(t)
	p := hsPool(t, q)
	names := map[string]bool{"a": true, "b": true, "c": true, "d": true}
	for round := range 20 {
		nq := cltest.SecondQueue(t, q, 0)
		var stop atomic.Bool
		var unnamed atomic.Int64
		var wg sync.WaitGroup
		wg.Go(func() {
			for !stop.Load() {
				for _, l := range p.Stats().Queues {
					if l.Queue == nq && !names[l.Name] {
						unnamed.Add(1)
					}
				}
			}
		})
		var og sync.WaitGroup
		for n := range names {
			og.Go(func() { assert.Equal(t, nq, p.On(nq, mempool.QueueName(n)).Queue()) })
		}
		og.Wait()
		stop.Store(true)
		wg.Wait()
		assert.Zero(t, unnamed.Load(), "round %d: a Stats showed the queue with a name not given", round)
		var got string
		for _, l := range p.Stats().Queues {
			if l.Queue == nq {
				got = l.Name
			}
		}
		assert.True(t, names[got], "round %d: final name %q", round, got)
		p.On(nq)
		for _, l := range p.Stats().Queues {
			if l.Queue == nq {
				assert.Equal(t, got, l.Name, "On without QueueName keeps the name")
			}
		}
		p.On(nq, mempool.QueueName(""))
		for _, l := range p.Stats().Queues {
			if l.Queue == nq {
				assert.Empty(t, l.Name, `QueueName("") takes it away`)
			}
		}
	}
}
