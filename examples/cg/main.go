// Command cg solves the 1-D Poisson system (tridiagonal 2, -1, -1; n =
// 131072) with 300 conjugate-gradient iterations written with package
// array: the workload of testdata/cg.tsv, which PyOpenCL recorded. It runs
// the solve twice, over the raw Immediate allocator and over a pool on it,
// and prints what the pool changed: the device allocations made, the peak
// of device memory, the time spent allocating and freeing, and the time of
// the whole solve. With -trace FILE it records the pooled run's
// allocations, call sites and the pool's segments
// (memhooks.TraceRecorder with WithSites) for `clpool replay` and
// `clpool viz`; a Ctrl-C during the run leaves a whole trace. With -arena
// the pool is a splitting arena.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
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
	if err := run(os.Stdout, *n, *iters, *tracePath, *arena); err != nil {
		fmt.Fprintln(os.Stderr, "cg:", err)
		os.Exit(1)
	}
}

// meter counts what an allocation function and its blocks' Close do: the
// blocks allocated, the bytes live and their peak, and the time spent in
// the calls. It is for one goroutine, as the solve is.
type meter struct {
	blocks     int64
	live, peak int64
	took       time.Duration
}

// metered is a block whose Close the meter times.
type metered[B array.Block] struct {
	b    B
	m    *meter
	size int64
}

func (b metered[B]) Buffer() *cl.Buffer { return b.b.Buffer() }

func (b metered[B]) Close() error {
	start := time.Now()
	err := b.b.Close()
	b.m.took += time.Since(start)
	b.m.live -= b.size
	return err
}

// wrap returns alloc, metered by m.
func wrap[B array.Block](m *meter, alloc func(int64) (B, error)) func(int64) (metered[B], error) {
	return func(size int64) (metered[B], error) {
		start := time.Now()
		b, err := alloc(size)
		m.took += time.Since(start)
		if err != nil {
			return metered[B]{}, err
		}
		m.blocks++
		m.live += size
		m.peak = max(m.peak, m.live)
		return metered[B]{b: b, m: m, size: size}, nil
	}
}

func run(w io.Writer, n, iters int, tracePath string, arena bool) error {
	q, err := cl.DefaultQueue()
	if err != nil {
		return err
	}
	defer q.Release()
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "1-D Poisson, n = %d, %d CG iterations, float32, on %s\n", n, iters, q.Device().StableName())

	// One iteration first, at the same size: building the kernels (and POCL
	// specializing them for these work sizes) is paid by neither timed run.
	if _, err := solve[float32](q, n, 1, imm.Allocate); err != nil {
		return err
	}

	// Without the pool: every array is a device allocation of its own.
	var rawM meter
	start := time.Now()
	raw, err := solve[float32](q, n, iters, wrap(&rawM, imm.Allocate))
	if err != nil {
		return err
	}
	rawTime := time.Since(start)

	var opts []mempool.Option
	if arena {
		opts = append(opts, mempool.WithArena())
	}
	pool, err := mempool.New(imm, opts...)
	if err != nil {
		return err
	}
	defer pool.Close()
	var poolM meter
	start = time.Now()
	pooled, err := solve[float32](q, n, iters, wrap(&poolM, pool.Allocate))
	if err != nil {
		return err
	}
	poolTime := time.Since(start)
	s := pool.Stats()

	fmt.Fprintf(w, "residual %.3e without the pool, %.3e with it\n\n", raw.Residual, pooled.Residual)
	fmt.Fprintf(w, "%-32s %16s %16s\n", "what the pool changed", "without the pool", "with the pool")
	fmt.Fprintf(w, "%-32s %16d %16d\n", "device allocations", rawM.blocks, s.DeviceAllocs)
	fmt.Fprintf(w, "%-32s %16s %16s\n", "peak device memory", mib(rawM.peak), mib(s.PeakManagedBytes))
	fmt.Fprintf(w, "%-32s %16s %16s\n", "time allocating and freeing", ms(rawM.took), ms(poolM.took))
	fmt.Fprintf(w, "%-32s %16s %16s\n", "time of the whole solve", ms(rawTime), ms(poolTime))
	fmt.Fprintf(w, "(%d arrays either way; the pool served %d of them from memory it held)\n\n", poolM.blocks, s.Hits)
	fmt.Fprintln(w, whereTheTimeGoes(q.Device()))
	if tracePath != "" {
		if err := record(q, imm, opts, n, iters, tracePath); err != nil {
			return err
		}
		fmt.Fprintf(w, "\nrecorded a pooled solve's allocations, their sites and the pool's segments in %s\n", tracePath)
	}
	array.ReleaseKernels(q.Context())
	return nil
}

// record solves once more over a new pool, recording its trace to path
// (the metered runs above would show their meter as every block's site).
// The recorder writes whole lines by itself every 250 ms; on Ctrl-C, its
// Close writes the rest, so that the trace ends on a whole line.
func record(q *cl.CommandQueue, imm allocator.Allocator, opts []mempool.Option, n, iters int, path string) error {
	pool, err := mempool.New(imm, opts...)
	if err != nil {
		return err
	}
	defer pool.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	rec := memhooks.NewTraceRecorder(f, memhooks.WithSites())
	defer pool.AddHook(rec)()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	finished := make(chan struct{})
	defer close(finished) // before stop, which cancels ctx too
	go func() {
		select {
		case <-finished:
		case <-ctx.Done(): // Ctrl-C
			rec.Close()
			fmt.Fprintln(os.Stderr, "cg: interrupted; the trace so far is in", path)
			os.Exit(130)
		}
	}()
	if _, err := solve[float32](q, n, iters, pool.Allocate); err != nil {
		return err
	}
	if err := pool.FreeHeld(); err != nil { // the segments' frees, in the trace
		return err
	}
	if err := rec.Close(); err != nil {
		return fmt.Errorf("writing the trace: %w", err)
	}
	return f.Close()
}

// whereTheTimeGoes says, in one line, why the time the pool saves is
// small on a CPU runtime and where it is large.
func whereTheTimeGoes(d *cl.Device) string {
	const gpu = "on a GPU a device allocation is costly: allocator.Immediate's probed allocation took 83 µs on an NVIDIA H100 against 0.1–0.4 µs for a pool hit (BENCHMARKS.md)"
	if d != nil && d.Type&cl.DeviceTypeGPU != 0 && d.Type&cl.DeviceTypeCPU == 0 {
		return "This is a GPU, where the pool saves the most: " + gpu + "."
	}
	return "On a CPU runtime such as this one a device allocation is little more than a malloc, so the whole solve gains little; " + gpu + "."
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }
