package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/trace"
)

// replayCmd runs `clpool replay`. It checks every flag and reads the whole
// trace before it runs anything.
//
// The configurations take turns, one run each per round, in an order that
// reverses every round, and the garbage collector runs before each timed
// run: on a shared, noisy machine a slow spell then slows every
// configuration alike, and one's garbage is not another's to collect, so
// their ratio holds from one invocation to the next. Their pools are all
// alive, and warm, from the first round to the last.
func replayCmd(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, replayUsage); fs.PrintDefaults() }
	configList := fs.String("configs", "deferred,immediate,pool-deferred,pool-immediate,pool-immediate-nodrop,pool-arena", "comma-separated configurations")
	runs := fs.Int("runs", 15, "timed runs per configuration")
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
	names, err := checkFlags(*configList, *runs, *warmup, *lb, *format)
	if err != nil {
		return err
	}
	path := fs.Arg(0)
	events, err := readTrace(path)
	if err != nil {
		return err
	}
	sum := trace.Summarize(events)
	events = trace.Blocks(events) // what the program asked for: the recorded pool's segments are not replayed
	plan := trace.Plan(events, replayPlanAlign)

	q, err := cl.DefaultQueue()
	if err != nil {
		return err
	}
	defer q.Release()
	prog := newProgress(stderr)
	fmt.Fprintf(stderr, "%s: %d events (%d allocations, peak %s live bytes, plan %s bytes) on %s\n", path, len(events), sum.Allocs, atLeast(sum.PeakLiveBytes), atLeast(plan.Size), q.Device().StableName())
	if sum.SegmentAllocs > 0 {
		fmt.Fprintf(stderr, "the pool that recorded it: %d device allocations, peak %s managed bytes\n", sum.SegmentAllocs, atLeast(sum.PeakSegmentBytes))
	}

	rs := make([]*replayer, 0, len(names))
	defer func() {
		for _, rp := range rs {
			rp.close()
		}
	}()
	for _, name := range names {
		rp, err := newReplayer(name, q, events, sum, *lb)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		rs = append(rs, rp)
	}
	total := *warmup + *runs
	for round := range total {
		order := slices.Clone(rs)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, rp := range order {
			ns, err := rp.run(q, round >= *warmup)
			if err != nil {
				return fmt.Errorf("%s%s: %w", where(path, events, err), rp.r.Config, err)
			}
			prog.step(rp.r.Config, round+1, total, ns)
		}
	}
	prog.done()
	results := make([]result, len(rs))
	for i, rp := range rs {
		results[i] = rp.r
		results[i].NsPerEvent = median(rp.r.Runs)
		results[i].Plan = plan.Size
	}
	out := &errWriter{w: stdout}
	printResults(out, *format, results)
	return out.result()
}

// replayPlanAlign is the rounding of the plan replay's managed/plan is
// over: offline_plan.py's default.
const replayPlanAlign = 256

// checkFlags checks replay's flags and returns the configurations named by
// -configs, in order.
func checkFlags(configList string, runs, warmup, leadingBits int, format string) ([]string, error) {
	names, err := parseConfigs(configList)
	if err != nil {
		return nil, err
	}
	switch {
	case runs < 1:
		return nil, fmt.Errorf("-runs %d: want at least 1", runs)
	case warmup < 0:
		return nil, fmt.Errorf("-warmup %d: want at least 0", warmup)
	case warmup > math.MaxInt-runs:
		return nil, fmt.Errorf("-runs %d and -warmup %d: more runs than can be counted", runs, warmup)
	}
	return names, checkPoolFlags(leadingBits, format)
}

// parseConfigs returns the configurations a -configs list names, in
// order.
func parseConfigs(configList string) ([]string, error) {
	var names []string
	for _, name := range strings.Split(configList, ",") {
		name = strings.TrimSpace(name)
		if _, ok := configs[name]; !ok {
			return nil, fmt.Errorf("-configs: unknown configuration %q", name)
		}
		if slices.Contains(names, name) {
			return nil, fmt.Errorf("-configs: %q named twice", name)
		}
		names = append(names, name)
	}
	return names, nil
}

// checkPoolFlags checks the -leading-bits and -format flags replay and
// plan share.
func checkPoolFlags(leadingBits int, format string) error {
	switch {
	case leadingBits < 0 || leadingBits > mempool.MaxLeadingBits:
		return fmt.Errorf("-leading-bits %d: want 0 to %d", leadingBits, mempool.MaxLeadingBits)
	case format != "text" && format != "tsv":
		return fmt.Errorf("-format %q: want text or tsv", format)
	}
	return nil
}

// replayer replays a trace through one configuration, run after run.
type replayer struct {
	r     result
	once  func() error  // one pass of the trace
	pool  *mempool.Pool // nil for a raw allocator
	base  allocator.Allocator
	n     int  // the trace's events
	first bool // the next run is the first: the pool's figures are read after it
}

// newReplayer makes the allocator, and the pool if the configuration named
// name (which checkFlags has checked) has one, for the events.
func newReplayer(name string, q *cl.CommandQueue, events []trace.Event, sum trace.Summary, lb int) (*replayer, error) {
	c := configs[name]
	rp := &replayer{r: result{Config: name, PeakLive: sum.PeakLiveBytes}, n: len(events), first: true}
	var err error
	if c.deferred {
		rp.base, err = allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	} else {
		rp.base, err = allocator.NewImmediate(q, cl.MemReadWrite)
	}
	if err != nil {
		return nil, err
	}
	if !c.pool {
		rp.once = func() error { return trace.Replay(events, rp.base.Allocate, rp.base.Free) }
		rp.r.Misses, rp.r.PeakManaged = int64(sum.Allocs), sum.PeakLiveBytes
		for _, ev := range events {
			if ev.Op == trace.Alloc && ev.Size > 0 { // a 0-byte request makes no buffer
				rp.r.DeviceAllocs++
			}
		}
		return rp, nil
	}
	opts := append(unaffectedByEnv(), mempool.WithLeadingBits(lb), mempool.WithDropSafety(c.dropSafety))
	if c.arena {
		opts = append(opts, mempool.WithArena())
	}
	if rp.pool, err = mempool.New(rp.base, opts...); err != nil {
		return nil, err
	}
	rp.once = func() error { return trace.Replay(events, rp.pool.Allocate, (*mempool.PooledBuffer).Close) }
	return rp, nil
}

// minRunTime is how long a run of replay lasts at the least: the passes of
// a short trace (a millisecond or two) are timed together, so that one
// slow spell of the machine does not decide a run.
const minRunTime = 20 * time.Millisecond

// run replays the trace in passes until minRunTime has gone (one pass at
// least), and returns its ns per event, which it keeps if timed. The
// garbage collector runs first, outside the timing, and the queue's work
// (the probes) is finished after it.
func (rp *replayer) run(q *cl.CommandQueue, timed bool) (float64, error) {
	if timed {
		runtime.GC()
	}
	var elapsed time.Duration
	passes := 0
	for passes == 0 || elapsed < minRunTime {
		took, err := rp.pass()
		if err != nil {
			return 0, err
		}
		elapsed += took
		passes++
	}
	if err := q.Finish(); err != nil {
		return 0, err
	}
	ns := float64(elapsed.Nanoseconds()) / float64(passes*rp.n)
	if timed {
		rp.r.Runs = append(rp.r.Runs, ns)
	}
	return ns, nil
}

// pass replays the trace once and returns how long it took. After the
// first pass from the new pool it reads the pool's figures (outside the
// time): one pass, as plan's figures are.
func (rp *replayer) pass() (time.Duration, error) {
	start := time.Now()
	if err := rp.once(); err != nil {
		return 0, err
	}
	took := time.Since(start)
	if rp.pool != nil && rp.first {
		s := rp.pool.Stats()
		rp.r.Hits, rp.r.Misses, rp.r.DeviceAllocs, rp.r.PeakManaged = s.Hits, s.Misses, s.DeviceAllocs, s.PeakManagedBytes
	}
	rp.first = false
	return took, nil
}

// close closes the pool, if any.
func (rp *replayer) close() {
	if rp.pool != nil {
		rp.pool.Close()
	}
}

// atLeast formats n bytes, saying "or more" of math.MaxInt64, where
// trace.Summarize and trace.Plan saturate.
func atLeast(n int64) string {
	if n == math.MaxInt64 {
		return fmt.Sprintf("%d or more", n)
	}
	return fmt.Sprint(n)
}
