// Command batches runs a pipeline of requests of random sizes through
// package array over a memory pool: the "random mixed sizes" workload.
// Requests come in batches of 1 to 16; their lengths are drawn from a
// heavy-tailed (Pareto) distribution, from 16 elements up to 2 Mi, most of
// them short and a few very long. Each request is uploaded, transformed
// (z = a·x² + x), reduced (sum, maximum), normalized (w = z / max z) and
// reduced again (|w|²); half of the results stay alive for a while in a
// window of the last 16 kept, each batch's sums are gathered on the device
// and reduced, and after each batch the window's newest and oldest results
// are compared over their common length, through views. Every figure is
// checked against float64 on the host.
//
// With -trace FILE it records the run's allocations
// (memhooks.TraceRecorder) for `clpool replay` and `clpool viz`
// (testdata/batches.tsv is such a trace); with -arena the pool is a
// splitting arena.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
)

func main() {
	cfg := defaultConfig()
	flag.IntVar(&cfg.requests, "requests", cfg.requests, "requests in all")
	flag.IntVar(&cfg.maxBatch, "batch", cfg.maxBatch, "the most requests in a batch")
	flag.IntVar(&cfg.maxLen, "max", cfg.maxLen, "the longest request, in elements")
	flag.Float64Var(&cfg.alpha, "alpha", cfg.alpha, "the lengths' tail index (smaller: heavier tail)")
	flag.IntVar(&cfg.window, "window", cfg.window, "the most results kept alive")
	flag.Uint64Var(&cfg.seed, "seed", cfg.seed, "seed of the requests' random numbers")
	tracePath := flag.String("trace", "", "record the run's allocations to this `file`")
	arena := flag.Bool("arena", false, "make the pool a splitting arena (mempool.WithArena)")
	flag.Parse()
	if err := run(os.Stdout, cfg, *tracePath, *arena); err != nil {
		fmt.Fprintln(os.Stderr, "batches:", err)
		os.Exit(1)
	}
}

// defaultConfig is the run of testdata/batches.tsv.
func defaultConfig() config {
	return config{requests: 2000, maxBatch: 16, minLen: 16, maxLen: 1 << 21, alpha: 0.8, window: 16, keep: 0.5, seed: 1}
}

// run runs cfg's pipeline in float32 over a pool on the default device,
// and writes a summary to w.
func run(w io.Writer, cfg config, tracePath string, arena bool) error {
	q, err := cl.DefaultQueue()
	if err != nil {
		return err
	}
	defer q.Release()
	defer array.ReleaseKernels(q.Context())
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	if err != nil {
		return err
	}
	var opts []mempool.Option
	if arena {
		opts = append(opts, mempool.WithArena())
	}
	pool, err := mempool.New(imm, opts...)
	if err != nil {
		return err
	}
	defer pool.Close()
	var rec *memhooks.TraceRecorder
	if tracePath != "" {
		f, err := os.Create(tracePath)
		if err != nil {
			return err
		}
		defer f.Close()
		rec = memhooks.NewTraceRecorder(f)
		defer pool.AddHook(rec)()
	}
	fmt.Fprintf(w, "%d requests, float32, on %s\n", cfg.requests, q.Device().StableName())
	start := time.Now()
	res, err := process[float32](q, cfg, pool.Allocate)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	if rec != nil {
		if err := rec.Flush(); err != nil {
			return fmt.Errorf("writing the trace: %w", err)
		}
	}
	lengths := slices.Sorted(slices.Values(res.Lengths))
	distinct := len(slices.Compact(slices.Clone(lengths)))
	if len(lengths) > 0 {
		fmt.Fprintf(w, "batches: %d; lengths %d to %d elements, median %d, %d distinct; %d elements in all\n",
			res.Batches, lengths[0], lengths[len(lengths)-1], lengths[len(lengths)/2], distinct, res.Elements)
	}
	fmt.Fprintf(w, "window: at most %d results, %d bytes; %d overlaps of its newest and oldest\n",
		cfg.window, res.PeakWindowBytes, res.Overlaps)
	fmt.Fprintf(w, "check: sums, maxima, norms and overlaps within %.2e of float64 on the host; checksum %.6e\n",
		res.MaxRelErr, res.Checksum)
	s := pool.Stats()
	fmt.Fprintf(w, "pool (%s): %d hits, %d misses, %d device allocations, peak %d bytes active, %d managed\n",
		s.Policy, s.Hits, s.Misses, s.DeviceAllocs, s.PeakActiveBytes, s.PeakManagedBytes)
	fmt.Fprintf(w, "time: %v\n", elapsed.Round(time.Millisecond))
	return nil
}
