package metrics_test

import (
	"encoding/json"
	"expvar"
	"fmt"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/metrics"
	"github.com/prometheus/client_golang/prometheus"
)

// A collector registered with a registry; promhttp.HandlerFor(reg, ...)
// would serve it. Here the example gathers the registry itself and prints
// the allocated bytes, for all blocks and by pool size.
func ExampleNewCollector() {
	q, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Release()
	alloc, _ := allocator.NewImmediate(q, cl.MemReadWrite)
	pool, _ := mempool.New(alloc)
	defer pool.Close()
	b, _ := pool.Allocate(4000) // a block of 4095 bytes, from the small pool
	defer b.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(metrics.NewCollector("main", pool))
	families, err := reg.Gather()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, f := range families {
		if f.GetName() != "clpool_allocated_bytes" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "size" {
					fmt.Printf("%s{size=%q} %v\n", f.GetName(), l.GetValue(), m.GetGauge().GetValue())
				}
			}
		}
	}
	// Output:
	// clpool_allocated_bytes{size="all"} 4095
	// clpool_allocated_bytes{size="large"} 0
	// clpool_allocated_bytes{size="small"} 4095
}

// One collector exports several pools, each under its name; a removed
// pool's series leave the next scrape.
func ExampleCollector_Add() {
	q, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Release()
	alloc, _ := allocator.NewImmediate(q, cl.MemReadWrite)
	bins, _ := mempool.New(alloc)
	defer bins.Close()
	arena, _ := mempool.New(alloc, mempool.WithArena())
	defer arena.Close()

	c := metrics.NewCollector("bins", bins)
	if err := c.Add("arena", arena); err != nil {
		fmt.Println(err)
	}
	fmt.Println(c.Add("bins", arena))
	fmt.Println(c.Remove("arena"), c.Remove("arena"))
	// Output:
	// metrics: name taken: the collector has a pool "bins" already
	// true false
}

// Publish shows the pool's MemoryStats in expvar, which serves them at
// /debug/vars; here the example reads the variable directly.
func ExamplePublish() {
	q, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Release()
	alloc, _ := allocator.NewImmediate(q, cl.MemReadWrite)
	pool, _ := mempool.New(alloc)
	defer pool.Close()
	b, _ := pool.Allocate(4000)
	defer b.Close()

	if err := metrics.Publish("clpool_example", pool); err != nil {
		fmt.Println(err)
		return
	}
	var stats map[string]int64
	if err := json.Unmarshal([]byte(expvar.Get("clpool_example").String()), &stats); err != nil {
		fmt.Println(err)
		return
	}
	for _, k := range []string{"allocated_bytes.all.current", "requested_bytes.all.current", "num_device_alloc"} {
		fmt.Println(k, stats[k])
	}
	// Output:
	// allocated_bytes.all.current 4095
	// requested_bytes.all.current 4000
	// num_device_alloc 1
}
