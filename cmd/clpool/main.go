// Command clpool is clpool's command-line tool.
//
//	clpool replay [flags] trace.tsv
//
// replays an allocation trace (the format of testdata/cg.tsv) through
// allocators and pools and reports the time per event, median of several
// warm runs, with the pool's hits, misses and peaks. The device is the one
// CLPOOL_DEVICE names. It checks its flags and reads the whole trace before
// it runs anything, and names the file and line of a bad event (of one the
// device refuses, by reading a regular file again).
//
//	clpool viz [-o mem.html] [-policy arena|bins] FILE
//
// draws a trace or a pool snapshot (the JSON of mempool.Pool.Snapshot) as
// one self-contained HTML page: each allocation as its own band over time,
// coloured by call site, with its site, queue and times on hover; the
// bytes by call site and by queue; the managed bytes against the active
// bytes with their peaks; zoom and pan; and the map of the pool's
// segments and blocks at any event. It needs no device. It refuses what
// no pool writes and what the page cannot draw as it is: ids past
// ±(2^53-1), queues past 2^31-1, a snapshot whose segments share an id or
// whose managed_bytes and active_bytes are not its segments' bytes and
// its active blocks' requests.
//
//	clpool plan [-align N] [-configs LIST] [-bestfit] TRACE...
//
// prints each trace's peak of live bytes and its clairvoyant plan (every
// block placed knowing every lifetime in advance: trace.Plan), with the
// plan's ratio to the live peak, and beside them the peak managed bytes
// of replay's pool configurations and their ratio to the plan. With
// -configs none it needs no device.
//
// Each command's -h prints its flags and exits with status 0.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/clpool/clpool/mempool"
)

const mainUsage = `usage: clpool <command> [arguments]

commands:
  replay    replay an allocation trace through allocators and pools
  viz       draw a trace or a pool snapshot as an HTML page
  plan      lay out a trace's blocks knowing their lifetimes: what foresight buys

Run 'clpool replay -h', 'clpool viz -h' or 'clpool plan -h' for their flags.
`

const replayUsage = `usage: clpool replay [flags] trace.tsv

Replays an allocation trace through each configuration named by -configs:
  deferred                 raw allocator.Deferred
  immediate                raw allocator.Immediate
  pool-deferred            a mempool.Pool over Deferred
  pool-immediate           a mempool.Pool over Immediate
  pool-immediate-nodrop    the same with WithDropSafety(false)
  pool-arena               a mempool.Pool over Immediate with WithArena
and prints ns/event: the median of -runs timed runs, after -warmup untimed
ones. A run is passes of the trace until 20 ms have gone (one at least);
the configurations take turns, one run each, in an order that reverses
every round, with a garbage collection before each timed run; their pools
stay warm, and alive together, from the first run to the last. Beside it
the hits, misses, device allocations and peak managed
bytes of the first pass of the trace, from a new pool (as plan's
figures are; a raw allocator misses on every request, and allocates on the
device for each of more than 0 bytes); peak live bytes; and managed/plan:
that peak managed over the trace's clairvoyant plan (clpool plan, align
256).

The trace is lines of "op id size", an optional "op id size" header first:
"a 1 4096" allocates 4096 bytes as block 1 and "f 1 4096" frees it (a free's
size is 0 or the size allocated). Blank lines and # comments are skipped.
A timed trace has a fourth column, t, and one recorded with
memhooks.WithSites two more, queue and site, which replay does not use; the
recorded pool's segments (ops A and F) are not replayed, only reported. A
trace cut mid-line, with times that go backwards, or with lines whose
columns disagree with its header is refused, with its file and line, and
so is one with no block event (a, f).

The pools ignore CLPOOL_MEMORY_LIMIT and CLPOOL_SANITIZE, which are meant
for your own program: they have no limit and no sanitizer.

flags:
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command line args (the program's name left out) and returns
// the exit status: 0 for success, 1 for a failed command, 2 for a command
// line that names no known command.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, mainUsage)
		return 2
	}
	status := func(name string, err error) int {
		switch {
		case errors.Is(err, flag.ErrHelp): // -h: the usage is printed
			return 0
		case err != nil:
			fmt.Fprintf(stderr, "clpool %s: %v\n", name, err)
			return 1
		}
		return 0
	}
	switch args[0] {
	case "replay":
		return status("replay", replayCmd(args[1:], stdout, stderr))
	case "viz":
		return status("viz", vizCmd(args[1:], stderr))
	case "plan":
		return status("plan", planCmd(args[1:], stdout, stderr))
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, mainUsage)
		return 0
	default:
		fmt.Fprintf(stderr, "clpool: unknown command %q\n\n%s", args[0], mainUsage)
		return 2
	}
}

// errWriter writes to w and keeps the first error, after which it
// writes nothing: a command prints its results with fmt and reports a
// lost output (a full disk, a closed pipe) once, as a failure.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	e.err = err
	return n, err
}

// result returns the first error, wrapped as the results' loss.
func (e *errWriter) result() error {
	if e.err != nil {
		return fmt.Errorf("writing the results: %w", e.err)
	}
	return nil
}

// config is one way to serve a trace: a raw allocator, or a pool over one.
type config struct {
	deferred   bool // allocator.Deferred; otherwise allocator.Immediate
	pool       bool // a mempool.Pool over the allocator
	dropSafety bool // the pool's WithDropSafety
	arena      bool // the pool's WithArena
}

// configs are the configurations -configs may name.
var configs = map[string]config{
	"deferred":              {deferred: true},
	"immediate":             {},
	"pool-deferred":         {deferred: true, pool: true, dropSafety: true},
	"pool-immediate":        {pool: true, dropSafety: true},
	"pool-immediate-nodrop": {pool: true},
	"pool-arena":            {pool: true, dropSafety: true, arena: true},
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
	Plan         int64 // the trace's clairvoyant plan, align 256
}

// unaffectedByEnv returns the options every pool of clpool's starts
// with: no limit and no sanitizer, whatever CLPOOL_MEMORY_LIMIT and
// CLPOOL_SANITIZE say. The variables are meant for the user's own
// programs; in replay, plan and viz they would change the figures (a
// limit fails or trims the replay; the sanitizer adds guard bytes and
// turns the queue caches off) or fail the command (a value New refuses).
func unaffectedByEnv() []mempool.Option {
	return []mempool.Option{mempool.WithLimit(0), mempool.WithoutSanitizer()}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// printResults writes the results as a table, or as TSV.
func printResults(w io.Writer, format string, rs []result) {
	if format == "tsv" {
		fmt.Fprintln(w, "config\tns_per_event\thits\tmisses\tdevice_allocs\tpeak_managed\tpeak_live\tmanaged_over_plan")
		for _, r := range rs {
			fmt.Fprintf(w, "%s\t%.1f\t%d\t%d\t%d\t%d\t%d\t%s\n", r.Config, r.NsPerEvent, r.Hits, r.Misses, r.DeviceAllocs, r.PeakManaged, r.PeakLive, formatRatio(ratio(r.PeakManaged, r.Plan)))
		}
		return
	}
	fmt.Fprintf(w, "%-22s %12s %8s %8s %8s %13s %11s %13s\n", "config", "ns/event", "hits", "misses", "allocs", "peak managed", "peak live", "managed/plan")
	for _, r := range rs {
		fmt.Fprintf(w, "%-22s %12.1f %8d %8d %8d %13d %11d %13s\n", r.Config, r.NsPerEvent, r.Hits, r.Misses, r.DeviceAllocs, r.PeakManaged, r.PeakLive, formatRatio(ratio(r.PeakManaged, r.Plan)))
	}
}
