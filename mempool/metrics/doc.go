// Package metrics exports the statistics of mempool pools to Prometheus
// and to expvar.
//
// A Collector is a prometheus.Collector of one or more pools, each under a
// name of its own; register it and serve the registry with promhttp:
//
//	c := metrics.NewCollector("main", pool)
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(c)
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// A registry takes one Collector: every Collector describes the same
// metrics, so a second one's Register fails (prometheus.
// AlreadyRegisteredError). Give the one Collector every pool, with Add.
//
// Publish publishes a pool's MemoryStats as an expvar variable, which
// /debug/vars shows as JSON under torch.cuda.memory_stats' key names.
//
// # Metrics
//
// Every series has the labels device and pool. device is the pool's
// device as DeviceLabel names it, "name (vendor)", the same whatever
// platforms the ICD loader lists (cl.Device.String's "1:0 ..." is not),
// with " #2", " #3" after devices identical to one listed before them;
// it is empty when the pool does not know its device. pool is the name
// given to NewCollector or Add. Each figure is read from one Pool.Stats call per
// pool and scrape, so the figures of a scrape agree with each other.
//
// Each torch statistic X of torch.cuda.memory_stats kept by pool size
// (allocation, allocated_bytes, requested_bytes, active, active_bytes,
// inactive_split, inactive_split_bytes, segment, reserved_bytes) is four
// metrics, with a label size of "all", "small" or "large" (torch's all,
// small_pool and large_pool):
//
//	clpool_X                  gauge    X.<size>.current
//	clpool_X_peak             gauge    X.<size>.peak
//	clpool_X_allocated_total  counter  X.<size>.allocated
//	clpool_X_freed_total      counter  X.<size>.freed
//
// size="all" is the sum of the other two (its peak, the peak of the sum):
// select a size rather than summing over it. The oversize statistics
// (clpool_oversize_allocations and clpool_oversize_segments, with the same
// four suffixes) have no size label, as in torch.
//
// The pool's own figures (mempool.Stats) are counters
// clpool_hits_total, clpool_misses_total, clpool_device_allocs_total
// (torch's num_device_alloc), clpool_device_frees_total
// (num_device_free), clpool_free_errors_total, clpool_reclaimed_total,
// clpool_alloc_retries_total (num_alloc_retries) and clpool_ooms_total
// (num_ooms); gauges clpool_held_blocks, clpool_held_bytes,
// clpool_fragmentation_ratio, clpool_limit_bytes and
// clpool_max_split_size_bytes (0: none); and clpool_pool_info, of value 1,
// whose labels policy and leading_bits name the configuration.
//
// Each queue the pool knows (Stats.Queues: those it allocated for, and
// those a RecordQueue named) has counters with a
// label queue: the name given to the queue with mempool.QueueName,
//
//	copies := pool.On(copyQueue, mempool.QueueName("copy")) // queue="copy"
//
// or else its index in Stats.Queues, which depends on the order in which
// the program first used its queues (a label a queue before has taken
// gets "#" and the index after it, until no queue before has it):
// clpool_queue_requests_total,
// clpool_queue_hits_total, clpool_queue_handovers_total,
// clpool_queue_ready_total, clpool_queue_barriers_total,
// clpool_queue_markers_total and clpool_queue_host_waits_total, and the gauge
// clpool_queue_cached_blocks (held blocks cached in the queue's own
// cache). A queue's series go once the queue is released (its Release has
// returned): a program that makes a queue per task does not add series
// without end, and the other queues keep their labels.
//
// Pool.ResetAccumulated sets the totals back to zero; Prometheus takes that
// as a counter reset, which rate and increase allow for.
package metrics
