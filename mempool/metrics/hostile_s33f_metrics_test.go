package metrics_test

import (
	"encoding/json"
	"expvar"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PASSES: scrapes (a pedantic registry, which checks every metric against
// Describe and for duplicate series) race goroutines allocating on two
// queues, Add and Remove of pools, and the pools' Close; every scrape
// succeeds, and in each, size="all" is small plus large.
func TestHostileS33FScrapeRacesCloseAndRemove(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	p1, err := mempool.New(imm, mempool.WithArena())
	require.NoError(t, err)
	p2, err := mempool.New(imm)
	require.NoError(t, err)
	var p3 *mempool.Pool
	if q.Context().SVMCapabilities()&cl.SVMCoarseGrainBuffer != 0 {
		svm, err := allocator.NewImmediateSVM(q, false)
		require.NoError(t, err)
		p3, err = mempool.NewSVM(svm, mempool.WithArena())
		require.NoError(t, err)
	}
	c := metrics.NewCollector("a", p1)
	require.NoError(t, c.Add("b", p2))
	if p3 != nil {
		require.NoError(t, c.Add("svm", p3))
	}
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))
	var already prometheus.AlreadyRegisteredError
	require.ErrorAs(t, reg.Register(c), &already, "registering twice is refused")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g, p := range []*mempool.Pool{p1, p2, p3, p1} {
		if p == nil {
			continue
		}
		for _, qq := range []*cl.CommandQueue{q, q2} {
			wg.Go(func() {
				a := p.On(qq, mempool.QueueName(fmt.Sprint("q", g%2)))
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					b, err := a.Allocate(int64(1 + (i*7919+g)%(300<<10)))
					if err != nil {
						assert.ErrorIs(t, err, mempool.ErrPoolClosed)
						continue
					}
					assert.NoError(t, b.Close())
				}
			})
		}
	}
	var scrapes int
	wg.Go(func() {
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
			scrapes++
			for _, mf := range mfs {
				sums := map[string]float64{}
				for _, m := range mf.GetMetric() {
					var pool, size string
					for _, l := range m.GetLabel() {
						switch l.GetName() {
						case "pool":
							pool = l.GetValue()
						case "size":
							size = l.GetValue()
						}
					}
					if size == "" || mf.GetName()[len(mf.GetName())-5:] == "_peak" {
						continue
					}
					if size == "all" {
						sums[pool] += value(m)
					} else {
						sums[pool] -= value(m)
					}
				}
				for pool, d := range sums {
					assert.Zero(t, d, "%s{pool=%s}: all != small + large", mf.GetName(), pool)
				}
			}
		}
	})
	time.Sleep(100 * time.Millisecond)
	assert.True(t, c.Remove("b"))
	require.NoError(t, c.Add("b", p2))
	time.Sleep(50 * time.Millisecond)
	assert.NoError(t, p1.Close())
	assert.NoError(t, p2.Close())
	if p3 != nil {
		assert.NoError(t, p3.Close())
	}
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	assert.Positive(t, scrapes)
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "clpool_reserved_bytes" {
			for _, m := range mf.GetMetric() {
				assert.Zero(t, value(m), "a closed pool reserves nothing")
			}
		}
	}
	// expvar of a closed pool: still valid JSON.
	require.NoError(t, metrics.Publish("s33f-closed", p1))
	var m map[string]int64
	require.NoError(t, json.Unmarshal([]byte(expvar.Get("s33f-closed").String()), &m))
	assert.Zero(t, m["reserved_bytes.all.current"])
	assert.ErrorIs(t, metrics.Publish("s33f-closed", p2), metrics.ErrNameTaken)
}
