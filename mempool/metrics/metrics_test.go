package metrics_test

import (
	"bufio"
	"encoding/json"
	"expvar"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// allocate allocates size bytes with alloc (a pool's or a queue
// allocator's Allocate), closed when the test ends.
func allocate(t *testing.T, alloc func(int64) (*mempool.PooledBuffer, error), size int64) *mempool.PooledBuffer {
	t.Helper()
	b, err := alloc(size)
	require.NoError(t, err)
	t.Cleanup(func() { b.Close() })
	return b
}

// serve serves reg's metrics over HTTP on localhost until the test ends,
// and returns the URL.
func serve(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics"
}

// scrape gets url and returns its samples by series, as the text format
// writes them: `name{label="value",...}`, the labels in order of name.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Content-Type"), "text/plain")

	samples := map[string]float64{}
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		line := lines.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ') // label values may hold spaces; the value cannot
		require.Positive(t, i, "a sample line: %q", line)
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, "the value of %q", line)
		samples[line[:i]] = v
	}
	require.NoError(t, lines.Err())
	return samples
}

// A known sequence on exact bins, two queues: blocks of 4000 bytes (a bin
// of 4095, small) and 4 MiB (4456447, large) on the allocator's queue, the
// large one given back and taken again (a hit); then 1000 bytes (1023,
// small) on a second queue.
func TestCollectorServesThePoolsStatistics(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q, mempool.WithLimit(64<<20))
	a := allocate(t, p.Allocate, 4000)
	b, err := p.Allocate(4 << 20)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	allocate(t, p.Allocate, 4<<20)
	allocate(t, p.On(cltest.SecondQueue(t, q, 0)).Allocate, 1000)

	reg := prometheus.NewPedanticRegistry() // checks the metrics against Describe
	reg.MustRegister(metrics.NewCollector("main", p))
	url := serve(t, reg)
	got := scrape(t, url)

	labels := fmt.Sprintf(`device=%q,pool="main"`, metrics.DeviceLabel(q.Device()))
	series := func(name, more string) string { return name + "{" + labels + more + "}" }
	for _, want := range []struct {
		series string
		value  float64
	}{
		{series("clpool_allocated_bytes", `,size="all"`), 4095 + 4456447 + 1023},
		{series("clpool_allocated_bytes", `,size="small"`), 4095 + 1023},
		{series("clpool_allocated_bytes", `,size="large"`), 4456447},
		{series("clpool_allocated_bytes_peak", `,size="all"`), 4095 + 4456447 + 1023},
		{series("clpool_allocated_bytes_allocated_total", `,size="all"`), 4095 + 2*4456447 + 1023},
		{series("clpool_allocated_bytes_freed_total", `,size="large"`), 4456447},
		{series("clpool_requested_bytes", `,size="small"`), 4000 + 1000},
		{series("clpool_allocation", `,size="all"`), 3},
		{series("clpool_allocation_allocated_total", `,size="all"`), 4},
		{series("clpool_allocation_freed_total", `,size="all"`), 1},
		{series("clpool_active", `,size="all"`), 3},
		{series("clpool_segment", `,size="all"`), 3},
		{series("clpool_segment", `,size="large"`), 1},
		{series("clpool_reserved_bytes", `,size="all"`), 4095 + 4456447 + 1023},
		{series("clpool_inactive_split", `,size="all"`), 0},
		{series("clpool_oversize_allocations", ""), 0},
		{series("clpool_hits_total", ""), 1},
		{series("clpool_misses_total", ""), 3},
		{series("clpool_device_allocs_total", ""), 3},
		{series("clpool_device_frees_total", ""), 0},
		{series("clpool_ooms_total", ""), 0},
		{series("clpool_held_blocks", ""), 0},
		{series("clpool_limit_bytes", ""), 64 << 20},
		{series("clpool_max_split_size_bytes", ""), 0},
		{fmt.Sprintf(`clpool_pool_info{device=%q,leading_bits="4",policy="bins",pool="main"}`, metrics.DeviceLabel(q.Device())), 1},
		// Queue 0 is the allocator's, queue 1 the second.
		{series("clpool_queue_requests_total", `,queue="0"`), 3},
		{series("clpool_queue_hits_total", `,queue="0"`), 1},
		{series("clpool_queue_requests_total", `,queue="1"`), 1},
		{series("clpool_queue_hits_total", `,queue="1"`), 0},
		{series("clpool_queue_cached_blocks", `,queue="0"`), 0}, // drop safety: no queue caches
	} {
		v, ok := got[want.series]
		if assert.True(t, ok, "no series %s", want.series) {
			assert.Equal(t, want.value, v, want.series)
		}
	}
	assert.NotContains(t, got, series("clpool_queue_requests_total", `,queue="2"`))

	// A later scrape shows what changed since.
	require.NoError(t, a.Close())
	got = scrape(t, url)
	assert.Equal(t, float64(1023), got[series("clpool_allocated_bytes", `,size="small"`)])
	assert.Equal(t, float64(4095+4456447), got[series("clpool_allocated_bytes_freed_total", `,size="all"`)])
	assert.Equal(t, float64(1), got[series("clpool_held_blocks", "")])
}

// Pools come and go under their names; a name is taken once.
func TestCollectorAddAndRemove(t *testing.T) {
	q := cltest.Queue(t)
	first, second := pooltest.New(t, q), pooltest.New(t, q, mempool.WithArena())
	allocate(t, first.Allocate, 100)

	c := metrics.NewCollector("", nil)
	require.NoError(t, c.Add("first", first))
	require.NoError(t, c.Add("second", second))
	err := c.Add("first", second)
	require.ErrorIs(t, err, metrics.ErrNameTaken)
	assert.EqualError(t, err, `metrics: name taken: the collector has a pool "first" already`)
	assert.EqualError(t, c.Add("none", nil), `metrics: Add("none"): nil pool`)

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	url := serve(t, reg)
	info := func(name, policy string) string {
		return fmt.Sprintf(`clpool_pool_info{device=%q,leading_bits="4",policy=%q,pool=%q}`, metrics.DeviceLabel(q.Device()), policy, name)
	}
	got := scrape(t, url)
	assert.Contains(t, got, info("first", "bins"))
	assert.Contains(t, got, info("second", "arena"))
	misses := fmt.Sprintf(`clpool_misses_total{device=%q,pool="first"}`, metrics.DeviceLabel(q.Device()))
	assert.Equal(t, float64(1), got[misses])

	assert.True(t, c.Remove("second"))
	assert.False(t, c.Remove("second"), "removed already")
	got = scrape(t, url)
	assert.Contains(t, got, info("first", "bins"))
	for series := range got {
		assert.NotContains(t, series, `pool="second"`)
	}
}

// A collector of no pool exports nothing, and registers all the same.
func TestCollectorOfNoPool(t *testing.T) {
	c := metrics.NewCollector("unused", nil)
	assert.Zero(t, testutil.CollectAndCount(c))
	require.NoError(t, prometheus.NewPedanticRegistry().Register(c))
}

// The metrics keep Prometheus' naming rules (promlint): counters end in
// _total, units are base units, every metric has help.
func TestCollectorFollowsPrometheusConventions(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q)
	allocate(t, p.Allocate, 100)
	problems, err := testutil.CollectAndLint(metrics.NewCollector("main", p))
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// published counts the expvar names the tests publish: expvar cannot
// remove them, and -count runs the tests again in the same process.
var published atomic.Int64

// uniqueName returns an expvar name no other test has published.
func uniqueName(t *testing.T) string {
	return fmt.Sprintf("%s-%d", t.Name(), published.Add(1))
}

func TestPublishServesMemoryStats(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q)
	allocate(t, p.Allocate, 4000)
	name := uniqueName(t)
	require.NoError(t, metrics.Publish(name, p))

	srv := httptest.NewServer(expvar.Handler())
	defer srv.Close()
	read := func() map[string]int64 {
		resp, err := http.Get(srv.URL + "/debug/vars")
		require.NoError(t, err)
		defer resp.Body.Close()
		var vars map[string]json.RawMessage
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&vars))
		require.Contains(t, vars, name)
		var stats map[string]int64
		require.NoError(t, json.Unmarshal(vars[name], &stats))
		return stats
	}

	stats := read()
	assert.Equal(t, p.MemoryStats(), stats)
	assert.Equal(t, int64(4095), stats["allocated_bytes.all.current"])
	assert.Equal(t, int64(4000), stats["requested_bytes.small_pool.current"])
	assert.Equal(t, int64(1), stats["num_device_alloc"])
	assert.Equal(t, int64(-1), stats["max_split_size"], "no maximum, as torch reports it")

	// Read at each request.
	allocate(t, p.Allocate, 4000)
	assert.Equal(t, int64(2*4095), read()["allocated_bytes.all.current"])
}

// expvar panics on a name published twice; Publish returns an error.
func TestPublishRefusesATakenName(t *testing.T) {
	p := pooltest.New(t, cltest.Queue(t))
	name := uniqueName(t)
	require.NoError(t, metrics.Publish(name, p))

	err := metrics.Publish(name, p)
	require.ErrorIs(t, err, metrics.ErrNameTaken)
	assert.EqualError(t, err, fmt.Sprintf("metrics: name taken: expvar has a variable %q already", name))
	assert.ErrorIs(t, metrics.Publish("memstats", p), metrics.ErrNameTaken, "expvar's own variable")

	other := uniqueName(t)
	assert.EqualError(t, metrics.Publish(other, nil), fmt.Sprintf("metrics: Publish(%q): nil pool", other))
	assert.Nil(t, expvar.Get(other), "nothing published")
}

// Issue 24: the device label is the device's name and vendor, without
// the platform's ordinal that cl.Device.String starts with: the same
// series whatever .icd files the loader reads. (It was "1:0 pthread..."
// with POCL and Oclgrind installed, "0:0 pthread..." with POCL alone.)
func TestDeviceLabelIsTheSameWhateverTheICDSetup(t *testing.T) {
	q := cltest.Queue(t)
	label := metrics.DeviceLabel(q.Device())
	assert.Equal(t, q.Device().Name+" ("+q.Device().Vendor+")", label)
	assert.Empty(t, metrics.DeviceLabel(nil))

	if os.Getenv(cltest.ChildEnv) == "device-label" {
		t.Logf("LABEL=%s", label) // the parent compares it with its own
		return
	}
	if !q.Device().Matches("pocl") {
		t.Skipf("compares setups with and without Oclgrind where the device is POCL; it is %v", q.Device())
	}
	out, err := cltest.Reexec(t, "^TestDeviceLabelIsTheSameWhateverTheICDSetup$", cltest.ChildEnv+"=device-label",
		"OCL_ICD_VENDORS="+cltest.POCLOnlyVendors(t), cl.DeviceEnv+"=pocl")
	require.NoError(t, err, out)
	m := regexp.MustCompile(`LABEL=(.*)`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	assert.Equal(t, label, strings.TrimSpace(m[1]), "the label with POCL alone is the label with POCL and Oclgrind")
}

// Two identical devices are told apart by their place among them, the
// first without a number.
func TestDeviceLabelTellsIdenticalDevicesApart(t *testing.T) {
	cltest.RunOnTwoPOCLDevices(t, "TestDeviceLabelOfTwoIdenticalDevices")
}

func TestDeviceLabelOfTwoIdenticalDevices(t *testing.T) {
	d1, d2 := cltest.TwoDevices(t)
	require.Equal(t, d1.Name, d2.Name)
	base := d1.Name + " (" + d1.Vendor + ")"
	assert.Equal(t, base, metrics.DeviceLabel(d1))
	assert.Equal(t, base+" #2", metrics.DeviceLabel(d2))
}

// Issue 24: a queue named with mempool.QueueName is labelled by its name;
// an unnamed one by its index; a name two queues share is told apart.
func TestQueueLabelIsTheQueuesName(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q)
	copies, compute, third := cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, 0)
	allocate(t, p.On(copies, mempool.QueueName("copy")).Allocate, 100)
	allocate(t, p.On(compute).Allocate, 100)
	allocate(t, p.On(compute, mempool.QueueName("compute")).Allocate, 100) // named at a later On
	allocate(t, p.On(third, mempool.QueueName("copy")).Allocate, 100)      // a name taken

	s := p.Stats()
	require.Len(t, s.Queues, 4, "the allocator's queue, then the three")
	assert.Equal(t, []string{"", "copy", "compute", "copy"},
		[]string{s.Queues[0].Name, s.Queues[1].Name, s.Queues[2].Name, s.Queues[3].Name})

	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewCollector("main", p))
	got := scrape(t, serve(t, reg))
	series := func(queue string) string {
		return fmt.Sprintf(`clpool_queue_requests_total{device=%q,pool="main",queue=%q}`, metrics.DeviceLabel(q.Device()), queue)
	}
	assert.Equal(t, float64(0), got[series("0")], "the allocator's queue, unnamed")
	assert.Equal(t, float64(1), got[series("copy")])
	assert.Equal(t, float64(2), got[series("compute")])
	assert.Equal(t, float64(1), got[series("copy#3")])

	// A name can be taken away again.
	p.On(compute, mempool.QueueName(""))
	assert.Empty(t, p.Stats().Queues[2].Name)
	p.On(compute) // no option: the name stays as it is
	p.On(copies)
	assert.Equal(t, "copy", p.Stats().Queues[1].Name)
}

// A name a queue tells a taken name apart with may be another queue's own
// name: queue 3, named "copy" as queue 2 is, would be "copy#3", which is
// queue 1's name, and the scrape would fail on the two series. It gets
// "#3" once more.
func TestQueueLabelsStayApartWhenATieBreakIsAQueuesName(t *testing.T) {
	q := cltest.Queue(t)
	a, b, c := cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, 0)
	p := pooltest.New(t, q)
	allocate(t, p.On(a, mempool.QueueName("copy#3")).Allocate, 100) // queue 1
	allocate(t, p.On(b, mempool.QueueName("copy")).Allocate, 100)   // queue 2
	allocate(t, p.On(c, mempool.QueueName("copy")).Allocate, 100)   // queue 3: "copy" is taken
	allocate(t, p.On(c).Allocate, 100)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewCollector("main", p))
	_, err := reg.Gather()
	require.NoError(t, err)
	got := scrape(t, serve(t, reg))
	series := func(queue string) string {
		return fmt.Sprintf(`clpool_queue_requests_total{device=%q,pool="main",queue=%q}`, metrics.DeviceLabel(q.Device()), queue)
	}
	assert.Equal(t, float64(1), got[series("copy#3")], "queue 1, by its name")
	assert.Equal(t, float64(1), got[series("copy")])
	assert.Equal(t, float64(2), got[series("copy#3#3")], "queue 3")
}

// A released queue's series go, and the other queues keep their labels: a
// program that makes a queue per task adds no series without end.
func TestReleasedQueuesSeriesGo(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q)
	gone, kept := cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, 0)
	allocate(t, p.On(gone).Allocate, 100)
	allocate(t, p.On(kept).Allocate, 100)
	require.NoError(t, gone.Release())
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewCollector("main", p))
	got := scrape(t, serve(t, reg))
	series := func(queue string) string {
		return fmt.Sprintf(`clpool_queue_requests_total{device=%q,pool="main",queue=%q}`, metrics.DeviceLabel(q.Device()), queue)
	}
	assert.Contains(t, got, series("0"), "the allocator's queue")
	assert.NotContains(t, got, series("1"), "the released queue")
	assert.Equal(t, float64(1), got[series("2")], "the queue after it keeps its label")
}
