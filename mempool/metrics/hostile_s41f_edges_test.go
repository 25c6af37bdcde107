package metrics_test

// Hostile review s41f: registries, odd queue names, queues known by
// RecordQueue only, expvar under churn.

import (
	"encoding/json"
	"errors"
	"expvar"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s41fQueueLabels scrapes url, parses it with client_golang's own text
// parser, and returns the queue label values of clpool_queue_requests_total
// (its value by label) of pool.
func s41fQueueLabels(t *testing.T, url, pool string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	require.NoError(t, err, "the exposition parses")
	out := map[string]float64{}
	mf := mfs["clpool_queue_requests_total"]
	if mf == nil {
		return out
	}
	for _, m := range mf.GetMetric() {
		var q, p string
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "queue":
				q = l.GetValue()
			case "pool":
				p = l.GetValue()
			}
		}
		if p == pool {
			out[q] = m.GetCounter().GetValue()
		}
	}
	return out
}

// PASSES (guard): queue names with quotes, backslashes, newlines, braces,
// a NUL, "#" tie-breaks that look like indices, and an index-like name
// ("1") before the unnamed queue 1 travel through promhttp's text format
// and back intact and apart; a queue known only by RecordQueue has its
// line of zeros, and its series go when it is released, the other
// queues keeping their labels.
func TestHostileS41fOddQueueNamesRoundTrip(t *testing.T) {
	q := cltest.Queue(t)
	qs := []*cl.CommandQueue{cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, 0)}
	recorded := cltest.SecondQueue(t, q, 0)
	p := pooltest.New(t, q)
	// Queue 0 (the allocator's) is named "2"; queue 1 unnamed; queue 2 named
	// `a"b\c` + newline; queue 3 named "2" too; queue 4 named "\x00{}=".
	allocate(t, p.On(q, mempool.QueueName("2")).Allocate, 100)
	allocate(t, p.On(qs[0]).Allocate, 100)
	allocate(t, p.On(qs[1], mempool.QueueName("a\"b\\c\n")).Allocate, 100)
	allocate(t, p.On(qs[2], mempool.QueueName("2")).Allocate, 100)
	b := allocate(t, p.On(qs[3], mempool.QueueName("\x00{}=")).Allocate, 100)
	require.NoError(t, b.RecordQueue(recorded)) // queue 5, no name, no request

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewCollector("p", p))
	url := serve(t, reg)
	got := s41fQueueLabels(t, url, "p")
	assert.Equal(t, map[string]float64{
		"2": 1, "1": 1, "a\"b\\c\n": 1, "2#3": 1, "\x00{}=": 1, "5": 0,
	}, got)

	require.NoError(t, recorded.Release())
	require.NoError(t, qs[1].Release())
	got = s41fQueueLabels(t, url, "p")
	assert.Equal(t, map[string]float64{"2": 1, "1": 1, "2#3": 1, "\x00{}=": 1}, got)
}

// Found (s41f): two Collectors, of two pools under two names, cannot be
// registered in one registry: every Collector's Describe sends the same
// package-level descriptors (collector.go), so the registry takes the
// second for the first (an AlreadyRegisteredError whose ExistingCollector
// is the other). The docs did not say so; they now say a registry takes
// one Collector, and Add gives it every pool. This holds them to it: the
// second Register fails, and one Collector with both pools serves both.
func TestHostileS41fTwoCollectorsInOneRegistry(t *testing.T) {
	q := cltest.Queue(t)
	p1, p2 := pooltest.New(t, q), pooltest.New(t, q, mempool.WithArena())
	c1, c2 := metrics.NewCollector("first", p1), metrics.NewCollector("second", p2)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c1))
	var are prometheus.AlreadyRegisteredError
	require.ErrorAs(t, reg.Register(c2), &are)
	assert.Same(t, c1, are.ExistingCollector)

	require.NoError(t, c1.Add("second", p2))
	families, err := reg.Gather()
	require.NoError(t, err)
	pools := map[string]bool{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pool" {
					pools[l.GetValue()] = true
				}
			}
		}
	}
	assert.Equal(t, map[string]bool{"first": true, "second": true}, pools)
}

// PASSES (guard): one Collector in two registries, one scraped over HTTP
// and one gathered, unregistered and registered again, while the pool
// allocates: every scrape succeeds and both see the pool.
func TestHostileS41fOneCollectorTwoRegistries(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	p := pooltest.New(t, q)
	c := metrics.NewCollector("p", p)
	r1, r2 := prometheus.NewPedanticRegistry(), prometheus.NewPedanticRegistry()
	r1.MustRegister(c)
	r2.MustRegister(c)
	url := serve(t, r1)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		a := p.On(q2, mempool.QueueName("w"))
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			b, err := a.Allocate(int64(100 + i%5000))
			if assert.NoError(t, err) {
				assert.NoError(t, b.Close())
			}
		}
	})
	wg.Go(func() {
		for i := range 30 {
			if i%10 == 9 {
				assert.True(t, r2.Unregister(c))
				assert.False(t, r2.Unregister(c))
				assert.NoError(t, r2.Register(c))
			}
			_, err := r2.Gather()
			assert.NoError(t, err)
		}
	})
	for range 20 {
		sc, err := s41fGet(url)
		require.NoError(t, err)
		s41fCheck(t, sc)
	}
	close(stop)
	wg.Wait()
	assert.Positive(t, testutil.CollectAndCount(c, "clpool_queue_requests_total"))
}

// PASSES (guard): expvar served over HTTP while the pool churns: every
// response is valid JSON, the variable's figures agree with themselves
// (all = small + large), and at rest equal MemoryStats; of many
// concurrent Publish calls of one name exactly one succeeds, the others
// ErrNameTaken, none panics.
func TestHostileS41fExpvarUnderChurn(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	p, err := mempool.New(allocator.NewBudget(imm, 2<<20), mempool.WithArena())
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Close()) })

	name := uniqueName(t)
	var ok, taken atomic.Int64
	var pub sync.WaitGroup
	for range 8 {
		pub.Go(func() {
			switch err := metrics.Publish(name, p); {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, metrics.ErrNameTaken):
				taken.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	pub.Wait()
	require.Equal(t, int64(1), ok.Load())
	require.Equal(t, int64(7), taken.Load())

	srv := httptest.NewServer(expvar.Handler())
	defer srv.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var kept []*mempool.PooledBuffer
		for i := 0; ; i++ {
			select {
			case <-stop:
				for _, b := range kept {
					assert.NoError(t, b.Close())
				}
				return
			default:
			}
			b, err := p.Allocate(int64(1 + (i*7919)%(1200<<10)))
			if err != nil {
				assert.ErrorIs(t, err, mempool.ErrOutOfMemory)
			} else {
				kept = append(kept, b)
			}
			if len(kept) > 2 || (err != nil && len(kept) > 0) {
				assert.NoError(t, kept[0].Close())
				kept = kept[1:]
			}
			if i%50 == 0 {
				p.ResetAccumulated()
			}
		}
	})
	read := func() map[string]int64 {
		resp, err := http.Get(srv.URL)
		require.NoError(t, err)
		defer resp.Body.Close()
		var vars map[string]json.RawMessage
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&vars), "/debug/vars is valid JSON")
		var m map[string]int64
		require.NoError(t, json.Unmarshal(vars[name], &m))
		return m
	}
	for range 30 {
		m := read()
		for _, g := range []string{"allocation", "allocated_bytes", "requested_bytes", "segment", "reserved_bytes", "inactive_split_bytes"} {
			for _, f := range []string{"current", "allocated", "freed"} {
				assert.Equal(t, m[g+".small_pool."+f]+m[g+".large_pool."+f], m[g+".all."+f], g+"."+f)
			}
		}
	}
	close(stop)
	wg.Wait()
	assert.Equal(t, p.MemoryStats(), read())
}
