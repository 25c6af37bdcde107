package mempool_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
)

// Review s43c: an SVM pool whose goroutines each use a queue per task,
// released after (forgetReleased every 16th or so On), beside Stats and
// FreeHeld readers; every SVM allocation freed exactly once (the
// fixture's cleanup), every count back at zero, totals exact.
func TestHostileS43cSVMForgetChurn(t *testing.T) {
	for _, arena := range []bool{true, false} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			f := newSVMFixture(t, false, nil, policyOptions(arena)...)
			p := f.pool
			var allocs atomic.Int64
			var stop atomic.Bool
			var wg, rg sync.WaitGroup
			deadline := time.Now().Add(s43aDur())
			for w := range 3 {
				wg.Go(func() {
					var carried *mempool.PooledBuffer
					for i := 0; time.Now().Before(deadline); i++ {
						q, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
						if err != nil {
							t.Error(err)
							return
						}
						a := p.On(q)
						for k := range 6 {
							b, err := a.Allocate(int64(256 << ((w + k + i) % 8)))
							if err != nil {
								t.Error(err)
								break
							}
							allocs.Add(1)
							if k == 5 && carried == nil {
								carried = b
								continue
							}
							if err := b.Close(); err != nil {
								t.Error(err)
							}
						}
						if err := q.Release(); err != nil {
							t.Error(err)
						}
						if i%3 == 2 && carried != nil { // closed after its queue's Release
							if err := carried.Close(); err != nil {
								t.Error(err)
							}
							carried = nil
						}
					}
					if carried != nil {
						_ = carried.Close()
					}
				})
			}
			for _, rd := range []func(){func() { _ = p.Stats() }, func() { _ = p.FreeHeld() }, func() { _ = p.Snapshot() }} {
				rg.Go(func() {
					for !stop.Load() {
						rd()
					}
				})
			}
			wg.Wait()
			stop.Store(true)
			rg.Wait()
			s := p.Stats()
			assert.Zero(t, s.Allocation.All.Current)
			assert.Equal(t, allocs.Load(), s.Allocation.All.Allocated)
			assert.Equal(t, allocs.Load(), s.Allocation.All.Freed)
			assert.Zero(t, mempool.FrozenLate(p))
			t.Logf("%d allocations, %d queues", allocs.Load(), len(s.Queues))
		})
	}
}
