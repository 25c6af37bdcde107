package mempool_test

import (
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s46eWait waits for wg, at most d; on a stall it prints every goroutine
// and fails the test (the pool is then left as it is).
func s46eWait(t *testing.T, wg *sync.WaitGroup, d time.Duration) bool {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
		t.Errorf("stalled: the goroutines did not end within %v of the stop", d)
		return false
	}
}

// Registration (On of new queues, in order and out of order, RecordQueue,
// releases), the pass that forgets them, and every lockCaches caller
// (Stats, Snapshot, FreeHeld, ResetPeak, SetLimit, StopHolding-free
// drains of the ladder under a Budget that refuses), with hooks that call
// Stats on every event and, in one mix, the sanitizer: nothing stalls,
// and the queue states stay bounded.
func TestHostileS46eRegistrationAndInspectorsMix(t *testing.T) {
	for _, mix := range []struct {
		name  string
		arena bool
		san   bool
		hook  bool
		wait  bool // every lockCaches waits for the caches' locks at once
	}{
		{"bins", false, false, false, false},
		{"arena-hook", true, false, true, false},
		{"bins-san-hook", false, true, true, false},
		{"arena-waited", true, false, true, true},
		{"bins-san-waited", false, true, false, true},
	} {
		t.Run(mix.name, func(t *testing.T) {
			q := cltest.Queue(t)
			imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
			require.NoError(t, err)
			opts := policyOptions(mix.arena)
			if mix.san {
				opts = append(opts, mempool.WithSanitizerOutput(nil), mempool.WithSanitizer())
			}
			p, err := mempool.New(allocator.NewBudget(imm, 1<<20), opts...)
			require.NoError(t, err)
			if mix.hook {
				p.AddHook(mempool.HookFunc(func(mempool.Event) { _ = p.Stats() }))
			}
			if mix.wait {
				undo := mempool.SetLockCachesWaited(func() {})
				defer undo()
			}
			var stop atomic.Bool
			var regs, reads atomic.Int64
			var wg sync.WaitGroup
			var maxStates atomic.Int64
			newQ := func(props cl.QueueProperties) *cl.CommandQueue {
				x, err := cl.NewCommandQueue(q.Context(), q.Device(), props)
				if err != nil {
					return nil
				}
				return x
			}
			base := p.On(q)
			for g := range 2 {
				wg.Go(func() {
					for i := 0; !stop.Load(); i++ {
						props := cl.QueueProperties(0)
						if (i+g)%3 == 0 {
							props = cl.QueueOutOfOrder
						}
						x := newQ(props)
						if x == nil {
							return
						}
						a := p.On(x)
						if b, err := a.Allocate(int64(4096 * (1 + i%64))); err == nil {
							_ = b.RecordQueue(q)
							if y := newQ(0); y != nil {
								_ = b.RecordQueue(y)
								_ = y.Release()
							}
							_ = b.Close()
						}
						if b, err := base.Allocate(512 << 10); err == nil { // the Budget refuses some: the ladder drains
							_ = b.RecordQueue(x)
							_ = x.Release()
							_ = b.Close()
						} else {
							_ = x.Release()
						}
						regs.Add(1)
						n := int64(mempool.QueueStates(p))
						for old := maxStates.Load(); n > old && !maxStates.CompareAndSwap(old, n); old = maxStates.Load() {
						}
					}
				})
			}
			readers := []func(int){
				func(int) { _ = p.Stats() },
				func(int) { _ = p.Snapshot() },
				func(int) { _ = p.FreeHeld() },
				func(int) { p.ResetPeak() },
				func(i int) { _ = p.SetLimit(int64(1<<20) >> (i % 2)) },
			}
			for _, r := range readers {
				wg.Go(func() {
					for i := 0; !stop.Load(); i++ {
						r(i)
						reads.Add(1)
					}
				})
			}
			time.Sleep(s43aDur())
			stop.Store(true)
			if !s46eWait(t, &wg, 60*time.Second) {
				return
			}
			t.Logf("%d registrations, %d reads, %d states at most", regs.Load(), reads.Load(), maxStates.Load())
			// The released queues are forgotten as more come: the states
			// kept are a part of the queues made, not all of them (a
			// loaded run kept 251 of 1,398 at most, a quiet one 81).
			assert.Less(t, maxStates.Load(), regs.Load()/2+64, "queue states bounded")
			require.NoError(t, p.Close())
		})
	}
}
