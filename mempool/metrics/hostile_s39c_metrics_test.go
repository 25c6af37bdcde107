package metrics_test

import (
	"io"
	"sync"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// (For -race.) A sanitized pool (quarantine,
// guard bytes, no queue caches) allocated from on three goroutines, each
// on a queue of its own (one out of order, one released midway), while
// another scrapes a pedantic registry, writes the summary, takes
// snapshots and reads Findings: every scrape succeeds, size="all" is
// small plus large in each, and once quiet every series equals the Stats
// field it names (the sanitized case is not in s32b's comparison).
func TestHostileS39cSanitizedPoolScrapesAgree(t *testing.T) {
	cltest.Watchdog(t, 120*time.Second)
	for _, arena := range []bool{false, true} {
		q := cltest.Queue(t)
		opts := []mempool.Option{mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil)}
		if arena {
			opts = append(opts, mempool.WithArena())
		}
		p := pooltest.New(t, q, opts...)
		reg := prometheus.NewPedanticRegistry()
		require.NoError(t, reg.Register(metrics.NewCollector("p", p)))
		queues := []*cl.CommandQueue{cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, cl.QueueOutOfOrder), cltest.SecondQueue(t, q, 0)}
		stop := make(chan struct{})
		var reader sync.WaitGroup
		reader.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				mfs, err := reg.Gather()
				if !assert.NoError(t, err) {
					return
				}
				m := map[string]map[string]float64{}
				for _, mf := range mfs {
					for _, x := range mf.GetMetric() {
						for _, l := range x.GetLabel() {
							if l.GetName() == "size" {
								if m[mf.GetName()] == nil {
									m[mf.GetName()] = map[string]float64{}
								}
								m[mf.GetName()][l.GetValue()] = value(x)
							}
						}
					}
				}
				for name, by := range m {
					if len(name) > 5 && name[len(name)-5:] == "_peak" {
						continue
					}
					assert.Equal(t, by["small"]+by["large"], by["all"], name)
				}
				_ = p.WriteSummary(io.Discard)
				_ = p.Snapshot()
				_ = p.Findings()
			}
		})
		var wg sync.WaitGroup
		for w, wq := range queues {
			wg.Go(func() {
				on := p.On(wq)
				var kept []*mempool.PooledBuffer
				for i := range cltest.Size(q, 20, 150) {
					b, err := on.Allocate(int64(1 + (i*7919+w*104729)%cltest.Size(q, 16<<10, 600<<10)))
					if !assert.NoError(t, err) {
						return
					}
					kept = append(kept, b)
					if i%3 != 0 {
						assert.NoError(t, kept[0].Close())
						kept = kept[1:]
					}
				}
				for _, b := range kept {
					assert.NoError(t, b.Close())
				}
				if w == 2 {
					assert.NoError(t, wq.Release())
				}
			})
		}
		wg.Wait()
		close(stop)
		reader.Wait()
		assert.Empty(t, p.Findings())
		got := s32bGather(t, p)
		s := p.Stats()
		assert.Equal(t, float64(s.HeldBlocks), got["clpool_held_blocks"])
		assert.Equal(t, float64(s.HeldBytes), got["clpool_held_bytes"])
		assert.Equal(t, float64(s.InactiveSplitBytes.All.Current), got["clpool_inactive_split_bytes{size=all}"])
		assert.Equal(t, float64(s.ReservedBytes.All.Current), got["clpool_reserved_bytes{size=all}"])
		assert.Equal(t, float64(s.Allocation.All.Allocated), got["clpool_allocation_allocated_total{size=all}"])
		assert.Equal(t, float64(s.Hits), got["clpool_hits_total"])
		assert.Equal(t, float64(s.Misses), got["clpool_misses_total"])
		assert.Equal(t, float64(s.DeviceAllocs), got["clpool_device_allocs_total"])
		assert.Equal(t, s.Fragmentation, got["clpool_fragmentation_ratio"])
	}
}
