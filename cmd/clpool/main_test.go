package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReplayPrintsEveryConfiguration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.tsv")
	require.NoError(t, os.WriteFile(path, []byte("op\tid\tsize\na\t1\t4096\na\t2\t100\nf\t1\t0\na\t3\t4000\nf\t2\t0\nf\t3\t0\n"), 0o644))
	var out, errs bytes.Buffer
	err := replayCmd([]string{"-runs", "2", "-format", "tsv", path}, &out, &errs)
	require.NoError(t, err, errs.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 7)
	assert.Equal(t, "config\tns_per_event\thits\tmisses\tdevice_allocs\tpeak_managed\tpeak_live\tmanaged_over_plan", lines[0])
	for _, l := range lines[1:] {
		f := strings.Split(l, "\t")
		require.Len(t, f, 8, l)
		assert.Equal(t, "4196", f[6], "peak live: 4096 + 100")
	}
	// The plan: 4096 and 4000 (rounded to 4096) never live at once and
	// share offset 0; 100 (rounded to 256), alive with both, goes above:
	// 4352 bytes. The raw allocators manage the live bytes.
	assert.Equal(t, "0.964", strings.Split(lines[1], "\t")[7], "deferred: 4196 / 4352")
	assert.Contains(t, errs.String(), "plan 4352 bytes")
	// In its first run the arena misses once: the segment the first
	// request makes serves the other two (4000, rounded to 4096, takes
	// the freed 4096-byte block back), and is all it manages.
	seg := arenaSegment(t, 4096)
	arena := strings.Split(lines[6], "\t")
	assert.Equal(t, []string{"pool-arena", "2", "1", "1", strconv.FormatInt(seg, 10)}, []string{arena[0], arena[2], arena[3], arena[4], arena[5]},
		"the arena cuts all three from one segment, its first")
	assert.Equal(t, fmt.Sprintf("%.3f", float64(seg)/4352), arena[7], "pool-arena: its segment / 4352")
	// The pool over exact bins misses all three: 4000 and 4096 are in
	// different bins, so the freed 4096-byte block does not serve 4000.
	f := strings.Split(lines[4], "\t")
	assert.Equal(t, []string{"pool-immediate", "0", "3", "3"}, []string{f[0], f[2], f[3], f[4]})
	// Not on a terminal: plain progress lines, at most one every few
	// seconds; this replay takes less, so one.
	assert.Equal(t, 1, strings.Count(errs.String(), ": run "), errs.String())
	assert.Contains(t, errs.String(), "deferred: run 1/3")
}

// arenaSegment returns the bytes of the segment that replay's pool-arena
// (a pool with WithArena over Immediate, on the test device) makes for a
// first request of size, read from the pool's statistics: the policy's
// size, which the tests do not hard-code.
func arenaSegment(t *testing.T, size int64) int64 {
	t.Helper()
	q, err := cl.DefaultQueue()
	require.NoError(t, err)
	defer q.Release()
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	p, err := mempool.New(imm, mempool.WithArena())
	require.NoError(t, err)
	b, err := p.Allocate(size)
	require.NoError(t, err)
	s := p.Stats()
	require.Equal(t, int64(1), s.DeviceAllocs)
	require.NoError(t, b.Close())
	require.NoError(t, p.Close())
	return s.ManagedBytes
}

func TestRunNamesTheCommand(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.tsv")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	for _, tc := range []struct {
		name       string
		args       []string
		wantStatus int
		wantStderr []string
	}{
		{"no command", nil, 2, []string{"usage: clpool <command>", "replay"}},
		{"unknown command", []string{"x"}, 2, []string{`clpool: unknown command "x"`, "commands:", "replay"}},
		{"a replay flag as the command", []string{"-runs", "3"}, 2, []string{`clpool: unknown command "-runs"`}},
		{"help", []string{"help"}, 0, nil},
		{"a failed replay", []string{"replay", empty}, 1, []string{"clpool replay: ", "empty.tsv: the trace has no events"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errs bytes.Buffer
			assert.Equal(t, tc.wantStatus, run(tc.args, &out, &errs), errs.String())
			for _, want := range tc.wantStderr {
				assert.Contains(t, errs.String(), want)
			}
			assert.NotContains(t, out.String()+errs.String(), "Inf")
		})
	}
}

func TestReplayRejectsBadTracesWithFileAndLine(t *testing.T) {
	longSize := strings.Repeat("9", 70_000) // a line over bufio.Scanner's 64 KiB
	for _, tc := range []struct {
		name, text string
		want       string // after the file's name
	}{
		{"empty file", "", ": the trace has no events"},
		{"only the header", "op\tid\tsize\n", ": the trace has no events"},
		{"only comments", "# nothing\n\n", ": the trace has no events"},
		{"missing size", "op\tid\tsize\na\t1\t8\na 2\n", ":3: want `op id size` or `op id size t`, got 2 fields"},
		{"missing size of a free", "a\t1\t8\nf\t1\n", ":2: want `op id size` or `op id size t`, got 2 fields"},
		{"too many fields", "a\t1\t8\t9\t10\n", ":1: want `op id size` or `op id size t`, got 5 fields"},
		{"timed and untimed lines", "a\t1\t8\t9\nf\t1\t0\n", ":2: 3 fields, but line 1 has 4"},
		{"free with a size not allocated", "op\tid\tsize\na\t1\t8\nf\t1\t99\n", ":3: free of block 1 with size 99, but it was allocated with 8"},
		{"free of a dead block", "a\t1\t8\nf\t2\t0\n", ":2: free of block 2, which is not live"},
		{"double allocation", "a\t1\t8\na\t1\t8\n", ":2: block 1 allocated while live"},
		{"unknown op", "a\t1\t8\nx\t1\t8\n", ":2: unknown op"},
		{"negative size", "a\t1\t-8\n", ":1: size \"-8\" is not a non-negative integer"},
		{"bad id", "a\tone\t8\n", ":1: block id \"one\" is not an integer"},
		{"line over 64 KiB", "a\t1\t8\na\t2\t" + longSize + "\n", ":2: size \"9999"},
		{"header after line 1", "a\t1\t8\nop\tid\tsize\n", ":2: unknown op"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "t.tsv")
			require.NoError(t, os.WriteFile(path, []byte(tc.text), 0o644))
			var out, errs bytes.Buffer
			err := replayCmd([]string{path}, &out, &errs)
			require.Error(t, err)
			assert.Contains(t, err.Error(), path+tc.want)
			assert.Less(t, len(err.Error()), 300, "a long line is cut short in the error")
			assert.Empty(t, out.String())
		})
	}
}

func TestParseTraceReadsLinesOfAnyLength(t *testing.T) {
	text := "op\tid\tsize\n# " + strings.Repeat("x", 200_000) + "\na\t1\t8\nf\t1\t8\na\t2\t16\n"
	events, err := parseTrace(strings.NewReader(text), "t.tsv")
	require.NoError(t, err)
	assert.Equal(t, []trace.Event{{Op: trace.Alloc, ID: 1, Size: 8}, {Op: trace.Free, ID: 1}, {Op: trace.Alloc, ID: 2, Size: 16}}, events)

	// Issue 24: without its final newline, the last line is taken as cut
	// (it was accepted, and a trace cut at "a 3628 237568 186" read as
	// events over 186 ns).
	_, err = parseTrace(strings.NewReader(strings.TrimSuffix(text, "\n")), "t.tsv")
	require.ErrorIs(t, err, trace.ErrCut)
	assert.Contains(t, err.Error(), "t.tsv:5: ")
}

func TestParseTraceAgreesWithTraceReadOnRealTraces(t *testing.T) {
	for _, name := range []string{"cg.tsv", "mlp.tsv"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join("..", "..", "testdata", name)
			f, err := os.Open(path)
			require.NoError(t, err)
			defer f.Close()
			want, err := trace.Read(f)
			require.NoError(t, err)
			got, err := readTrace(path)
			require.NoError(t, err)
			assert.Equal(t, want, got)
		})
	}
}

// replay and plan replay traces through pools of their own:
// CLPOOL_MEMORY_LIMIT and CLPOOL_SANITIZE, meant for the user's program,
// change none of their figures and fail neither.
func TestReplayAndPlanIgnoreThePoolEnvironment(t *testing.T) {
	path := writeTemp(t, "t.tsv", "op\tid\tsize\na\t1\t4096\na\t2\t100\nf\t1\t0\na\t3\t4000\nf\t2\t0\nf\t3\t0\n")
	figures := func(t *testing.T) (replay, plan string) {
		t.Helper()
		var out, errs bytes.Buffer
		require.NoError(t, replayCmd([]string{"-runs", "1", "-warmup", "0", "-configs", "pool-immediate,pool-arena", "-format", "tsv", path}, &out, &errs), errs.String())
		var rows []string
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			f := strings.Split(l, "\t")
			rows = append(rows, strings.Join(append(f[:1:1], f[2:]...), "\t")) // all but the time
		}
		out.Reset()
		require.NoError(t, planCmd([]string{"-configs", "pool-immediate,pool-arena", "-format", "tsv", path}, &out, &errs), errs.String())
		return strings.Join(rows, "\n"), out.String()
	}
	wantReplay, wantPlan := figures(t)
	for _, env := range [][2]string{{mempool.SanitizeEnv, "1"}, {mempool.SanitizeEnv, "yes"}, {mempool.LimitEnv, "1"}} {
		t.Run(env[0]+"="+env[1], func(t *testing.T) {
			t.Setenv(env[0], env[1])
			replay, plan := figures(t)
			assert.Equal(t, wantReplay, replay)
			assert.Equal(t, wantPlan, plan)
		})
	}
}

// replay and plan name their device as the metrics and WriteSummary do,
// "name (vendor)", not with cl.Device.String's platform ordinal ("1:0
// pthread..."), which changes with the .icd files installed.
func TestReplayAndPlanNameTheDeviceStably(t *testing.T) {
	q, err := cl.DefaultQueue()
	require.NoError(t, err)
	defer q.Release()
	d := q.Device()
	path := writeTemp(t, "t.tsv", "a\t1\t8\nf\t1\t0\n")
	for _, cmd := range [][]string{{"replay", "-runs", "1", "-warmup", "0", "-configs", "immediate", path}, {"plan", "-configs", "immediate", path}} {
		var out, errs bytes.Buffer
		require.Equal(t, 0, run(cmd, &out, &errs), errs.String())
		assert.Contains(t, errs.String(), " on "+d.StableName()+"\n", cmd[0])
		assert.NotContains(t, errs.String(), d.String(), cmd[0])
	}
}

func TestReplayChecksEveryFlagBeforeRunning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.tsv")
	require.NoError(t, os.WriteFile(path, []byte("a\t1\t8\nf\t1\t0\n"), 0o644))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "want one trace file"},
		{[]string{"a.tsv", "b.tsv"}, "want one trace file"},
		{[]string{"-leading-bits", "99"}, "-leading-bits 99: want 0 to"},
		{[]string{"-leading-bits", "-1"}, "-leading-bits -1: want 0 to"},
		{[]string{"-format", "bogus"}, `-format "bogus": want text or tsv`},
		{[]string{"-configs", "deferred,nonsense"}, `-configs: unknown configuration "nonsense"`},
		{[]string{"-configs", "deferred-nodrop"}, `-configs: unknown configuration "deferred-nodrop"`},
		{[]string{"-configs", "immediate,"}, `-configs: unknown configuration ""`},
		{[]string{"-runs", "0"}, "-runs 0: want at least 1"},
		{[]string{"-warmup", "-1"}, "-warmup -1: want at least 0"},
		{[]string{"-no-such-flag"}, "flag provided but not defined"},
		{[]string{"no-such-file.tsv"}, "no-such-file.tsv"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			args := tc.args
			if len(args) > 0 && strings.HasPrefix(args[0], "-") {
				args = append(slices.Clone(args), path)
			}
			var out, errs bytes.Buffer
			err := replayCmd(args, &out, &errs)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Empty(t, out.String())
			assert.NotContains(t, errs.String(), "events (", "nothing ran: not even the device was opened")
			assert.NotContains(t, errs.String(), "run 1/")
		})
	}
}

// replay's peak managed bytes, as its hits, misses and device
// allocations, are of its first run, one pass from a new pool, as the
// plan's figure is: warm runs after it placed the same trace in the
// segments the first left, and particles' arena peaked at 1.251x its plan
// over ten runs where one pass takes 1.147x.
func TestReplayPeakIsOfTheFirstRun(t *testing.T) {
	path := filepath.Join(repoRoot, "testdata", "particles.tsv")
	peaks := func(runs, warmup string) map[string]string {
		var out, errs bytes.Buffer
		require.NoError(t, replayCmd([]string{"-runs", runs, "-warmup", warmup, "-configs", "pool-immediate,pool-arena", "-format", "tsv", path}, &out, &errs), errs.String())
		got := map[string]string{}
		for line := range strings.Lines(strings.TrimSpace(out.String())) {
			f := strings.Split(strings.TrimSpace(line), "\t")
			got[f[0]] = f[5] + " " + f[7] // peak managed, managed/plan
		}
		return got
	}
	assert.Equal(t, peaks("1", "0"), peaks("3", "5"))
}

// A run of replay is passes of the trace until minRunTime has gone, the
// first run too: a short trace's passes are timed together. The pool's
// figures are of the first pass alone (TestReplayPeakIsOfTheFirstRun).
//
// The test bounds each pass's time between the sleep it measured inside
// the pass and the time from its start to the next pass's start (or to
// run's return): a sleep of minRunTime/8 can last far longer on a loaded
// machine (CI: two shared cores, the race detector), so the passes'
// number and their ns are checked against what the passes took, not
// against what the sleep asked for.
func TestReplayRunTimesPassesTogether(t *testing.T) {
	q, err := cl.DefaultQueue()
	require.NoError(t, err)
	defer q.Release()
	var starts []time.Time
	var inner []time.Duration
	rp := &replayer{n: 1, first: true, once: func() error {
		start := time.Now()
		starts = append(starts, start)
		time.Sleep(minRunTime / 8)
		inner = append(inner, time.Since(start))
		return nil
	}}
	for _, timed := range []bool{false, true} {
		starts, inner = nil, nil
		ns, err := rp.run(q, timed)
		end := time.Now()
		require.NoError(t, err)
		passes := len(starts)
		require.Positive(t, passes)
		// outer[i] bounds pass i's time as run measured it, from above.
		outer := make([]time.Duration, passes)
		for i := range passes {
			next := end
			if i+1 < passes {
				next = starts[i+1]
			}
			outer[i] = next.Sub(starts[i])
		}
		var sumInner, sumOuter, before time.Duration
		for i := range passes {
			sumInner += inner[i]
			sumOuter += outer[i]
			if i < passes-1 {
				before += inner[i]
			}
		}
		// Passes until minRunTime: not one more, not one fewer.
		assert.GreaterOrEqual(t, sumOuter, minRunTime, "the passes stopped before minRunTime (%d passes)", passes)
		assert.Less(t, before, minRunTime, "a pass after minRunTime had gone (%d passes)", passes)
		if outer[0] < minRunTime {
			assert.GreaterOrEqual(t, passes, 2, "passes until minRunTime")
		}
		assert.LessOrEqual(t, passes, 8)
		// ns per event of one pass, not of all: the mean of the passes.
		assert.GreaterOrEqual(t, ns, float64(sumInner.Nanoseconds())/float64(passes), "ns per event of one pass")
		assert.LessOrEqual(t, ns, float64(sumOuter.Nanoseconds())/float64(passes), "ns per event of one pass, not of all (%d passes)", passes)
		t.Logf("timed=%v: %d passes, %.0f ns per pass (inner %v, outer %v)", timed, passes, ns, sumInner, sumOuter)
	}
	assert.Len(t, rp.r.Runs, 1, "the timed run's")
}
