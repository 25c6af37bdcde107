package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 24: viz and replay refuse a trace cut mid-line, one whose times go
// backwards, and one whose lines disagree with its header's columns,
// naming the file and the line, with a hint. (A program stopped with
// Ctrl-C left `a 3628 237568 186` as its last line, which both took for an
// event at 186 ns.)
func TestVizAndReplayRefuseBrokenTraces(t *testing.T) {
	const sited = "op\tid\tsize\tt\tqueue\tsite\n"
	for _, tc := range []struct {
		name, text string
		want       []string // in the error, after the file's name
	}{
		{"cut mid-line", "op\tid\tsize\tt\na\t1\t8\t100\nf\t1\t0\t200\na\t3628\t237568\t186",
			[]string{":4: the last line, \"a\\t3628\\t237568\\t186\", has no newline: the trace was cut", "signal.NotifyContext", "Close"}},
		{"cut in a sited trace", sited + "a\t1\t8\t100\t1\tmain.go:3:main.main\nf\t1\t0\t200\t1\tmai",
			[]string{":3: the last line", "was cut"}},
		{"time going backwards", "op\tid\tsize\tt\na\t1\t8\t100\na\t2\t8\t300\nf\t1\t0\t200\n",
			[]string{":4: time 200 ns is before the 300 ns of line 3", "two traces joined"}},
		{"fewer columns than the header", sited + "a\t1\t8\t100\t1\tmain.go:3:main.main\nf\t1\t0\t200\n",
			[]string{":3: 4 tab-separated fields, but the header (line 1) names 6", "split on tabs only"}},
		{"more columns than the header", "op\tid\tsize\na\t1\t8\t100\n",
			[]string{":2: 4 fields, but line 1 has 3", "the columns of the header"}},
		{"sites without their header", "a\t1\t8\t100\t1\tmain.go:3:main.main\n",
			[]string{":1: want `op id size` or `op id size t`, got 6 fields (a trace with queue and site columns names them in its header)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "t.tsv")
			require.NoError(t, os.WriteFile(path, []byte(tc.text), 0o644))
			for _, cmd := range [][]string{{"replay", path}, {"viz", "-o", filepath.Join(t.TempDir(), "t.html"), path}} {
				var out, errs bytes.Buffer
				assert.Equal(t, 1, run(cmd, &out, &errs), "%s: %s", cmd[0], errs.String())
				for _, want := range tc.want {
					assert.Contains(t, errs.String(), want, cmd[0])
				}
				assert.Contains(t, errs.String(), "clpool "+cmd[0]+": "+path+":", "file:line")
				assert.NotContains(t, errs.String(), "events over", cmd[0])
			}
		})
	}
}

// A sited trace, as memhooks.WithSites records it (a site may hold
// spaces), with the pool's segments, reads and replays: replay leaves the
// segments out and says what the recording pool managed.
func TestReplayReadsASitedTraceWithSegments(t *testing.T) {
	text := "op\tid\tsize\tt\tqueue\tsite\n" +
		"A\t1\t8192\t90\t1\tmain.go:3:main.main\n" +
		"a\t1\t4096\t100\t1\tmain.go:3:main.main\n" +
		"a\t2\t100\t150\t-\tsolve.go:10:main.(*solver).step < main.go:4:main.main\n" +
		"f\t1\t0\t200\t1\tmain.go:5:main.main\n" +
		"f\t2\t0\t250\t-\t-\n" +
		"F\t1\t8192\t300\t-\t-\n"
	events, err := parseTrace(strings.NewReader(text), "t.tsv")
	require.NoError(t, err)
	require.Len(t, events, 6)
	assert.Equal(t, trace.Event{Op: trace.Alloc, ID: 2, Size: 100, Time: 150, Site: "solve.go:10:main.(*solver).step < main.go:4:main.main"}, events[2])
	assert.Equal(t, trace.Event{Op: trace.SegmentFree, ID: 1, Time: 300}, events[5])

	path := filepath.Join(t.TempDir(), "t.tsv")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	var out, errs bytes.Buffer
	require.NoError(t, replayCmd([]string{"-runs", "1", "-warmup", "0", "-configs", "immediate,pool-immediate", "-format", "tsv", path}, &out, &errs), errs.String())
	assert.Contains(t, errs.String(), "t.tsv: 4 events (2 allocations, peak 4196 live bytes")
	assert.Contains(t, errs.String(), "the pool that recorded it: 1 device allocations, peak 8192 managed bytes")
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3)
	assert.Equal(t, "2", strings.Split(lines[2], "\t")[3], "pool-immediate misses both blocks: the segment was not replayed")
}

// replay and plan refuse a trace of a pool's segments alone, with no
// block event, naming the file: there is nothing to replay (replay
// divided the time of no events by zero, +Inf ns/event). viz draws it.
func TestReplayAndPlanRefuseATraceWithNoBlockEvent(t *testing.T) {
	path := writeTemp(t, "segments.tsv", segmentsOnly)
	for _, cmd := range [][]string{
		{"replay", "-runs", "1", "-warmup", "0", "-configs", "pool-immediate", path},
		{"plan", "-configs", "none", path},
	} {
		var out, errs bytes.Buffer
		assert.Equal(t, 1, run(cmd, &out, &errs), "%s: %s", cmd[0], errs.String())
		assert.Contains(t, errs.String(), "clpool "+cmd[0]+": "+path+": the trace has no block events (a, f), only the 2 of its pool's segments (A, F): nothing to replay")
		assert.Empty(t, out.String(), cmd[0])
		assert.NotContains(t, errs.String(), "Inf", cmd[0])
	}
}
