package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHostileS30eReadmePlanTablePoolColumns checks the two pool columns of
// README.md's table of recorded traces ("pool-immediate / plan",
// "pool-arena / plan", said to be POCL's) against what `clpool plan` prints
// for them now. TestReadmePlanTable checks only the offline columns.
// BENCHMARKS.md ("Arena v2, third round") already records batches going
// 1.037 -> 1.062 and cg, cg-go 1.000 -> 1.001; the README's table kept the
// old figures.
func TestHostileS30eReadmePlanTablePoolColumns(t *testing.T) {
	text := section(readRepoFile(t, "README.md"), "## Replaying an allocation trace")
	require.Contains(t, text, "| pool-immediate / plan | pool-arena / plan |")
	var paths []string
	want := map[string][2]string{}
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		for i := range cells {
			cells[i] = strings.Trim(strings.TrimSpace(cells[i]), "`")
		}
		p := filepath.Join(repoRoot, "testdata", cells[0])
		paths = append(paths, p)
		want[p] = [2]string{cells[5], cells[6]}
	}
	require.Len(t, paths, 5)
	rows := planTSV(t, append([]string{"-configs", "pool-immediate,pool-arena"}, paths...)...)
	// trace allocations peak_live align plan plan_over_live pool-immediate pool-immediate_over_plan pool-arena pool-arena_over_plan
	for _, r := range rows[1:] {
		got := [2]string{r[7], r[9]}
		assert.Equal(t, want[r[0]], got, "%s: README's pool-immediate/plan and pool-arena/plan against clpool plan's", filepath.Base(r[0]))
	}
}
