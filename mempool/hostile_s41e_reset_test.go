package mempool_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
)

// Guard (s41e): ResetPeak, now lockCaches, is not starved by three
// goroutines allocating and closing on their queues without pause (its
// tries fail, then it waits for each cache's lock in turn): each call
// returns within a second, and Peak >= Current after it. With the workers
// stopped, a ResetPeak leaves every peak at its current value exactly.
func TestHostileS41eResetPeakUnderTraffic(t *testing.T) {
	q := cltest.Queue(t)
	p := hsPool(t, q, mempool.WithArena())
	as := []*mempool.QueueAllocator{p.On(q), p.On(cltest.SecondQueue(t, q, 0)), p.On(cltest.SecondQueue(t, q, 0))}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for _, a := range as {
		wg.Go(func() {
			var open []*mempool.PooledBuffer
			for i := 0; !stop.Load(); i++ {
				b, err := a.Allocate(int64(1024 << (i % 3)))
				if err != nil {
					return
				}
				open = append(open, b)
				if len(open) > 2 {
					_ = open[0].Close()
					open = open[1:]
				}
			}
			for _, b := range open {
				_ = b.Close()
			}
		})
	}
	var worst time.Duration
	for range 200 {
		start := time.Now()
		p.ResetPeak()
		worst = max(worst, time.Since(start))
		s := p.Stats()
		assert.GreaterOrEqual(t, s.AllocatedBytes.All.Peak, s.AllocatedBytes.All.Current)
	}
	stop.Store(true)
	wg.Wait()
	assert.Less(t, worst, time.Second, "ResetPeak's longest wait under traffic")
	p.ResetPeak()
	s := p.Stats()
	for name, st := range map[string]mempool.StatGroup{"Allocation": s.Allocation, "AllocatedBytes": s.AllocatedBytes, "RequestedBytes": s.RequestedBytes} {
		assert.Equal(t, st.All.Current, st.All.Peak, name)
		assert.Equal(t, st.Small.Current, st.Small.Peak, name)
	}
	require.Zero(t, s.Allocation.All.Current)
	t.Logf("worst ResetPeak: %v", worst)
}
