package metrics_test

// Hostile review, session 32, reviewer b: metrics against Stats.

import (
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/metrics"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func s32bGather(t *testing.T, p *mempool.Pool) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(metrics.NewCollector("p", p)))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				if l.GetName() == "size" || l.GetName() == "queue" {
					key += "{" + l.GetName() + "=" + l.GetValue() + "}"
				}
			}
			out[key] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

// FAILED on a363727: Pool.ResetAccumulated leaves every queue's totals as they were,
// while the package doc of metrics says "Pool.ResetAccumulated sets the
// totals back to zero; Prometheus takes that as a counter reset". After
// it, clpool_hits_total is 0 and clpool_queue_hits_total of the only
// queue keeps counting from before: the per-queue counters no longer sum
// to the pool's.
func TestHostileS32bResetAccumulatedLeavesQueueTotals(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	p, err := mempool.New(imm) // not pooltest's: it checks DeviceAllocs, which ResetAccumulated zeroes
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Close()) })
	on := p.On(q, mempool.QueueName("main"))
	for range 10 {
		b, err := on.Allocate(1000)
		require.NoError(t, err)
		require.NoError(t, b.Close())
	}
	m := s32bGather(t, p)
	require.Equal(t, m["clpool_hits_total"], m["clpool_queue_hits_total{queue=main}"], "before: the queue's hits are the pool's")
	require.Equal(t, float64(10), m["clpool_queue_requests_total{queue=main}"])
	p.ResetAccumulated()
	m = s32bGather(t, p)
	s := p.Stats()
	assert.Zero(t, m["clpool_hits_total"])
	assert.Zero(t, s.Hits)
	assert.Zero(t, m["clpool_queue_hits_total{queue=main}"], "ResetAccumulated sets the totals back to zero")
	assert.Zero(t, m["clpool_queue_requests_total{queue=main}"], "ResetAccumulated sets the totals back to zero")
	assert.Zero(t, s.Queues[0].Requests, "Stats.Queues[0].Requests after ResetAccumulated")
}

// PASSES (exploration, found nothing): Every series of a scrape equals the Stats taken with it, and
// MemoryStats (Publish's figures) equals Stats, for both policies.
func TestHostileS32bMetricsEqualStats(t *testing.T) {
	for _, arena := range []bool{false, true} {
		q := cltest.Queue(t)
		var opts []mempool.Option
		if arena {
			opts = append(opts, mempool.WithArena(), mempool.WithMaxSplitSize(1<<20))
		}
		p := pooltest.New(t, q, opts...)
		on := p.On(q)
		var live []*mempool.PooledBuffer
		for i, n := range []int64{64, 5000, 200 << 10, 2 << 20, 64, 3 << 20} {
			b, err := on.Allocate(n)
			require.NoError(t, err)
			if i%2 == 0 {
				require.NoError(t, b.Close())
			} else {
				live = append(live, b)
			}
		}
		s := p.Stats()
		m := s32bGather(t, p)
		ms := p.MemoryStats()
		for _, g := range []struct {
			name string
			g    mempool.StatGroup
		}{{"allocation", s.Allocation}, {"allocated_bytes", s.AllocatedBytes}, {"segment", s.Segment}, {"reserved_bytes", s.ReservedBytes}, {"inactive_split_bytes", s.InactiveSplitBytes}, {"active_bytes", s.ActiveBlockBytes}} {
			for _, sz := range []struct {
				label, torch string
				st           mempool.Stat
			}{{"all", "all", g.g.All}, {"small", "small_pool", g.g.Small}, {"large", "large_pool", g.g.Large}} {
				assert.Equal(t, float64(sz.st.Current), m["clpool_"+g.name+"{size="+sz.label+"}"], g.name)
				assert.Equal(t, float64(sz.st.Peak), m["clpool_"+g.name+"_peak{size="+sz.label+"}"], g.name)
				assert.Equal(t, sz.st.Current, ms[g.name+"."+sz.torch+".current"])
			}
		}
		assert.Equal(t, float64(s.HeldBlocks), m["clpool_held_blocks"])
		assert.Equal(t, float64(s.HeldBytes), m["clpool_held_bytes"])
		assert.Equal(t, float64(s.DeviceAllocs), m["clpool_device_allocs_total"])
		assert.Equal(t, s.DeviceAllocs, ms["num_device_alloc"])
		assert.Equal(t, float64(s.OversizeSegments.Current), m["clpool_oversize_segments"])
		for _, b := range live {
			require.NoError(t, b.Close())
		}
	}
}
