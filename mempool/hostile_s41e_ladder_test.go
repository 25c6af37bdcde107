package mempool_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
)

// Guard (s41e): requests on the out-of-memory ladder (a device Budget,
// drop safety on, buffers dropped without Close, so that rungCollect's
// flushAll runs) while goroutines allocate and close on several queues,
// queues come (On of new queues: the cache list replaced) and go
// (released, then forgotten), and readers call Stats, Snapshot,
// ResetPeak, ResetAccumulated and FreeHeld; then StopHolding and Close.
// Nothing may hang (bounded waits), and every error is an out-of-memory.
func TestHostileS41eLadderChurnNoHang(t *testing.T) {
	for _, arena := range []bool{false, true} {
		for _, san := range []bool{false, true} {
			t.Run(fmt.Sprintf("arena=%v/san=%v", arena, san), func(t *testing.T) {
				q := cltest.Queue(t)
				imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
				require.NoError(t, err)
				opts := []mempool.Option{mempool.WithDropSafety(true)}
				if arena {
					opts = append(opts, mempool.WithArena())
				}
				if san {
					opts = append(opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil))
				}
				p, err := mempool.New(allocator.NewBudget(imm, 2<<20), opts...)
				require.NoError(t, err)
				t.Cleanup(func() { _ = p.Close() })
				queues := []*cl.CommandQueue{q, cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, 0)}
				var stop atomic.Bool
				var bad atomic.Value
				var ooms atomic.Int64
				note := func(err error) {
					if err == nil {
						return
					}
					var oom *mempool.OutOfMemoryError
					if errors.As(err, &oom) {
						ooms.Add(1)
						return
					}
					bad.CompareAndSwap(nil, err.Error())
				}
				ok := withinLimit(t, "the workload", 60*time.Second, func() {
					var wg sync.WaitGroup
					for g, qq := range queues {
						wg.Go(func() {
							a := p.On(qq)
							var keep []*mempool.PooledBuffer
							for i := 0; !stop.Load(); i++ {
								size := int64(1024 << (i % 5))
								if i%17 == 0 {
									size = 700 << 10 // a large one: the budget refuses some
								}
								b, err := a.Allocate(size)
								note(err)
								if b == nil {
									continue
								}
								switch {
								case i%11 == g: // dropped without Close: the ladder's collection takes it back
								case i%3 == 0 || size > 4<<10:
									keep = append(keep, b)
									if len(keep) > 3 {
										note(keep[0].Close())
										keep = keep[1:]
									}
								default:
									note(b.Close())
								}
							}
							for _, b := range keep {
								note(b.Close())
							}
						})
					}
					wg.Go(func() { // queues come and go
						for !stop.Load() {
							nq, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
							if err != nil {
								bad.CompareAndSwap(nil, err.Error())
								return
							}
							a := p.On(nq)
							if b, err := a.Allocate(4096); err == nil {
								note(b.Close())
							} else {
								note(err)
							}
							if b, err := a.Allocate(2048); err == nil && b != nil {
								note(b.Close())
							}
							_ = nq.Release()
						}
					})
					readers := []func(){
						func() { _ = p.Stats() },
						func() { _ = p.Snapshot() },
						p.ResetPeak,
						p.ResetAccumulated,
						func() { note(p.FreeHeld()) },
					}
					for _, r := range readers {
						wg.Go(func() {
							for !stop.Load() {
								r()
								time.Sleep(time.Millisecond)
							}
						})
					}
					time.Sleep(time.Second)
					stop.Store(true)
					wg.Wait()
					note(p.StopHolding())
					_ = p.Stats()
					_ = p.Close()
				})
				stop.Store(true)
				if !ok {
					return
				}
				if v := bad.Load(); v != nil {
					t.Errorf("an error other than out-of-memory: %v", v)
				}
				t.Logf("out-of-memory errors: %d; reclaimed %d", ooms.Load(), p.Stats().Reclaimed)
			})
		}
	}
}

// Guard (s41e): a hook that calls Stats, ResetPeak, ResetAccumulated and
// Snapshot from inside, on every event, with two goroutines on two queues
// and the ladder (a Budget, drop safety, dropped buffers): lockCaches from
// inside a hook must not find a lock its own goroutine holds.
func TestHostileS41eHookCallsResetPeak(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	p, err := mempool.New(allocator.NewBudget(imm, 2<<20), mempool.WithDropSafety(true), mempool.WithArena())
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	// Blocks cached before the hook: they stay in the caches.
	a, b := p.On(q), p.On(cltest.SecondQueue(t, q, 0))
	for _, x := range []*mempool.QueueAllocator{a, b} {
		pb := hsAlloc(t, x.Allocate, 4096)
		require.NoError(t, pb.Close())
	}
	var calls atomic.Int64
	remove := p.AddHook(mempool.HookFunc(func(e mempool.Event) {
		switch calls.Add(1) % 4 {
		case 0:
			_ = p.Stats()
		case 1:
			p.ResetPeak()
		case 2:
			p.ResetAccumulated()
		default:
			_ = p.Snapshot()
		}
	}))
	defer remove()
	ok := withinLimit(t, "allocations with a hook that reads the pool", 30*time.Second, func() {
		var wg sync.WaitGroup
		for g, x := range []*mempool.QueueAllocator{a, b} {
			wg.Go(func() {
				for i := range 300 {
					size := int64(4096)
					if i%9 == 0 {
						size = 900 << 10
					}
					pb, err := x.Allocate(size)
					if err != nil {
						continue
					}
					if i%7 != g {
						_ = pb.Close()
					}
				}
			})
		}
		wg.Wait()
	})
	if ok {
		s := p.Stats()
		assert.Positive(t, calls.Load())
		t.Logf("hook calls %d, reclaimed %d, retries %d", calls.Load(), s.Reclaimed, s.OOMRetries)
	}
}
