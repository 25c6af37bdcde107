package main

// Hostile review s35c: what users run and read of `clpool replay` and
// `clpool plan`.

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s35cTrace writes text as the trace file name in a temporary directory
// and returns its path.
func s35cTrace(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	return path
}

// FAILED before its fix (session 35): main.go's doc says replay "reads the whole trace before it runs
// anything, and names the file and line of a bad event", and the README
// that replay and viz name "the file, the line". An event the device
// cannot serve (a block over its largest allocation) is found only while
// replaying, and the error names neither: replay's says only
// "clpool replay: immediate: trace: allocating block 1 (1125899906842624
// bytes): ..." (cmd/clpool/replay.go:91 wraps rp.run's error with the
// configuration's name alone; trace/trace.go:748, replayEvents, names the
// block's id, which a trace may reuse once freed, as this one does), and
// plan's names the file but not the line (cmd/clpool/plan.go:110).
// Expected: both name the file and the line, t.tsv:3.
func TestHostileS35cReplayErrorNamesFileAndLine(t *testing.T) {
	path := s35cTrace(t, "t.tsv", "a 1 100\nf 1 0\na 1 1125899906842624\nf 1 0\n")
	for _, args := range [][]string{
		{"replay", "-runs", "1", "-warmup", "0", "-configs", "immediate", path},
		{"replay", "-runs", "1", "-warmup", "0", "-configs", "pool-immediate", path},
		{"plan", "-configs", "pool-arena", path},
	} {
		t.Run(args[0]+" "+args[len(args)-2], func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, 1, run(args, &stdout, &stderr), "2^50 bytes is over any device's largest buffer: %s", stderr.String())
			assert.Contains(t, stderr.String(), path+":3", "the error names the file and line of the event that failed")
		})
	}
}

// FAILED before its fix (session 35): replay's header says a peak that trace.Summarize saturated at
// math.MaxInt64 is "or more" (atLeast, since review s32e), but plan's
// table prints the same saturated figures, peak live and plan, as exact
// (cmd/clpool/plan.go:151, printPlan's %12d of l.PeakLive and
// l.Size), and their ratio
// of 1.000 as if it were measured. Two live blocks of math.MaxInt64
// bytes are 2^64-2 live bytes, not 9223372036854775807. Expected: the
// text table marks them as replay's header does ("or more").
func TestHostileS35cPlanPrintsSaturatedFiguresAsExact(t *testing.T) {
	path := s35cTrace(t, "max.tsv", fmt.Sprintf("a 1 %d\na 2 %d\n", int64(math.MaxInt64), int64(math.MaxInt64)))
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"plan", "-configs", "none", path}, &stdout, &stderr), stderr.String())
	require.Contains(t, stdout.String(), "9223372036854775807")
	assert.Contains(t, stdout.String(), "or more", "a saturated live peak and plan are at least that, not that:\n%s", stdout.String())
}

// FAILED before its fix (session 35): -configs takes a name twice and runs it twice: replay prints two
// rows named pool-arena, and plan's TSV has two columns named pool-arena
// and two pool-arena_over_plan (cmd/clpool/replay.go:139, parseConfigs
// appends every name without looking for it among those before). A table keyed by its
// configuration or column name (pandas, awk on the header) cannot tell
// them apart. Expected: a repeated name is refused, as an unknown one is,
// or named once.
func TestHostileS35cRepeatedConfigs(t *testing.T) {
	path := s35cTrace(t, "t.tsv", "a 1 4096\nf 1 0\n")
	t.Run("replay", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		code := run([]string{"replay", "-runs", "1", "-warmup", "0", "-format", "tsv", "-configs", "pool-arena,pool-arena", path}, &stdout, &stderr)
		if code != 0 {
			return // refused: fine
		}
		var names []string
		for line := range strings.Lines(stdout.String()) {
			names = append(names, strings.Split(line, "\t")[0])
		}
		assert.Len(t, slices.Compact(slices.Sorted(slices.Values(names))), len(names), "every row's configuration is its own: %q", names)
	})
	t.Run("plan", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		code := run([]string{"plan", "-format", "tsv", "-configs", "pool-arena,pool-arena", path}, &stdout, &stderr)
		if code != 0 {
			return
		}
		header := strings.Split(strings.TrimSpace(strings.SplitN(stdout.String(), "\n", 2)[0]), "\t")
		assert.Len(t, slices.Compact(slices.Sorted(slices.Values(header))), len(header), "the TSV's column names are unique: %q", header)
	})
}

// PASSES (exploration): malformed traces, each refused by replay and plan
// with status 1 and an error that names the file and the line (or the
// file, for a trace with no line to blame), and no panic: frees of
// unknown ids, double frees, duplicate live ids, negative, overflowing,
// hexadecimal sizes, a size on a free that is not the allocated one, a
// BOM (read as part of the op, "\ufeffop"), trailing garbage, a header
// after an event, a second header, a sited header over space-separated
// lines, times that go backwards, a line cut short, CR-only line ends,
// an empty trace, comments only, only frees, only segments.
func TestHostileS35cMalformedTraces(t *testing.T) {
	for _, c := range []struct{ name, text, where string }{
		{"free of unknown id", "a 1 10\nf 2 0\n", ":2: free of block 2"},
		{"double free", "a 1 10\nf 1 0\nf 1 0\n", ":3: free of block 1"},
		{"duplicate id", "a 1 10\na 1 10\n", ":2: block 1 allocated while live"},
		{"negative size", "a 1 -1\n", ":1: size"},
		{"overflowing size", "a 1 9223372036854775808\n", ":1: size"},
		{"overflowing id", "a 9223372036854775808 1\n", ":1: block id"},
		{"hex size", "a 1 0x10\n", ":1: size"},
		{"free size differs", "a 1 10\nf 1 11\n", ":2: free of block 1 with size 11"},
		{"BOM", "\ufeffop id size\na 1 10\n", ":1: unknown op"},
		{"trailing garbage", "a 1 10 junk\n", ":1: time"},
		{"five fields", "a 1 10 5 junk\n", ":1: want"},
		{"header after event", "a 1 10\nop id size\n", ":2: unknown op"},
		{"second header", "op id size\nop id size\n", ":2: unknown op"},
		{"timed header, untimed lines", "op id size t\na 1 10\n", ":2: "},
		{"sited header, spaces", "op\tid\tsize\tt\tqueue\tsite\na 1 10 5 1 x.go:1:f\n", ":2: 1 tab-separated fields"},
		{"sited queue 0", "op\tid\tsize\tt\tqueue\tsite\na\t1\t10\t5\t0\t-\n", ":2: queue"},
		{"time backwards", "a 1 10 100\nf 1 0 99\n", ":2: time 99 ns"},
		{"negative time", "a 1 10 -1\n", ":1: time"},
		{"mixed columns", "a 1 10 5\nf 1 0\n", ":2: 3 fields"},
		{"cut", "a 1 10\nf 1 0", ":2: the last line"},
		{"CR only", "a 1 10\rf 1 0\r", ":1: "},
		{"empty", "", ": the trace has no events"},
		{"comments only", "# nothing\n\n   \n", ": the trace has no events"},
		{"only frees", "f 1 0\n", ":1: free of block 1"},
		{"only segments", "A 1 4096\nF 1 0\n", ": the trace has no block events"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := s35cTrace(t, "bad.tsv", c.text)
			for _, args := range [][]string{
				{"plan", "-configs", "none", path},
				{"replay", "-runs", "1", "-warmup", "0", "-configs", "immediate", path},
			} {
				var stdout, stderr bytes.Buffer
				var code int
				require.NotPanics(t, func() { code = run(args, &stdout, &stderr) })
				assert.Equal(t, 1, code, "%s: %s", args[0], stderr.String())
				assert.Contains(t, stderr.String(), "clpool "+args[0]+": "+path+c.where, args[0])
				assert.Empty(t, stdout.String(), "%s: no table for a refused trace", args[0])
			}
		})
	}
}

// PASSES (exploration): the formats read the same: CRLF line ends, tabs
// and spaces mixed, a sited trace whose sites hold spaces, comments and
// blank lines anywhere, a header after comments, "+" signs; plan prints
// the same figures for each.
func TestHostileS35cTraceSpellingsPlanAlike(t *testing.T) {
	want := planTSV(t, "-configs", "none", s35cTrace(t, "plain.tsv", "a 1 1000\na 2 300\nf 1 0\na 3 600\nf 2 0\nf 3 0\n"))[1][1:]
	for name, text := range map[string]string{
		"crlf":    "op id size\r\na 1 1000\r\na 2 300\r\nf 1 0\r\na 3 600\r\nf 2 0\r\nf 3 0\r\n",
		"mixed":   "# a comment\n\nop\tid size\na\t1 1000\na 2\t300\n\t f 1 0  \na 3 600\nf\t2\t0\n# end\nf 3 0\n",
		"sited":   "op\tid\tsize\tt\tqueue\tsite\na\t1\t1000\t1\t1\tmy file.go:1:main.f < x.go:2:g\na\t2\t300\t2\t-\t-\nf\t1\t0\t3\t1\t-\na\t3\t600\t3\t2\tsite with spaces\nf\t2\t0\t4\t-\t-\nf\t3\t0\t9\t2\t-\n",
		"plus":    "a +1 +1000\na 2 300\nf 1 0\na 3 600\nf 2 0\nf 3 +600\n",
		"timed":   "op id size t\na 1 1000 0\na 2 300 0\nf 1 0 5\na 3 600 5\nf 2 0 5\nf 3 0 6\n",
		"segment": "A 1 4096\na 1 1000\na 2 300\nf 1 0\nA 2 4096\na 3 600\nF 1 0\nf 2 0\nf 3 0\nF 2 4096\n",
	} {
		got := planTSV(t, "-configs", "none", s35cTrace(t, name+".tsv", text))[1][1:]
		assert.Equal(t, want, got, name)
	}
}

// PASSES: plan's figures by hand. Blocks 1 (1000 bytes, 1024 rounded)
// and 2 (300, 512) live together, then 2 and 3 (600, 768): the plan
// places the largest first, 1 at 0, then 3 at 0 (it never meets 1), then
// 2 above both at 1024: 1536 bytes, for a live peak of 1300. With -align
// 1: 1 at 0, 3 at 0, 2 at 1000: 1300, the live peak. And against
// ../shared/tools/offline_plan.py, where it is there, on the repository's
// traces and this one.
func TestHostileS35cPlanByHand(t *testing.T) {
	path := s35cTrace(t, "hand.tsv", "a 1 1000\na 2 300\nf 1 0\na 3 600\nf 2 0\nf 3 0\n")
	assert.Equal(t, []string{path, "3", "1300", "256", "1536", "1.182"}, planTSV(t, "-configs", "none", path)[1])
	assert.Equal(t, []string{path, "3", "1300", "1", "1300", "1.000"}, planTSV(t, "-configs", "none", "-align", "1", path)[1])

	script := filepath.Join(repoRoot, "..", "shared", "tools", "offline_plan.py")
	if _, err := os.Stat(script); err != nil {
		t.Skip("no offline_plan.py")
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no /usr/bin/python3")
	}
	paths := []string{path}
	for _, name := range []string{"cg.tsv", "cg-go.tsv", "particles.tsv", "synth-remade-scratch.tsv"} {
		paths = append(paths, filepath.Join(repoRoot, "testdata", name))
	}
	rows := planTSV(t, append([]string{"-configs", "none"}, paths...)...)
	for i, p := range paths {
		out, err := exec.Command("/usr/bin/python3", script, p).Output()
		require.NoError(t, err)
		f := strings.Split(strings.TrimSpace(string(out)), "\t") // path blocks N peak_live N planned N ratio R
		require.Len(t, f, 5, string(out))
		assert.Equal(t, "peak_live "+rows[i+1][2], f[2], p)
		assert.Equal(t, "planned "+rows[i+1][4], f[3], p)
	}
}

// PASSES: replay's figures for a hand-computed trace. Blocks 1 and 2 of
// 4096 bytes one after the other, then 3 and 4 of 100 together: 4
// allocations, peak live 4096, plan 4096 (3 and 4 take 256 each). A raw
// allocator misses each time and allocates each: hits 0, misses 4,
// device allocations 4, peak managed the live peak, managed/plan 1.000.
// A pool's figures are those of a new pool after one pass.
func TestHostileS35cReplayFiguresByHand(t *testing.T) {
	text := "a 1 4096\nf 1 0\na 2 4096\nf 2 0\na 3 100\na 4 100\nf 3 0\nf 4 0\n"
	path := s35cTrace(t, "r.tsv", text)
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"replay", "-runs", "1", "-warmup", "0", "-format", "tsv", path}, &stdout, &stderr), stderr.String())
	assert.Contains(t, stderr.String(), "8 events (4 allocations, peak 4096 live bytes, plan 4096 bytes)")
	rows := map[string][]string{}
	for line := range strings.Lines(stdout.String()) {
		f := strings.Split(strings.TrimSuffix(line, "\n"), "\t")
		rows[f[0]] = f
	}
	require.Len(t, rows, 7, stdout.String())
	for _, raw := range []string{"deferred", "immediate"} {
		r := rows[raw]
		assert.Equal(t, []string{"0", "4", "4", "4096", "4096", "1.000"}, r[2:], raw)
	}

	events, err := trace.ReadComplete(strings.NewReader(text))
	require.NoError(t, err)
	q, err := cl.DefaultQueue()
	require.NoError(t, err)
	defer q.Release()
	for _, name := range []string{"pool-deferred", "pool-immediate", "pool-immediate-nodrop", "pool-arena"} {
		rp, err := newReplayer(name, q, events, trace.Summarize(events), 4)
		require.NoError(t, err)
		require.NoError(t, trace.Replay(events, rp.pool.Allocate, (*mempool.PooledBuffer).Close))
		s := rp.pool.Stats()
		rp.close()
		want := []string{fmt.Sprint(s.Hits), fmt.Sprint(s.Misses), fmt.Sprint(s.DeviceAllocs), fmt.Sprint(s.PeakManagedBytes), "4096", fmt.Sprintf("%.3f", float64(s.PeakManagedBytes)/4096)}
		assert.Equal(t, want, rows[name][2:], name)
		assert.Equal(t, int64(4), s.Hits+s.Misses, name)
	}
}

// PASSES: bad flag values are refused, with status 1, before anything
// runs; -h exits 0.
func TestHostileS35cBadFlags(t *testing.T) {
	path := s35cTrace(t, "t.tsv", "a 1 10\nf 1 0\n")
	for _, args := range [][]string{
		{"replay", "-runs", "0", path},
		{"replay", "-runs", "-3", path},
		{"replay", "-warmup", "-1", path},
		{"replay", "-runs", "x", path},
		{"replay", "-configs", "", path},
		{"replay", "-configs", "Pool-Arena", path},
		{"replay", "-configs", "none", path},
		{"replay", "-leading-bits", "-1", path},
		{"replay", "-leading-bits", "21", path},
		{"replay", "-format", "json", path},
		{"replay", "-format", "TSV", path},
		{"replay", path, path},
		{"replay"},
		{"plan", "-align", "0", path},
		{"plan", "-align", "-256", path},
		{"plan", "-align", "99999999999999999999", path},
		{"plan", "-leading-bits", "99", "-configs", "none", path},
		{"plan", "-format", "csv", "-configs", "none", path},
		{"plan", "-configs", "bogus", path},
		{"plan"},
		{"viz", "-policy", "buddy", path},
		{"viz", path, path},
	} {
		var stdout, stderr bytes.Buffer
		var code int
		require.NotPanics(t, func() { code = run(args, &stdout, &stderr) }, "%q", args)
		assert.Equal(t, 1, code, "%q: %s", args, stderr.String())
		assert.Empty(t, stdout.String(), "%q", args)
		if args[0] != "viz" { // viz's usage has the words
			assert.NotContains(t, stderr.String(), " events (", "%q: nothing ran", args)
		}
	}
}
