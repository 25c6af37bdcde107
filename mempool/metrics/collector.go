package metrics

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/prometheus/client_golang/prometheus"
)

// ErrNameTaken is returned for a name already in use: by another pool of a
// Collector, or by another expvar variable.
var ErrNameTaken = errors.New("metrics: name taken")

// Collector is a prometheus.Collector of the statistics of pools, each
// under a name of its own (the pool label). Pools can be added and removed
// while it is registered. It is safe for concurrent use.
type Collector struct {
	mu    sync.Mutex               // protects pools; never held while a pool is read
	pools map[string]*mempool.Pool // by name
}

// NewCollector returns a Collector of p's statistics under name (its
// bytes that are not valid UTF-8, which no label may hold, replaced by
// U+FFFD). Register it with a prometheus.Registerer; Add adds more pools.
// A registry takes one Collector (a second's Register fails: they
// describe the same metrics), which may be registered in several
// registries. With a nil p it starts with no pool, and name is unused.
func NewCollector(name string, p *mempool.Pool) *Collector {
	c := &Collector{pools: map[string]*mempool.Pool{}}
	if p != nil {
		c.pools[validLabel(name)] = p
	}
	return c
}

// Add adds p's statistics under name. It returns an error matching
// ErrNameTaken if the collector has a pool of that name already, and an
// error for a nil p or a name that is not valid UTF-8 (no label may hold
// it); it adds nothing then.
func (c *Collector) Add(name string, p *mempool.Pool) error {
	if p == nil {
		return fmt.Errorf("metrics: Add(%q): nil pool", name)
	}
	if !utf8.ValidString(name) {
		return fmt.Errorf("metrics: Add(%q): the name is not valid UTF-8", name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.pools[name]; ok {
		return fmt.Errorf("%w: the collector has a pool %q already", ErrNameTaken, name)
	}
	c.pools[name] = p
	return nil
}

// Remove removes the pool of that name, whose series then leave the next
// scrape, and reports whether there was one.
func (c *Collector) Remove(name string) bool {
	name = validLabel(name) // as NewCollector stored it
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.pools[name]
	delete(c.pools, name)
	return ok
}

// Describe sends the descriptors of every metric the collector exports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, g := range groups {
		g.descs.describe(ch)
	}
	oversizeAllocations.describe(ch)
	oversizeSegments.describe(ch)
	for _, m := range poolMetrics {
		ch <- m.desc
	}
	ch <- infoDesc
	for _, m := range queueMetrics {
		ch <- m.desc
	}
}

// Collect sends the metrics of every pool, from one Stats call each.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	pools := make(map[string]*mempool.Pool, len(c.pools))
	for name, p := range c.pools {
		pools[name] = p
	}
	c.mu.Unlock()

	for name, p := range pools {
		device := validLabel(DeviceLabel(p.Device()))
		s := p.Stats()
		for _, g := range groups {
			sg := g.get(&s)
			g.descs.collect(ch, sg.All, device, name, "all")
			g.descs.collect(ch, sg.Small, device, name, "small")
			g.descs.collect(ch, sg.Large, device, name, "large")
		}
		oversizeAllocations.collect(ch, s.OversizeAllocations, device, name)
		oversizeSegments.collect(ch, s.OversizeSegments, device, name)
		for _, m := range poolMetrics {
			ch <- prometheus.MustNewConstMetric(m.desc, m.typ, m.value(&s), device, name)
		}
		ch <- prometheus.MustNewConstMetric(infoDesc, prometheus.GaugeValue, 1,
			device, name, s.Policy, strconv.Itoa(s.LeadingBits))
		for i, queue := range queueLabels(s.Queues) {
			if s.Queues[i].Queue.FinishedNoWait() {
				continue // released: its series go (a queue per task would add series without end)
			}
			for _, m := range queueMetrics {
				kind := m.kind
				if kind == 0 {
					kind = prometheus.CounterValue
				}
				ch <- prometheus.MustNewConstMetric(m.desc, kind, m.value(&s.Queues[i]), device, name, queue)
			}
		}
	}
}

// The labels of every series: the device's (DeviceLabel; empty when the
// pool does not know its device) and the pool's name.
var poolLabels = []string{"device", "pool"}

// DeviceLabel returns the device label of the series of a pool on d:
// d.StableName(), the device's name and vendor, "name (vendor)", which
// stay the same however the ICD loader is set up (cl.Device.String begins
// with the platform's ordinal, which changes with the .icd files
// installed). A device identical in name and vendor to one listed before
// it (cl.AllDevices' order) is told apart by its place among them:
// "name (vendor) #2", #3, and so on; the first has no number, so a second
// card does not rename the first's series. It returns "" for a nil d.
func DeviceLabel(d *cl.Device) string { return d.StableName() }

// validLabel returns s with its bytes that are not valid UTF-8, which no
// label may hold, replaced by U+FFFD.
func validLabel(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// queueLabels returns the queue label of each of queues: its name (On's
// QueueName, its bytes that are not valid UTF-8 replaced by U+FFFD) or
// else its index. A label a queue before it already has
// gets "#" and the queue's index after it, again until it is one no queue
// before has (a tie-break can be another queue's own name: "copy#3",
// "copy", "copy" are labelled "copy#3", "copy", "copy#3#3"), so that no
// two series of a pool collide.
func queueLabels(queues []mempool.QueueStats) []string {
	labels := make([]string, len(queues))
	taken := make(map[string]bool, len(queues))
	for i, q := range queues {
		label := validLabel(q.Name)
		if label == "" {
			label = strconv.Itoa(i)
		}
		for taken[label] {
			label += "#" + strconv.Itoa(i)
		}
		taken[label] = true
		labels[i] = label
	}
	return labels
}

// statDescs are the four metrics of one torch statistic: its current
// value and peak (gauges), and the totals added and taken away (counters).
type statDescs struct {
	current, peak, allocated, freed *prometheus.Desc
}

// newStatDescs returns the metrics of the torch statistic torch, named
// after it, of which what says what it counts.
func newStatDescs(torch, what string, labels []string) statDescs {
	name := "clpool_" + torch
	return statDescs{
		current:   prometheus.NewDesc(name, what+", now (torch: "+torch+".*.current).", labels, nil),
		peak:      prometheus.NewDesc(name+"_peak", what+", at the most since the pool was made or ResetPeak (torch: "+torch+".*.peak).", labels, nil),
		allocated: prometheus.NewDesc(name+"_allocated_total", what+", the total added since the pool was made or ResetAccumulated (torch: "+torch+".*.allocated).", labels, nil),
		freed:     prometheus.NewDesc(name+"_freed_total", what+", the total taken away since the pool was made or ResetAccumulated (torch: "+torch+".*.freed).", labels, nil),
	}
}

func (d statDescs) describe(ch chan<- *prometheus.Desc) {
	ch <- d.current
	ch <- d.peak
	ch <- d.allocated
	ch <- d.freed
}

func (d statDescs) collect(ch chan<- prometheus.Metric, st mempool.Stat, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d.current, prometheus.GaugeValue, float64(st.Current), labels...)
	ch <- prometheus.MustNewConstMetric(d.peak, prometheus.GaugeValue, float64(st.Peak), labels...)
	ch <- prometheus.MustNewConstMetric(d.allocated, prometheus.CounterValue, float64(st.Allocated), labels...)
	ch <- prometheus.MustNewConstMetric(d.freed, prometheus.CounterValue, float64(st.Freed), labels...)
}

// groupLabels are the labels of the torch statistics kept for all blocks
// and for the small and large pools apart: size is "all", "small" or
// "large" (torch's all, small_pool and large_pool).
var groupLabels = append(append([]string(nil), poolLabels...), "size")

// groups are the torch statistics kept by pool size, in torch's order.
var groups = []struct {
	descs statDescs
	get   func(*mempool.Stats) mempool.StatGroup
}{
	{newStatDescs("allocation", "Blocks handed out", groupLabels), func(s *mempool.Stats) mempool.StatGroup { return s.Allocation }},
	{newStatDescs("allocated_bytes", "Bytes of the blocks handed out", groupLabels), func(s *mempool.Stats) mempool.StatGroup { return s.AllocatedBytes }},
	{newStatDescs("requested_bytes", "Bytes requested for the blocks handed out", groupLabels), func(s *mempool.Stats) mempool.StatGroup { return s.RequestedBytes }},
	{newStatDescs("active", "Active blocks", groupLabels), func(s *mempool.Stats) mempool.StatGroup { return s.Active }},
	{newStatDescs("active_bytes", "Bytes of the active blocks", groupLabels), func(s *mempool.Stats) mempool.StatGroup { return s.ActiveBlockBytes }},
	{newStatDescs("inactive_split", "Held blocks of segments that have a block in use (not releasable)", groupLabels), func(s *mempool.Stats) mempool.StatGroup { return s.InactiveSplit }},
	{newStatDescs("inactive_split_bytes", "Bytes of the held blocks of segments that have a block in use", groupLabels), func(s *mempool.Stats) mempool.StatGroup { return s.InactiveSplitBytes }},
	{newStatDescs("segment", "Device allocations the pool owns", groupLabels), func(s *mempool.Stats) mempool.StatGroup { return s.Segment }},
	{newStatDescs("reserved_bytes", "Bytes of the device allocations the pool owns, once allocated", groupLabels), func(s *mempool.Stats) mempool.StatGroup { return s.ReservedBytes }},
}

// The oversize statistics, which torch keeps for all blocks only.
var (
	oversizeAllocations = newStatDescs("oversize_allocations", "Blocks handed out over the maximum split size", poolLabels)
	oversizeSegments    = newStatDescs("oversize_segments", "Device allocations over the maximum split size", poolLabels)
)

// poolMetrics are the pool's figures outside torch's statistics.
var poolMetrics = []struct {
	desc  *prometheus.Desc
	typ   prometheus.ValueType
	value func(*mempool.Stats) float64
}{
	{poolDesc("hits_total", "Requests served by a held block."), prometheus.CounterValue,
		func(s *mempool.Stats) float64 { return float64(s.Hits) }},
	{poolDesc("misses_total", "Requests that found no held block that fits."), prometheus.CounterValue,
		func(s *mempool.Stats) float64 { return float64(s.Misses) }},
	{poolDesc("device_allocs_total", "Buffers the allocator handed out (torch: num_device_alloc)."), prometheus.CounterValue,
		func(s *mempool.Stats) float64 { return float64(s.DeviceAllocs) }},
	{poolDesc("device_frees_total", "Buffers given back to the allocator (torch: num_device_free)."), prometheus.CounterValue,
		func(s *mempool.Stats) float64 { return float64(s.DeviceFrees) }},
	{poolDesc("free_errors_total", "Frees the allocator reported an error for."), prometheus.CounterValue,
		func(s *mempool.Stats) float64 { return float64(s.FreeErrors) }},
	{poolDesc("reclaimed_total", "Buffers dropped without Close and returned by the garbage collector."), prometheus.CounterValue,
		func(s *mempool.Stats) float64 { return float64(s.Reclaimed) }},
	{poolDesc("alloc_retries_total", "Device allocations that failed for lack of memory and were retried after freeing (torch: num_alloc_retries)."), prometheus.CounterValue,
		func(s *mempool.Stats) float64 { return float64(s.OOMRetries) }},
	{poolDesc("ooms_total", "Requests refused with ErrOutOfMemory (torch: num_ooms)."), prometheus.CounterValue,
		func(s *mempool.Stats) float64 { return float64(s.OOMs) }},
	{poolDesc("held_blocks", "Blocks given back and held for reuse."), prometheus.GaugeValue,
		func(s *mempool.Stats) float64 { return float64(s.HeldBlocks) }},
	{poolDesc("held_bytes", "Bytes of the blocks held for reuse."), prometheus.GaugeValue,
		func(s *mempool.Stats) float64 { return float64(s.HeldBytes) }},
	{poolDesc("fragmentation_ratio", "1 - (largest held block / held bytes): near 1 when the held memory is in many small pieces."), prometheus.GaugeValue,
		func(s *mempool.Stats) float64 { return s.Fragmentation }},
	{poolDesc("limit_bytes", "The pool's limit; 0: none."), prometheus.GaugeValue,
		func(s *mempool.Stats) float64 { return float64(s.Limit) }},
	{poolDesc("max_split_size_bytes", "The size over which requests get segments of their own (WithMaxSplitSize); 0: none."), prometheus.GaugeValue,
		func(s *mempool.Stats) float64 { return float64(s.MaxSplitSize) }},
}

// poolDesc returns the descriptor of a pool metric, with the pool's labels.
func poolDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("clpool_"+name, help, poolLabels, nil)
}

// infoDesc is the pool's configuration, as labels of a series of value 1.
var infoDesc = prometheus.NewDesc("clpool_pool_info",
	"The pool's policy (bins or arena) and leading bits; the value is 1.",
	append(append([]string(nil), poolLabels...), "policy", "leading_bits"), nil)

// queueMetrics are the figures of each queue the pool knows
// (Stats.Queues), the queue label being its name or its index there
// (queueLabels).
var queueMetrics = []struct {
	desc  *prometheus.Desc
	value func(*mempool.QueueStats) float64
	kind  prometheus.ValueType // 0: a counter
}{
	{queueDesc("requests_total", "Requests made on the queue."),
		func(q *mempool.QueueStats) float64 { return float64(q.Requests) }, 0},
	{queueDesc("hits_total", "Requests on the queue served by a held block."),
		func(q *mempool.QueueStats) float64 { return float64(q.Hits) }, 0},
	{queueDesc("handovers_total", "Requests on the queue whose block was last used on another queue (or, out of order, on this one)."),
		func(q *mempool.QueueStats) float64 { return float64(q.Handovers) }, 0},
	{queueDesc("ready_total", "Handovers whose other queues' markers were complete already."),
		func(q *mempool.QueueStats) float64 { return float64(q.Ready) }, 0},
	{queueDesc("barriers_total", "Handovers that waited on the device (a barrier)."),
		func(q *mempool.QueueStats) float64 { return float64(q.Barriers) }, 0},
	{queueDesc("markers_total", "Markers enqueued on the queue."),
		func(q *mempool.QueueStats) float64 { return float64(q.Markers) }, 0},
	{queueDesc("host_waits_total", "Host waits for one of the queue's markers (requests on no queue), or for the queue itself (a pool over pinned memory)."),
		func(q *mempool.QueueStats) float64 { return float64(q.HostWaits) }, 0},
	{queueDesc("cached_blocks", "Held blocks cached in the queue's own cache."),
		func(q *mempool.QueueStats) float64 { return float64(q.Cached) }, prometheus.GaugeValue},
}

// queueDesc returns the descriptor of one of a queue's series.
func queueDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc("clpool_queue_"+name, help, append(append([]string(nil), poolLabels...), "queue"), nil)
}
