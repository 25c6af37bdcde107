package main

// Hostile review s35c: `clpool viz` on inputs at the edges of what it
// reads.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FAILED before its fix (session 35): page.End is "where the axis ends, a moment's length after the
// last event", computed as last + max(1, spacing) in an int64 (cmd/clpool/viz.go:404,
// pageBuilder.finish: pg.End = last + ...). A timed trace whose last time
// is near math.MaxInt64, which Read accepts (a time is any non-negative
// integer), wraps it negative: the axis ends before it begins (End is
// -9223372036854775808 for the first trace, -2 for the second).
// Expected: End after the last event's time, or saturated at
// math.MaxInt64 (or the trace refused as ids past 2^53 are).
func TestHostileS35cVizAxisEndWraps(t *testing.T) {
	for _, text := range []string{
		"a 1 10 9223372036854775806\nf 1 0 9223372036854775807\n",
		"a 1 10 0\nf 1 0 9223372036854775807\n",
	} {
		events, err := trace.ReadComplete(strings.NewReader(text))
		require.NoError(t, err)
		pg, err := tracePage(events, "arena", newProgress(&bytes.Buffer{}))
		if err != nil {
			continue // refused: fine
		}
		require.True(t, pg.Timed)
		last := pg.X[len(pg.X)-1]
		assert.True(t, pg.End > last || pg.End == math.MaxInt64, "the axis ends after the last event (or at the last time an int64 holds): X %v, End %d", pg.X, pg.End)
	}
}

// FAILED before its fix (session 35): a snapshot's segments are checked (the blocks tile them, states
// known, ids within 2^53), but not an active block's requested size,
// which viz draws as a band from the history's start and adds to the
// active bytes (cmd/clpool/viz.go:697, snapshotPage: live.add(bl.Requested) for the
// blocks before the history; bytesSum.add's doc says "n >= 0"). A
// requested size of -5 wraps the sum to 2^64-5: viz writes the page and
// says "peak 8.389e+06 TiB active" for a pool of one 4096-byte segment;
// one of 2^40 in a block of 4096 bytes (a pool's block is never smaller
// than what was asked for) gives a peak of 1 TiB active. A trace's
// negative size is refused ("size ... is not a non-negative integer"),
// and so is a history's (trace.Check). Expected: the snapshot refused,
// naming the segment.
func TestHostileS35cVizSnapshotRequestedUnchecked(t *testing.T) {
	for _, requested := range []int64{-5, 1 << 40} {
		t.Run(fmt.Sprint(requested), func(t *testing.T) {
			path := writeTemp(t, "snap.json", fmt.Sprintf(`{"policy":"arena","managed_bytes":4096,"active_bytes":0,"segments":[{"id":1,"size":4096,"blocks":[{"offset":0,"size":4096,"requested":%d,"state":"active","block_id":1}]}]}`, requested))
			pg, err := loadPage(path, "arena", newProgress(&bytes.Buffer{}))
			if err != nil {
				assert.Contains(t, err.Error(), "segment 1")
				return
			}
			assert.LessOrEqual(t, pg.PeakActive.Bytes, int64(4096), "the active bytes of a 4096-byte pool: peak %+v", pg.PeakActive)
			assert.Fail(t, "a block whose requested size no pool could have is drawn", "sizes %v", pg.Allocs.Size)
		})
	}
}

// FAILED before its fix (session 35): viz reads a snapshot with json.Decoder.Decode, once, and
// ignores what follows the first JSON value (cmd/clpool/viz.go:286, loadPage). A file
// of snapshots appended one after another (a program that writes one
// every minute, JSON lines) is drawn as its first, oldest, snapshot,
// silently; so is a snapshot followed by garbage. A trace with trailing
// garbage is refused, with its line. Expected: the file refused (or the
// last snapshot drawn).
func TestHostileS35cVizSnapshotFileWithMoreAfterIt(t *testing.T) {
	pool, err := mempool.New(nothing{}, mempool.WithDropSafety(false))
	require.NoError(t, err)
	defer pool.Close()
	var lines bytes.Buffer
	var last mempool.Snapshot
	for i := range 3 {
		_, err := pool.Allocate(int64(1000 * (i + 1)))
		require.NoError(t, err)
		last = pool.Snapshot()
		b, err := json.Marshal(last)
		require.NoError(t, err)
		lines.Write(b)
		lines.WriteByte('\n')
	}
	for name, text := range map[string]string{
		"three snapshots":        lines.String(),
		"a snapshot and garbage": strings.SplitN(lines.String(), "\n", 2)[0] + "\nthis is not JSON\n",
	} {
		t.Run(name, func(t *testing.T) {
			pg, err := loadPage(writeTemp(t, "snaps.json", text), "arena", newProgress(&bytes.Buffer{}))
			if err != nil {
				return // refused: fine
			}
			if name == "three snapshots" {
				assert.Equal(t, last.ActiveBytes, pg.Map.ActiveBytes, "the page is of the last snapshot, %d active bytes, not the first", last.ActiveBytes)
				return
			}
			assert.Fail(t, "a snapshot followed by garbage is drawn", fmt.Sprint(pg.Map.ActiveBytes))
		})
	}
}

// PASSES (exploration): viz draws traces at the edges that replay and
// plan read: CRLF, a sited trace whose sites hold spaces, segments only
// (which replay and plan refuse, and viz draws), 0-byte blocks, ids
// from below 0, blocks left live; and refuses a BOM, as they do.
func TestHostileS35cVizEdges(t *testing.T) {
	for name, text := range map[string]string{
		"crlf":          "op id size\r\na 1 10\r\nf 1 0\r\n",
		"sited":         "op\tid\tsize\tt\tqueue\tsite\na\t1\t10\t5\t1\tmy file.go:1:f < x\nf\t1\t0\t6\t-\t-\n",
		"segments only": "A 1 4096\nF 1 0\n",
		"zero bytes":    "a 1 0\na 2 0\nf 1 0\n",
		"negative ids":  "a -5 100\na 0 100\nf -5 0\n",
		"left live":     "a 1 100\na 2 100\n",
	} {
		t.Run(name, func(t *testing.T) {
			viz(t, writeTemp(t, "t.tsv", text))
		})
	}
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 1, run([]string{"viz", "-o", t.TempDir() + "/x.html", writeTemp(t, "bom.tsv", "\ufeffa 1 10\n")}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "bom.tsv:1: unknown op")
}
