package main

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// smallTrace is replay's test trace: 4096 and 4000 bytes (4096 rounded)
// never live at once, so the plan puts both at 0, and 100 (256 rounded),
// alive with both, above them: 4352 bytes for a live peak of 4196.
const smallTrace = "op\tid\tsize\na\t1\t4096\na\t2\t100\nf\t1\t0\na\t3\t4000\nf\t2\t0\nf\t3\t0\n"

// planTSV runs `clpool plan -format tsv` with args and returns its rows,
// split into fields, the header first.
func planTSV(t *testing.T, args ...string) [][]string {
	t.Helper()
	var out, errs bytes.Buffer
	require.Equal(t, 0, run(append([]string{"plan", "-format", "tsv"}, args...), &out, &errs), errs.String())
	var rows [][]string
	for line := range strings.Lines(out.String()) {
		rows = append(rows, strings.Split(strings.TrimSuffix(line, "\n"), "\t"))
	}
	require.NotEmpty(t, rows)
	for _, r := range rows[1:] {
		require.Len(t, r, len(rows[0]), "every row has the header's columns")
	}
	return rows
}

// TestPlanNeedsNoDeviceWithConfigsNone plans the repository's cg and mlp
// traces with no device (a CLPOOL_DEVICE that matches nothing would fail
// to open one) and checks the figures offline_plan.py prints for them.
func TestPlanNeedsNoDeviceWithConfigsNone(t *testing.T) {
	t.Setenv("CLPOOL_DEVICE", "no-such-device")
	cg, mlp := filepath.Join(repoRoot, "testdata", "cg.tsv"), filepath.Join(repoRoot, "testdata", "mlp.tsv")
	assert.Equal(t, [][]string{
		{"trace", "allocations", "peak_live", "align", "plan", "plan_over_live"},
		{cg, "3307", "3670016", "256", "3670016", "1.000"},
		{mlp, "26951", "235704520", "256", "250562048", "1.063"},
	}, planTSV(t, "-configs", "none", cg, mlp))
	assert.Equal(t, []string{cg, "3307", "3670016", "256", "3670016", "1.000"}, planTSV(t, "-configs", "", cg)[1], "-configs empty")

	var out, errs bytes.Buffer
	require.Equal(t, 0, run([]string{"plan", "-configs", "none", cg}, &out, &errs), errs.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2)
	assert.Equal(t, strings.Fields("trace allocs live align plan plan/live"), strings.Fields(lines[0]))
	assert.Equal(t, []string{cg, "3307", "3670016", "256", "3670016", "1.000"}, strings.Fields(lines[1]))
	assert.Empty(t, errs.String(), "nothing replayed")
}

func TestPlanByHand(t *testing.T) {
	t.Setenv("CLPOOL_DEVICE", "no-such-device")
	path := writeTemp(t, "t.tsv", smallTrace)
	assert.Equal(t, []string{path, "3", "4196", "256", "4352", "1.037"}, planTSV(t, "-configs", "none", path)[1])
	assert.Equal(t, []string{path, "3", "4196", "1", "4196", "1.000"}, planTSV(t, "-configs", "none", "-align", "1", path)[1],
		"unrounded, 100 fits above 4096 and 4000 both: the live peak")
	empty := writeTemp(t, "empty.tsv", "a\t1\t0\nf\t1\t0\n")
	assert.Equal(t, []string{empty, "1", "0", "256", "256", "-"}, planTSV(t, "-configs", "none", empty)[1],
		"a ratio over 0 live bytes is -")
}

// TestPlanBestFit prints best fit's bytes beside the plan with -bestfit:
// the trace package's figure, and its ratio to the plan.
func TestPlanBestFit(t *testing.T) {
	t.Setenv("CLPOOL_DEVICE", "no-such-device")
	path := writeTemp(t, "t.tsv", "op\tid\tsize\na\t1\t256\na\t2\t512\nf\t1\t0\na\t3\t512\n")
	assert.Equal(t, [][]string{
		{"trace", "allocations", "peak_live", "align", "plan", "plan_over_live", "best_fit", "best_fit_over_plan"},
		{path, "3", "1024", "256", "1024", "1.000", "1280", "1.250"},
	}, planTSV(t, "-configs", "none", "-bestfit", path), "1's gap is too small for 3, which the plan puts where 1 was")
	mlp := filepath.Join(repoRoot, "testdata", "mlp.tsv")
	events, err := trace.ReadFile(mlp)
	require.NoError(t, err)
	assert.Equal(t, strconv.FormatInt(trace.BestFit(events, 256), 10), planTSV(t, "-configs", "none", "-bestfit", mlp)[1][6])

	var out, errs bytes.Buffer
	require.Equal(t, 0, run([]string{"plan", "-configs", "none", "-bestfit", path}, &out, &errs), errs.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2)
	assert.Equal(t, strings.Fields("trace allocs live align plan plan/live bestfit /plan"), strings.Fields(lines[0]))
	assert.Equal(t, []string{path, "3", "1024", "256", "1024", "1.000", "1280", "1.250"}, strings.Fields(lines[1]))
}

// TestPlanRunsReplaysConfigurations checks that plan's managed bytes are
// replay's peak managed bytes, configuration by configuration.
func TestPlanRunsReplaysConfigurations(t *testing.T) {
	path := writeTemp(t, "t.tsv", smallTrace)
	names := []string{"pool-immediate", "pool-arena", "immediate"}
	rows := planTSV(t, "-configs", strings.Join(names, ","), path)
	assert.Equal(t, []string{"trace", "allocations", "peak_live", "align", "plan", "plan_over_live",
		"pool-immediate", "pool-immediate_over_plan", "pool-arena", "pool-arena_over_plan", "immediate", "immediate_over_plan"}, rows[0])
	require.Len(t, rows, 2)
	got := rows[1]
	assert.Equal(t, []string{path, "3", "4196", "256", "4352", "1.037"}, got[:6])
	seg := arenaSegment(t, 4096)
	arena := []string{strconv.FormatInt(seg, 10), fmt.Sprintf("%.3f", float64(seg)/4352)}
	assert.Equal(t, arena, got[8:10], "the arena cuts all three from one segment, its first")
	assert.Equal(t, []string{"4196", "0.964"}, got[10:12], "a raw allocator manages the live bytes")

	var out, errs bytes.Buffer
	require.NoError(t, replayCmd([]string{"-runs", "1", "-warmup", "0", "-format", "tsv", "-configs", strings.Join(names, ","), path}, &out, &errs), errs.String())
	replayed := map[string]string{}
	for line := range strings.Lines(out.String()) {
		f := strings.Split(line, "\t")
		replayed[f[0]] = f[5]
	}
	for i, name := range names {
		assert.Equal(t, replayed[name], got[6+2*i], "%s: replay's peak managed bytes", name)
	}

	// The table, with the default configurations.
	out.Reset()
	errs.Reset()
	require.Equal(t, 0, run([]string{"plan", path, path}, &out, &errs), errs.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3)
	assert.Equal(t, strings.Fields("trace allocs live align plan plan/live pool-immediate /plan pool-arena /plan"), strings.Fields(lines[0]))
	assert.Equal(t, []string{path, "3", "4196", "256", "4352", "1.037", got[6], got[7], arena[0], arena[1]}, strings.Fields(lines[1]))
	assert.Equal(t, lines[1], lines[2])
	assert.Contains(t, errs.String(), "replaying each trace once through pool-immediate, pool-arena on ")
}

func TestPlanChecksEverythingBeforeRunning(t *testing.T) {
	good := writeTemp(t, "good.tsv", smallTrace)
	bad := writeTemp(t, "bad.tsv", "a\t1\t8\nf\t2\t0\n")
	empty := writeTemp(t, "empty.tsv", "op\tid\tsize\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "want one or more trace files"},
		{[]string{"-align", "0", good}, "-align 0: want at least 1"},
		{[]string{"-align", "-256", good}, "-align -256: want at least 1"},
		{[]string{"-configs", "pool-arena,nonsense", good}, `-configs: unknown configuration "nonsense"`},
		{[]string{"-configs", "pool-arena,", good}, `-configs: unknown configuration ""`},
		{[]string{"-configs", "none,pool-arena", good}, `-configs: unknown configuration "none"`},
		{[]string{"-leading-bits", "99", good}, "-leading-bits 99: want 0 to"},
		{[]string{"-format", "bogus", good}, `-format "bogus": want text or tsv`},
		{[]string{"-no-such-flag", good}, "flag provided but not defined"},
		{[]string{good, "no-such-file.tsv"}, "no-such-file.tsv"},
		{[]string{good, bad}, bad + ":2: free of block 2, which is not live"},
		{[]string{good, empty}, empty + ": the trace has no events"},
		{[]string{"-configs", "none", good, bad}, bad + ":2: free of block 2, which is not live"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errs bytes.Buffer
			assert.Equal(t, 1, run(append([]string{"plan"}, tc.args...), &out, &errs))
			assert.Contains(t, errs.String(), "clpool plan: ")
			assert.Contains(t, errs.String(), tc.want)
			assert.Empty(t, out.String(), "nothing printed")
			assert.NotContains(t, errs.String(), "replaying", "nothing ran: not even the device was opened")
		})
	}
}

// TestHelpExitsZero checks that each command's -h prints its usage and
// flags to stderr and exits with status 0, as `clpool help` does.
func TestHelpExitsZero(t *testing.T) {
	for _, cmd := range []string{"replay", "viz", "plan"} {
		for _, h := range []string{"-h", "-help", "--help"} {
			t.Run(cmd+" "+h, func(t *testing.T) {
				var out, errs bytes.Buffer
				assert.Equal(t, 0, run([]string{cmd, h}, &out, &errs))
				assert.Contains(t, errs.String(), "usage: clpool "+cmd)
				assert.Contains(t, errs.String(), "flags:\n  -")
				assert.NotContains(t, errs.String(), "help requested")
				assert.Empty(t, out.String())
			})
		}
	}
}

func TestRunListsPlan(t *testing.T) {
	var out, errs bytes.Buffer
	assert.Equal(t, 0, run([]string{"help"}, &out, &errs))
	assert.Contains(t, out.String(), "plan      lay out a trace's blocks")
	assert.Contains(t, out.String(), "'clpool plan -h'")
	assert.True(t, slices.Contains(strings.Fields(out.String()), "plan"))
}

// TestReadmePlanTable checks the live peaks and plans README.md's table of
// recorded traces gives against trace.Plan (the pools' columns are
// POCL's, from `clpool plan`).
func TestReadmePlanTable(t *testing.T) {
	text := section(readRepoFile(t, "README.md"), "## Replaying an allocation trace")
	require.Contains(t, text, "| trace | allocations | peak live | plan | plan / live |")
	checked := 0
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for i := range cells {
			cells[i] = strings.ReplaceAll(strings.Trim(strings.TrimSpace(cells[i]), "`"), ",", "")
		}
		events := readEvents(t, filepath.Join(repoRoot, "testdata", cells[0]))
		l := trace.Plan(events, 256)
		assert.Equal(t, []string{
			strconv.Itoa(trace.Summarize(events).Allocs), strconv.FormatInt(l.PeakLive, 10), strconv.FormatInt(l.Size, 10), formatRatio(l.Ratio()),
		}, cells[1:5], cells[0])
		checked++
	}
	assert.Equal(t, 5, checked, "the table's rows")
}
