package main

// Hostile review s35d of db07e12: replay and plan name file:line of an
// event that fails during the replay (where, eventLine), -configs refuses
// a repeated name, viz refuses impossible snapshots.
//
//	OCL_ICD_VENDORS=$PWD/build/icd CLPOOL_DEVICE=pocl \
//	  timeout 300 nice -n 10 go test ./cmd/clpool -count=1 -run 'TestHostileS35d'

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s35dHuge is a block no device serves (2^50 bytes): its allocation fails
// during the replay, after the trace was read and checked.
const s35dHuge = "1125899906842624"

// PASSES (exploration that holds). The line replay and plan name for an
// event that fails during the replay is the event's, in traces with a
// header, comments (one starting "a", one indented), blank lines and lines
// of spaces, segment events (A, F) before and between, a sited trace
// (tabs, a site with spaces and an "a" word), CRLF line ends, tabs and
// vertical tabs between fields, and a failing event after blocks freed
// and reused (ids repeat). plan replays the events with the segments'
// (trace.Blocks is replay's), so both paths of eventLine are run.
func TestHostileS35dReplayErrorLines(t *testing.T) {
	for _, c := range []struct {
		name, text string
		line       int
	}{
		{"header and comments", "op id size\n# a comment\n#a 1 2\n   # a 3 4\n\n   \na 1 100\nf 1 0\na 2 " + s35dHuge + "\n", 9},
		{"segments", "A 1 4096\na 1 100\nA 2 4096\nF 1 0\nf 1 0\nA 3 4096\na 1 " + s35dHuge + "\nF 2 0\n", 7},
		{"sited", "op\tid\tsize\tt\tqueue\tsite\nA\t1\t4096\t1\t-\t-\na\t1\t100\t2\t1\tmain.go:1:a b < x.go:2:f\nf\t1\t0\t3\t1\t-\n# a\na\t2\t" + s35dHuge + "\t4\t1\ta.go:3:main.main\n", 6},
		{"crlf", "op id size\r\na 1 100\r\n\r\nf 1 0\r\na 2 " + s35dHuge + "\r\n", 5},
		{"tabs and vt", "a\t1\t100\nf\v1\v0\n\ta 1 " + s35dHuge + "\n", 3},
		{"ids reused", "a 1 1\nf 1 0\na 1 1\nf 1 0\na 1 1\nf 1 0\na 1 " + s35dHuge + "\nf 1 0\n", 7},
	} {
		for _, args := range [][]string{
			{"replay", "-runs", "1", "-warmup", "0", "-configs", "immediate"},
			{"plan", "-configs", "pool-arena"},
		} {
			t.Run(c.name+"/"+args[0], func(t *testing.T) {
				path := writeTemp(t, "t.tsv", c.text)
				var stdout, stderr bytes.Buffer
				require.Equal(t, 1, run(append(args, path), &stdout, &stderr), stderr.String())
				assert.Contains(t, stderr.String(), fmt.Sprintf("%s:%d: ", path, c.line), stderr.String())
			})
		}
	}
}

// FAILED before its fix (session 35; defect in cmd/clpool). A trace that fails at an event during
// the replay, read from a named pipe (mkfifo; or a shell's process
// substitution where it makes one), hangs replay and plan for good: the
// trace was read to its end, and where (cmd/clpool/readtrace.go:79,
// eventLine's os.Open(path)) opens the file a second time to count its
// lines, which on a FIFO whose writer is gone blocks until another writer
// comes, which never does. replay's doc says it "reads the whole trace
// before it runs anything"; the second read is not in it. Observed: the
// command had not returned after 4 s (it returns in under 1 s when the trace is a file), every run.
//
// Expected: the command fails with the event's error (with its line, from
// the one read it made, or with the file alone), and returns.
func TestHostileS35dErrorAtAnEventOfATraceFromAPipeHangs(t *testing.T) {
	for _, args := range [][]string{
		{"replay", "-runs", "1", "-warmup", "0", "-configs", "immediate"},
		{"plan", "-configs", "immediate"},
	} {
		t.Run(args[0], func(t *testing.T) {
			fifo := filepath.Join(t.TempDir(), "trace.fifo")
			require.NoError(t, syscall.Mkfifo(fifo, 0o600))
			go func() { // the program that writes the trace, then exits
				f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
				if err != nil {
					return
				}
				_, _ = f.WriteString("a 1 100\nf 1 0\na 2 " + s35dHuge + "\n")
				_ = f.Close()
			}()
			var stdout, stderr bytes.Buffer
			done := make(chan int, 1)
			go func() { done <- run(append(args, fifo), &stdout, &stderr) }()
			select {
			case code := <-done:
				assert.Equal(t, 1, code)
				assert.Contains(t, stderr.String(), "allocating block 2")
			case <-time.After(4 * time.Second):
				assert.Fail(t, "the command hangs after the failed event", "%s reads the pipe a second time", args[0])
				// Let it go: a writer that opens and closes at once ends
				// its second read.
				for {
					f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0)
					if err == nil {
						f.Close()
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				<-done
				t.Logf("once let go: %s", strings.TrimSpace(stderr.String()))
			}
		})
	}
}

// PASSES (exploration that holds). -configs refuses a name given twice in
// any spelling parseConfigs accepts (spaces around it), in replay and
// plan, before any device is asked; and "none" beside a configuration is
// an unknown name, not the plan alone.
func TestHostileS35dConfigsRefused(t *testing.T) {
	path := writeTemp(t, "t.tsv", "a 1 10\nf 1 0\n")
	for _, list := range []string{"immediate, immediate", " pool-arena ,pool-arena", "deferred,immediate,deferred"} {
		for _, cmd := range []string{"replay", "plan"} {
			var stdout, stderr bytes.Buffer
			assert.Equal(t, 1, run([]string{cmd, "-configs", list, path}, &stdout, &stderr), "%s -configs %q", cmd, list)
			assert.Contains(t, stderr.String(), "named twice", "%s -configs %q", cmd, list)
		}
	}
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 1, run([]string{"plan", "-configs", "none,immediate", path}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), `unknown configuration "none"`)
}

// PASSES (exploration that holds). viz refuses snapshots that no pool
// writes: a block's requested size over its size or negative, a snapshot
// followed by a second value, a bracket or a NUL; and takes one followed
// by white space only.
func TestHostileS35dVizSnapshotEdges(t *testing.T) {
	snap := func(segs string) string {
		return `{"policy":"arena","managed_bytes":4096,"active_bytes":100,"segments":[` + segs + `]}`
	}
	ok := snap(`{"id":1,"size":4096,"blocks":[{"offset":0,"size":4096,"requested":100,"state":"active","block_id":1}]}`)
	for name, text := range map[string]string{
		"requested over size": snap(`{"id":1,"size":4096,"blocks":[{"offset":0,"size":4096,"requested":4097,"state":"active","block_id":1}]}`),
		"negative requested":  snap(`{"id":1,"size":4096,"blocks":[{"offset":0,"size":4096,"requested":-1,"state":"active","block_id":1}]}`),
		"two snapshots":       ok + " " + ok,
		"trailing bracket":    ok + "]",
		"trailing NUL":        ok + "\x00",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := loadPage(writeTemp(t, "s.json", text), "arena", newProgress(&bytes.Buffer{}))
			require.Error(t, err)
			t.Log(err)
		})
	}
	pg, err := loadPage(writeTemp(t, "s.json", ok+"\n \t\r\n"), "arena", newProgress(&bytes.Buffer{}))
	require.NoError(t, err)
	assert.Equal(t, "snapshot", pg.Source)
}

// FAILED before its fix (session 35; defect in cmd/clpool, minor: a hand-made or corrupt snapshot).
// snapshotPage checks that a segment's blocks tile it by adding their
// sizes in an int64 (cmd/clpool/viz.go:647, end += b.Size) and comparing
// the sum with the segment's size (viz.go:652): a block of 2^63-1 bytes
// and one of 2 wrap the sum to -2^63+1, and a segment that says it has
// -2^63+1 bytes passes. viz draws a segment of negative size whose blocks
// cover 2^63+1 bytes, where db07e12 refuses a block's requested size that
// no pool hands out ("which no pool hands out") and trace.Read refuses a
// negative size. Observed: loadPage returns the page, no error, every
// run.
//
// Expected: the snapshot refused (a segment of negative size, or blocks
// whose sizes overflow).
func TestHostileS35dVizSnapshotSegmentSizeWraps(t *testing.T) {
	text := fmt.Sprintf(`{"policy":"arena","managed_bytes":4096,"active_bytes":0,"segments":[{"id":1,"size":%d,"blocks":[`+
		`{"offset":0,"size":%d,"requested":1,"state":"active","block_id":1},`+
		`{"offset":%d,"size":2,"requested":1,"state":"held","block_id":2}]}]}`,
		int64(math.MinInt64+1), int64(math.MaxInt64), int64(math.MaxInt64))
	pg, err := loadPage(writeTemp(t, "s.json", text), "arena", newProgress(&bytes.Buffer{}))
	if err == nil {
		assert.Fail(t, "a segment of negative size is drawn", "segments %+v", pg.Map.Segments)
	}
}
