// Command clpool is clpool's command-line tool.
//
//	clpool replay [flags] trace.tsv
//
// replays an allocation trace (the format of testdata/cg.tsv) through
// allocators and pools and reports the time per event, median of several
// warm runs, with the pool's hits, misses and peaks. The device is the one
// CLPOOL_DEVICE names.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/trace"
)

const usage = `usage: clpool replay [flags] trace.tsv

Replays an allocation trace through each configuration named by -configs:
  deferred                 raw allocator.Deferred
  immediate                raw allocator.Immediate
  pool-deferred            a mempool.Pool over Deferred
  pool-immediate           a mempool.Pool over Immediate
  pool-immediate-nodrop    the same with WithDropSafety(false)
  pool-arena               a mempool.Pool over Immediate with WithArena
and prints ns/event (median of -runs runs after -warmup runs; the pool stays
warm between runs), the hits, misses and device allocations of the first
run, and peak managed and live bytes.

flags:
`

func main() {
	if len(os.Args) < 2 || os.Args[1] != "replay" {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	if err := replayCmd(os.Args[2:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "clpool replay:", err)
		os.Exit(1)
	}
}

// result is one configuration's figures.
type result struct {
	Config       string
	NsPerEvent   float64 // median
	Runs         []float64
	Hits, Misses int64
	DeviceAllocs int64
	PeakManaged  int64
	PeakLive     int64
}

func replayCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	configs := fs.String("configs", "deferred,immediate,pool-deferred,pool-immediate,pool-immediate-nodrop,pool-arena", "comma-separated configurations")
	runs := fs.Int("runs", 5, "timed runs per configuration")
	warmup := fs.Int("warmup", 1, "untimed runs before them")
	lb := fs.Int("leading-bits", 4, "the pools' leading bits in bin id")
	format := fs.String("format", "text", "output: text (a table) or tsv")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errors.New("want one trace file")
	}
	if *runs < 1 || *warmup < 0 {
		return errors.New("-runs must be at least 1 and -warmup at least 0")
	}
	f, err := os.Open(fs.Arg(0))
	if err != nil {
		return err
	}
	events, err := trace.Read(f)
	f.Close()
	if err != nil {
		return err
	}
	sum := trace.Summarize(events)

	q, err := cl.DefaultQueue()
	if err != nil {
		return err
	}
	defer q.Release()
	prog := newProgress(stderr)
	fmt.Fprintf(stderr, "%s: %d events (%d allocations, peak %d live bytes) on %v\n", fs.Arg(0), len(events), sum.Allocs, sum.PeakLiveBytes, q.Device())

	var results []result
	for _, name := range strings.Split(*configs, ",") {
		r, err := runConfig(strings.TrimSpace(name), q, events, sum, *lb, *warmup, *runs, prog)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		results = append(results, r)
	}
	prog.done()
	printResults(stdout, *format, results)
	return nil
}

func runConfig(name string, q *cl.CommandQueue, events []trace.Event, sum trace.Summary, lb, warmup, runs int, prog *progress) (result, error) {
	r := result{Config: name, PeakLive: sum.PeakLiveBytes}
	var base allocator.Allocator
	var err error
	arena := name == "pool-arena"
	switch strings.TrimPrefix(strings.TrimSuffix(name, "-nodrop"), "pool-") {
	case "arena", "immediate":
		base, err = allocator.NewImmediate(q, cl.MemReadWrite)
	case "deferred":
		base, err = allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	default:
		return r, fmt.Errorf("unknown configuration %q", name)
	}
	if err != nil {
		return r, err
	}
	var once func() error
	var pool *mempool.Pool
	if strings.HasPrefix(name, "pool-") {
		opts := []mempool.Option{mempool.WithLeadingBits(lb), mempool.WithDropSafety(!strings.HasSuffix(name, "-nodrop"))}
		if arena {
			opts = append(opts, mempool.WithArena())
		}
		pool, err = mempool.New(base, opts...)
		if err != nil {
			return r, err
		}
		defer pool.Close()
		once = func() error {
			return trace.Replay(events, pool.Allocate, (*mempool.PooledBuffer).Close)
		}
	} else if strings.HasSuffix(name, "-nodrop") {
		return r, fmt.Errorf("unknown configuration %q", name)
	} else {
		once = func() error { return trace.Replay(events, base.Allocate, base.Free) }
		r.Misses, r.DeviceAllocs, r.PeakManaged = int64(sum.Allocs), int64(sum.Allocs), sum.PeakLiveBytes
	}
	for i := range warmup + runs {
		start := time.Now()
		if err := once(); err != nil {
			return r, err
		}
		elapsed := time.Since(start)
		if err := q.Finish(); err != nil { // the probes, outside the timing
			return r, err
		}
		ns := float64(elapsed.Nanoseconds()) / float64(len(events))
		if i >= warmup {
			r.Runs = append(r.Runs, ns)
		}
		prog.step(name, i+1, warmup+runs, ns)
		if pool != nil && i == 0 { // the first, cold run: what one pass of the trace costs
			s := pool.Stats()
			r.Hits, r.Misses, r.DeviceAllocs = s.Hits, s.Misses, s.DeviceAllocs
		}
	}
	r.NsPerEvent = median(r.Runs)
	if pool != nil {
		r.PeakManaged = pool.Stats().PeakManagedBytes
	}
	return r, nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func printResults(w io.Writer, format string, rs []result) {
	if format == "tsv" {
		fmt.Fprintln(w, "config\tns_per_event\thits\tmisses\tdevice_allocs\tpeak_managed\tpeak_live")
		for _, r := range rs {
			fmt.Fprintf(w, "%s\t%.1f\t%d\t%d\t%d\t%d\t%d\n", r.Config, r.NsPerEvent, r.Hits, r.Misses, r.DeviceAllocs, r.PeakManaged, r.PeakLive)
		}
		return
	}
	fmt.Fprintf(w, "%-22s %12s %8s %8s %8s %13s %11s\n", "config", "ns/event", "hits", "misses", "allocs", "peak managed", "peak live")
	for _, r := range rs {
		fmt.Fprintf(w, "%-22s %12.1f %8d %8d %8d %13d %11d\n", r.Config, r.NsPerEvent, r.Hits, r.Misses, r.DeviceAllocs, r.PeakManaged, r.PeakLive)
	}
}
