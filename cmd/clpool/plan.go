package main

// This file is `clpool plan`: the clairvoyant plan of a trace's memory
// (trace.Plan), the floor a pool's managed bytes are measured against,
// beside what replay's pool configurations manage.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/trace"
)

const planUsage = `usage: clpool plan [flags] TRACE...

Prints, for each trace, its peak of live bytes and its clairvoyant plan:
every block placed knowing every lifetime in advance, largest first, at the
lowest offset free for its whole life, in one contiguous range with sizes
rounded up to -align (the method of TFLite's arena planner and XLA's heap
simulator; trace.Plan). No pool manages less than the live peak; the
plan is what knowing the future buys by this method (not a bound: an
allocator may, by luck, do better).

Beside them, each configuration -configs names (those of clpool replay)
replays the trace once on the device CLPOOL_DEVICE names, and plan prints
its peak managed bytes and their ratio to the plan. With -configs none it
prints the plan alone and needs no device. It checks its flags and reads
every trace before it runs anything, and names the file and line of a bad
event; a trace with no block event (a, f) is refused. As in replay, the
pools ignore CLPOOL_MEMORY_LIMIT and CLPOOL_SANITIZE.

With -bestfit, plan prints beside the plan what best fit needs knowing
nothing of the future (trace.BestFit): each block, as it comes, in the
smallest free gap that fits, in one range with no end, with no segments,
growth step or cache. It is a reference, not a bound: a pool that
manages more pays that for its placement, its segments (fixed in size)
and its caches; one that manages less placed better.

Columns: allocs (allocations), live (peak live bytes), plan (the plan's
bytes), plan/live, with -bestfit bestfit (its bytes) and /plan, then for
each configuration its peak managed bytes and /plan (those over the
plan). A ratio over 0 bytes is "-".

flags:
`

// planRow is one trace's figures.
type planRow struct {
	Path    string
	Allocs  int
	Layout  trace.Layout
	BestFit int64   // trace.BestFit's bytes, with -bestfit
	Managed []int64 // peak managed bytes of each configuration, in -configs' order
}

// planCmd runs `clpool plan`. It checks every flag and reads every trace
// before it runs anything.
func planCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("plan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, planUsage); fs.PrintDefaults() }
	align := fs.Int64("align", 256, "round every block's size up to a multiple of this many bytes")
	configList := fs.String("configs", "pool-immediate,pool-arena", "comma-separated configurations of clpool replay to run beside the plan, or none (or empty)")
	lb := fs.Int("leading-bits", 4, "the pools' leading bits in bin id")
	format := fs.String("format", "text", "output: text (a table) or tsv")
	bestFit := fs.Bool("bestfit", false, "print what best fit needs in one range with no segments (trace.BestFit) beside the plan")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return errors.New("want one or more trace files")
	}
	if *align < 1 {
		return fmt.Errorf("-align %d: want at least 1", *align)
	}
	var names []string
	if list := strings.TrimSpace(*configList); list != "none" && list != "" {
		var err error
		if names, err = parseConfigs(list); err != nil {
			return err
		}
	}
	if err := checkPoolFlags(*lb, *format); err != nil {
		return err
	}

	rows := make([]planRow, fs.NArg())
	eventsOf := make([][]trace.Event, fs.NArg())
	for i, path := range fs.Args() {
		events, err := readTrace(path)
		if err != nil {
			return err
		}
		eventsOf[i] = events
		rows[i] = planRow{Path: path, Allocs: trace.Summarize(events).Allocs, Layout: trace.Plan(events, *align)}
		if *bestFit {
			rows[i].BestFit = trace.BestFit(events, *align)
		}
	}

	if len(names) > 0 {
		q, err := cl.DefaultQueue()
		if err != nil {
			return err
		}
		defer q.Release()
		traces := "each trace"
		if len(rows) == 1 {
			traces = "the trace"
		}
		fmt.Fprintf(stderr, "replaying %s once through %s on %s\n", traces, strings.Join(names, ", "), q.Device().StableName())
		for i := range rows {
			sum := trace.Summarize(eventsOf[i])
			for _, name := range names {
				managed, err := replayOnce(name, q, eventsOf[i], sum, *lb)
				if err != nil {
					return fmt.Errorf("%s%s: %w", where(rows[i].Path, eventsOf[i], err), name, err)
				}
				rows[i].Managed = append(rows[i].Managed, managed)
			}
		}
	}
	out := &errWriter{w: stdout}
	printPlan(out, *format, *bestFit, names, rows)
	return out.result()
}

// printPlan writes the rows as a table, or as TSV, with a column of bytes
// and one of their ratio to the plan for best fit (with bestFit) and each
// configuration of names.
func printPlan(w io.Writer, format string, bestFit bool, names []string, rows []planRow) {
	if format == "tsv" {
		fmt.Fprint(w, "trace\tallocations\tpeak_live\talign\tplan\tplan_over_live")
		if bestFit {
			fmt.Fprint(w, "\tbest_fit\tbest_fit_over_plan")
		}
		for _, name := range names {
			fmt.Fprintf(w, "\t%s\t%s_over_plan", name, name)
		}
		fmt.Fprintln(w)
		for _, r := range rows {
			l := r.Layout
			fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%s", r.Path, r.Allocs, l.PeakLive, l.Align, l.Size, overSaturated(l.Size, l.PeakLive))
			if bestFit {
				fmt.Fprintf(w, "\t%d\t%s", r.BestFit, overSaturated(r.BestFit, l.Size))
			}
			for _, m := range r.Managed {
				fmt.Fprintf(w, "\t%d\t%s", m, overSaturated(m, l.Size))
			}
			fmt.Fprintln(w)
		}
		return
	}
	pathWidth := len("trace")
	for _, r := range rows {
		pathWidth = max(pathWidth, len(r.Path))
	}
	fmt.Fprintf(w, "%-*s %8s %12s %5s %12s %9s", pathWidth, "trace", "allocs", "live", "align", "plan", "plan/live")
	if bestFit {
		fmt.Fprintf(w, "  %12s %6s", "bestfit", "/plan")
	}
	for _, name := range names {
		fmt.Fprintf(w, "  %*s %6s", max(12, len(name)), name, "/plan")
	}
	fmt.Fprintln(w)
	for _, r := range rows {
		l := r.Layout
		fmt.Fprintf(w, "%-*s %8d %12s %5d %12s %9s", pathWidth, r.Path, r.Allocs, atLeast(l.PeakLive), l.Align, atLeast(l.Size), overSaturated(l.Size, l.PeakLive))
		if bestFit {
			fmt.Fprintf(w, "  %12s %6s", atLeast(r.BestFit), overSaturated(r.BestFit, l.Size))
		}
		for j, m := range r.Managed {
			fmt.Fprintf(w, "  %*d %6s", max(12, len(names[j])), m, overSaturated(m, l.Size))
		}
		fmt.Fprintln(w)
	}
}

// overSaturated formats a / b as formatRatio does, and "-" where either
// figure saturated (trace.Summarize, Plan and BestFit write math.MaxInt64
// for that or more: no measure), in the table and in TSV alike.
func overSaturated(a, b int64) string {
	if a == math.MaxInt64 || b == math.MaxInt64 {
		return "-"
	}
	return formatRatio(ratio(a, b))
}

// ratio returns a / b.
func ratio(a, b int64) float64 { return float64(a) / float64(b) }

// formatRatio writes a ratio to three places, or "-" for one over 0
// bytes (infinite or NaN).
func formatRatio(r float64) string {
	if math.IsInf(r, 0) || math.IsNaN(r) {
		return "-"
	}
	return fmt.Sprintf("%.3f", r)
}

// replayOnce replays the events once through the configuration named name
// and returns its peak managed bytes.
func replayOnce(name string, q *cl.CommandQueue, events []trace.Event, sum trace.Summary, lb int) (int64, error) {
	rp, err := newReplayer(name, q, events, sum, lb)
	if err != nil {
		return 0, err
	}
	defer rp.close()
	if _, err := rp.pass(); err != nil {
		return 0, err
	}
	return rp.r.PeakManaged, q.Finish()
}
