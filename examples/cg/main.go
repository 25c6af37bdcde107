// Command cg solves the 1-D Poisson system (tridiagonal 2, -1, -1; n =
// 131072) with 300 conjugate-gradient iterations written with package
// array: the workload of testdata/cg.tsv, which PyOpenCL recorded. It runs
// the solve twice, over the raw Immediate allocator and over a pool on it,
// and prints the residual, the time of each run, the pool's counters and
// the speedup. With -trace FILE it records the pooled run's allocations
// (memhooks.TraceRecorder) for `clpool replay` and `clpool viz`; with
// -arena the pool is a splitting arena.
package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
)

func main() {
	n := flag.Int("n", 131072, "unknowns")
	iters := flag.Int("iters", 300, "CG iterations")
	tracePath := flag.String("trace", "", "record the pooled run's allocations to this `file`")
	arena := flag.Bool("arena", false, "make the pool a splitting arena (mempool.WithArena)")
	flag.Parse()
	if err := run(*n, *iters, *tracePath, *arena); err != nil {
		fmt.Fprintln(os.Stderr, "cg:", err)
		os.Exit(1)
	}
}

func run(n, iters int, tracePath string, arena bool) error {
	q, err := cl.DefaultQueue()
	if err != nil {
		return err
	}
	defer q.Release()
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	if err != nil {
		return err
	}
	fmt.Printf("1-D Poisson, n = %d, %d CG iterations, float32, on %v\n", n, iters, q.Device())

	// One iteration first, at the same size: building the kernels (and POCL
	// specializing them for these work sizes) is paid by neither timed run.
	if _, err := solve[float32](q, n, 1, imm.Allocate); err != nil {
		return err
	}

	start := time.Now()
	raw, err := solve[float32](q, n, iters, imm.Allocate)
	if err != nil {
		return err
	}
	rawTime := time.Since(start)
	fmt.Printf("raw Immediate allocator: residual %.3e in %v\n", raw.Residual, rawTime.Round(time.Millisecond))

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
	start = time.Now()
	pooled, err := solve[float32](q, n, iters, pool.Allocate)
	if err != nil {
		return err
	}
	poolTime := time.Since(start)
	if rec != nil {
		if err := rec.Flush(); err != nil {
			return fmt.Errorf("writing the trace: %w", err)
		}
	}
	s := pool.Stats()
	fmt.Printf("pool over Immediate:     residual %.3e in %v\n", pooled.Residual, poolTime.Round(time.Millisecond))
	fmt.Printf("pool: %d hits, %d misses, %d blocks held, %d bytes managed (peak %d)\n",
		s.Hits, s.Misses, s.HeldBlocks, s.ManagedBytes, s.PeakManagedBytes)
	fmt.Printf("speedup with the pool: %.2fx\n", rawTime.Seconds()/poolTime.Seconds())
	array.ReleaseKernels(q.Context())
	return nil
}
