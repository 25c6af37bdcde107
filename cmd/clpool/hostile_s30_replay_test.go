package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostileTrace writes text to a trace file in a temporary directory and
// returns its path.
func hostileTrace(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "t.tsv")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	return path
}

// -runs and -warmup are checked one at a time (runs >= 1, warmup >= 0),
// but replay then loops over warmup+runs rounds: a sum that overflows int
// is negative, no round runs, and median of no runs indexes s[-1]: the
// command panics (index out of range [-1], replay.go's median call after
// the rounds, main.go median) instead of refusing the flags. Expected: an
// error naming the flags, as for -runs 0, and no panic.
func TestHostileS30ReplayRunsPlusWarmupOverflowPanics(t *testing.T) {
	path := hostileTrace(t, "a 1 4096\nf 1 0\n")
	for _, flags := range [][]string{
		{"-runs", strconv.Itoa(math.MaxInt), "-warmup", "1"},
		{"-runs", "1", "-warmup", strconv.Itoa(math.MaxInt)},
	} {
		t.Run(strings.Join(flags, " "), func(t *testing.T) {
			var out, errs bytes.Buffer
			var err error
			require.NotPanics(t, func() {
				err = replayCmd(append(flags, "-configs", "immediate", path), &out, &errs)
			}, "replay panics when -warmup + -runs overflows")
			assert.Error(t, err, "flags whose rounds cannot be counted are refused")
			assert.Empty(t, out.String(), "no table of zero runs")
		})
	}
}

// The raw configurations report misses = device allocations = the
// trace's allocations (replay.go, newReplayer: int64(sum.Allocs) twice).
// But allocator.Deferred and Immediate make no buffer for a 0-byte
// request (they return nil: allocator.go, Deferred.Allocate), so a trace
// of 0-byte blocks makes no device allocation at all, while replay prints
// one per block. Expected: device_allocs counts the allocations that
// reach the device, 0 here (the pools report theirs from their Stats).
func TestHostileS30ReplayRawDeviceAllocsCountsZeroByteBlocks(t *testing.T) {
	path := hostileTrace(t, "a 1 0\na 2 0\nf 1 0\nf 2 0\n")
	var out, errs bytes.Buffer
	err := replayCmd([]string{"-runs", "1", "-warmup", "0", "-format", "tsv", "-configs", "deferred,immediate", path}, &out, &errs)
	require.NoError(t, err, errs.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3)
	for _, l := range lines[1:] {
		f := strings.Split(l, "\t")
		assert.Equal(t, "0", f[4], "%s: a raw allocator asked for 0 bytes makes no device allocation: %s", f[0], l)
	}
}

// replay's usage says "A run is passes of the trace until 20 ms have gone
// (one at least)" and the package doc says the time is the "median of
// several warm runs". With -warmup 0, the first timed run is also the
// first run, which replayer.run makes exactly one pass (for the pool's
// figures) from a cold pool: its time, device allocations and all, goes
// into the median as one of the timed runs (with -runs 1 it is the
// figure). Expected: every timed run lasts at least minRunTime (the
// figures' pass kept apart from the timing, or timed on top of it).
func TestHostileS30ReplayWarmupZeroTimesAColdSinglePass(t *testing.T) {
	q, err := cl.DefaultQueue()
	require.NoError(t, err)
	defer q.Release()
	events := []trace.Event{{Op: trace.Alloc, ID: 1, Size: 4096}, {Op: trace.Free, ID: 1}}
	rp, err := newReplayer("pool-immediate", q, events, trace.Summarize(events), 4)
	require.NoError(t, err)
	defer rp.close()
	start := time.Now()
	_, err = rp.run(q, true) // round 0 with -warmup 0: timed, and the first
	require.NoError(t, err)
	took := time.Since(start)
	require.Len(t, rp.r.Runs, 1)
	assert.GreaterOrEqual(t, took, minRunTime,
		"a timed run (round 0 with -warmup 0) is one cold pass of a 2-event trace, not passes for %v: its %.0f ns/event is in the median", minRunTime, rp.r.Runs[0])
}

// viz's page counted the live bytes of a trace in a plain int64
// (viz.go, tracePage: liveBytes += ev.Size), while trace.Summarize (and
// so replay and plan) keeps them in 128 bits and saturates the peak at
// math.MaxInt64. Nine live blocks of 2^60 bytes (which the pool over no
// device accepted) wrapped the sum negative at the eighth. viz's sums
// are 128 bits since; and since session 32 the pool refuses the request
// that would take its managed bytes past math.MaxInt64 (an
// out-of-memory error, where its own sums wrapped: see
// TestHostileS32dLedgerWrapsPast2to63), so viz, which replays the
// trace's blocks through such a pool, names that event instead of
// drawing a page. Expected: that error, or a page whose peak active
// agrees with Summarize's.
func TestHostileS30VizPeakActiveWrapsOnHugeBlocks(t *testing.T) {
	var sb strings.Builder
	for id := 1; id <= 9; id++ {
		fmt.Fprintf(&sb, "a %d %d\n", id, int64(1)<<60)
	}
	events, err := trace.ReadComplete(strings.NewReader(sb.String()))
	require.NoError(t, err)
	pg, err := tracePage(events, "arena", newProgress(&bytes.Buffer{}))
	if err != nil {
		require.ErrorContains(t, err, "replaying event 8")
		require.ErrorIs(t, err, mempool.ErrOutOfMemory)
		return
	}
	assert.Equal(t, trace.Summarize(events).PeakLiveBytes, pg.PeakActive.Bytes, "viz's peak of active bytes, against Summarize's")
	assert.Equal(t, 9, pg.PeakActive.Moment, "the live bytes only grow: the peak is at the last event")
}
