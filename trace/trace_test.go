package trace_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func readFile(t *testing.T, path string) []trace.Event {
	t.Helper()
	events, err := trace.ReadFile(path)
	require.NoError(t, err)
	return events
}

func TestReadTheCGTrace(t *testing.T) {
	events := readFile(t, "../testdata/cg.tsv")
	s := trace.Summarize(events)
	assert.Equal(t, 3307, s.Allocs, "the README of shared/ says 3,307 allocations")
	assert.Equal(t, int64(3670016), s.PeakLiveBytes, "and a peak of 3,670,016 live bytes")
	assert.Equal(t, s.Allocs-s.Leaked, s.Frees)
}

// TestThreeColumnTracesReadAsBefore pins what Read made of the two real
// traces before traces had times: a digest of every event as the
// three-column Read returned it.
func TestThreeColumnTracesReadAsBefore(t *testing.T) {
	for name, want := range map[string]struct {
		events int
		digest string
	}{
		"cg.tsv":  {6614, "5ea7d5fd3538aa9d806e73a5fc7725de1ca03e4267c621d1e709a0ec3ab294a0"},
		"mlp.tsv": {53902, "7d7bdbb02981f2ad0ba745365790e1ca64bd1a0f92cb1849c6f1d38fad1ac526"},
	} {
		t.Run(name, func(t *testing.T) {
			events := readFile(t, "../testdata/"+name)
			h := sha256.New()
			for _, ev := range events {
				fmt.Fprintf(h, "%c %d %d\n", ev.Op, ev.ID, ev.Size)
				require.Zero(t, ev.Time)
			}
			assert.Len(t, events, want.events)
			assert.Equal(t, want.digest, fmt.Sprintf("%x", h.Sum(nil)))
			assert.False(t, trace.Timed(events))
		})
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	in := []trace.Event{
		{Op: trace.Alloc, ID: 1, Size: 100},
		{Op: trace.Alloc, ID: 2, Size: 0},
		{Op: trace.Free, ID: 1},
		{Op: trace.Free, ID: 2},
	}
	var buf bytes.Buffer
	w := trace.NewWriter(&buf)
	for _, ev := range in {
		require.NoError(t, w.Write(ev))
	}
	require.NoError(t, w.Flush())
	assert.True(t, strings.HasPrefix(buf.String(), "op\tid\tsize\na\t1\t100\n"))
	out, err := trace.Read(&buf)
	require.NoError(t, err)
	assert.Equal(t, in, out)
}

func TestTimedWriteReadRoundTrip(t *testing.T) {
	in := []trace.Event{
		{Op: trace.Alloc, ID: 1, Size: 100, Time: 1200},
		{Op: trace.Alloc, ID: 2, Size: 0, Time: 1500},
		{Op: trace.Free, ID: 1, Time: 3 * time.Second},
		{Op: trace.Free, ID: 2, Time: 3*time.Second + 7},
	}
	var buf bytes.Buffer
	w := trace.NewTimedWriter(&buf)
	for _, ev := range in {
		require.NoError(t, w.Write(ev))
	}
	require.NoError(t, w.Flush())
	assert.Equal(t, "op\tid\tsize\tt\na\t1\t100\t1200\na\t2\t0\t1500\nf\t1\t0\t3000000000\nf\t2\t0\t3000000007\n", buf.String())
	out, err := trace.Read(&buf)
	require.NoError(t, err)
	assert.Equal(t, in, out)
	assert.True(t, trace.Timed(out))
}

func TestNewWriterLeavesOutTimes(t *testing.T) {
	var buf bytes.Buffer
	w := trace.NewWriter(&buf)
	require.NoError(t, w.Write(trace.Event{Op: trace.Alloc, ID: 1, Size: 8, Time: time.Second}))
	require.NoError(t, w.Flush())
	assert.Equal(t, "op\tid\tsize\na\t1\t8\n", buf.String())
}

func TestTimed(t *testing.T) {
	assert.False(t, trace.Timed(nil))
	assert.False(t, trace.Timed([]trace.Event{{Op: trace.Alloc, ID: 1, Size: 8}}))
	assert.True(t, trace.Timed([]trace.Event{{Op: trace.Alloc, ID: 1, Size: 8}, {Op: trace.Free, ID: 1, Time: 1}}))
}

func TestReadAcceptsEitherHeaderOrNone(t *testing.T) {
	for name, text := range map[string]string{
		"no header":             "a 1 8 5\nf 1 8 9\n",
		"timed header":          "op\tid\tsize\tt\na\t1\t8\t5\nf\t1\t0\t9\n",
		"comment before header": "# recorded today\n\nop id size t\r\na 1 8 5\r\nf 1 0 9", // and CRLF, no final newline
	} {
		events, err := trace.Read(strings.NewReader(text))
		require.NoError(t, err, name)
		assert.Equal(t, []trace.Event{{Op: trace.Alloc, ID: 1, Size: 8, Time: 5}, {Op: trace.Free, ID: 1, Time: 9}}, events, name)
	}
}

func TestReadLinesLongerThan64KiB(t *testing.T) {
	long := strings.Repeat("x", 200_000)
	text := "op\tid\tsize\n# " + long + "\na\t1\t8" + strings.Repeat(" ", 100_000) + "\nf\t1\t8\n"
	events, err := trace.Read(strings.NewReader(text))
	require.NoError(t, err)
	assert.Equal(t, []trace.Event{{Op: trace.Alloc, ID: 1, Size: 8}, {Op: trace.Free, ID: 1}}, events)

	// A long bad line fails with its line number, and the error quotes
	// only the start of it.
	_, err = trace.Read(strings.NewReader("a\t1\t8\n" + "a\t2\t" + long + "\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "trace: line 2: size ")
	assert.Less(t, len(err.Error()), 200)
}

func TestReadRejectsBadTraces(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
	}{
		{"free of a dead block", "op\tid\tsize\nf\t1\t0\n", "trace: line 2: free of block 1, which is not live"},
		{"double allocation", "a\t1\t8\na\t1\t8\n", "trace: line 2: block 1 allocated while live"},
		{"unknown op", "x\t1\t8\n", `trace: line 1: unknown op "x"`},
		{"negative size", "a\t1\t-8\n", `trace: line 1: size "-8" is not`},
		{"bad id", "a\tone\t8\n", `trace: line 1: block id "one" is not an integer`},
		{"missing size", "a\t1\t8\na 2\n", "trace: line 2: want `op id size` or `op id size t`, got 2 fields"},
		{"missing size of a free", "a\t1\t8\nf 1\n", "trace: line 2: want"},
		{"too many fields", "a\t1\t8\t9\t10\n", "trace: line 1: want"},
		{"free of the wrong size", "a\t1\t8\n\nf\t1\t99\n", "trace: line 3: free of block 1 with size 99, but it was allocated with 8"},
		{"bad time", "a\t1\t8\t1.5\n", `trace: line 1: time "1.5" is not`},
		{"negative time", "a\t1\t8\t-1\n", `trace: line 1: time "-1" is not`},
		{"time after untimed", "a\t1\t8\nf\t1\t0\t9\n", "trace: line 2: 4 fields, but line 1 has 3: a trace has a time on every event or on none"},
		{"untimed after timed", "a\t1\t8\t5\n# a comment\nf\t1\t0\n", "trace: line 3: 3 fields, but line 1 has 4"},
		{"time under the untimed header", "op\tid\tsize\na\t1\t8\t5\n", "trace: line 2: 4 fields, but line 1 has 3"},
		{"no time under the timed header", "op\tid\tsize\tt\na\t1\t8\n", "trace: line 2: 3 fields, but line 1 has 4"},
		{"unknown header", "op\tid\tbytes\n", "trace: line 1: header"},
		{"header after events", "a\t1\t8\nop\tid\tsize\n", `trace: line 2: unknown op "op"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := trace.Read(strings.NewReader(tc.text))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, 1, strings.Count(err.Error(), "trace:"), "one prefix: %v", err)
		})
	}
}

func TestCheckRefusesWhatReadRefuses(t *testing.T) {
	a := func(id, size int64, t time.Duration) trace.Event {
		return trace.Event{Op: trace.Alloc, ID: id, Size: size, Time: t}
	}
	f := func(id, size int64, t time.Duration) trace.Event {
		return trace.Event{Op: trace.Free, ID: id, Size: size, Time: t}
	}
	good := []trace.Event{a(1, 8, 10), {Op: trace.SegmentAlloc, ID: 1, Size: 4096, Time: 10}, f(1, 8, 20), a(1, 16, 20),
		{Op: trace.SegmentFree, ID: 1, Size: 4096, Time: 30}, f(1, 0, 30)}
	require.NoError(t, trace.Check(good), "a free's size may be the allocated one or 0; times may repeat")
	assert.Equal(t, int64(8), good[2].Size, "Check leaves the events as they are")
	require.NoError(t, trace.Check(nil))

	for _, tc := range []struct {
		name   string
		events []trace.Event
		want   string
	}{
		{"time going backwards", []trace.Event{a(1, 8, 50), a(2, 8, 9)}, "trace: event 2: time 9 ns is before the 50 ns of event 1"},
		{"free of a dead block", []trace.Event{a(1, 8, 0), f(2, 0, 0)}, "trace: event 2: free of block 2, which is not live"},
		{"double allocation", []trace.Event{a(1, 8, 0), a(1, 8, 0)}, "trace: event 2: block 1 allocated while live"},
		{"free of the wrong size", []trace.Event{a(1, 8, 0), f(1, 99, 0)}, "trace: event 2: free of block 1 with size 99, but it was allocated with 8"},
		{"free of a dead segment", []trace.Event{{Op: trace.SegmentFree, ID: 3}}, "trace: event 1: free of segment 3, which is not live"},
		{"unknown op", []trace.Event{{ID: 1, Size: 8}}, "trace: event 1: unknown op 0"},
		{"negative size", []trace.Event{a(1, -8, 0)}, "trace: event 1: size -8 is negative"},
		{"negative time", []trace.Event{a(1, 8, -1)}, "trace: event 1: time -1 ns is negative"},
		{"negative queue", []trace.Event{{Op: trace.Alloc, ID: 1, Size: 8, Queue: -2}}, "trace: event 1: queue -2 is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := trace.Check(tc.events)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, 1, strings.Count(err.Error(), "trace:"), "one prefix: %v", err)
		})
	}
	assert.ErrorIs(t, trace.Check([]trace.Event{a(1, 8, 50), a(2, 8, 9)}), trace.ErrTimeBackwards)

	// The same events, as a trace's lines, Read refuses at the same place,
	// and a Writer refuses to write the second.
	_, err := trace.Read(strings.NewReader("op\tid\tsize\tt\na\t1\t8\t50\na\t2\t8\t9\n"))
	assert.ErrorIs(t, err, trace.ErrTimeBackwards)
	assert.ErrorContains(t, err, "time 9 ns is before the 50 ns of line 2")
	var buf bytes.Buffer
	w := trace.NewTimedWriter(&buf)
	require.NoError(t, w.Write(a(1, 8, 50)))
	err = w.Write(a(2, 8, 9))
	assert.ErrorIs(t, err, trace.ErrTimeBackwards)
	assert.ErrorContains(t, err, "time 9 ns is before the 50 ns of event 1")
}

func TestEventJSON(t *testing.T) {
	ev := trace.Event{Op: trace.Alloc, ID: 1, Size: 512, Time: 123}
	data, err := json.Marshal(ev)
	require.NoError(t, err)
	assert.JSONEq(t, `{"op":"a","id":1,"size":512,"t":123}`, string(data))

	var back []trace.Event
	require.NoError(t, json.Unmarshal([]byte(`[{"op":"a","id":1,"size":512,"t":123},{"op":"f","id":1,"size":0}]`), &back))
	assert.Equal(t, []trace.Event{ev, {Op: trace.Free, ID: 1}}, back)

	_, err = json.Marshal(trace.Event{Op: 'x'})
	assert.ErrorContains(t, err, "trace: unknown op 'x'")
	assert.ErrorContains(t, json.Unmarshal([]byte(`{"op":"alloc"}`), &ev), `trace: unknown op "alloc"`)
}

func TestReplayFreesWhatTheTraceLeavesLiveInIDOrder(t *testing.T) {
	events := []trace.Event{
		{Op: trace.Alloc, ID: 5, Size: 10}, {Op: trace.Alloc, ID: 2, Size: 20}, {Op: trace.Alloc, ID: 9, Size: 30},
		{Op: trace.Alloc, ID: 1, Size: 40}, {Op: trace.Free, ID: 2},
	}
	var freed []int64
	err := trace.Replay(events,
		func(size int64) (int64, error) { return size, nil }, // the handle is the size
		func(h int64) error { freed = append(freed, h); return nil })
	require.NoError(t, err)
	assert.Equal(t, []int64{20, 40, 10, 30}, freed, "block 2 by the trace, then 1, 5, 9")
	assert.Equal(t, trace.Summary{Allocs: 4, Frees: 1, PeakLiveBytes: 100, Leaked: 3, Sizes: 4}, trace.Summarize(events))
}

// Issue 21, item 2: Summarize's running live bytes and peak saturate at
// math.MaxInt64 rather than wrap to a negative or small figure, and the
// live bytes stay exact past it, so that frees bring them back down.
func TestSummarizeSaturates(t *testing.T) {
	const huge = math.MaxInt64 - 10
	for _, c := range []struct {
		name   string
		events []trace.Event
		peak   int64
	}{
		{"two near-MaxInt64 blocks", []trace.Event{
			{Op: trace.Alloc, ID: 1, Size: huge},
			{Op: trace.Alloc, ID: 2, Size: huge},
		}, math.MaxInt64},
		{"many MaxInt64 blocks", []trace.Event{
			{Op: trace.Alloc, ID: 1, Size: math.MaxInt64},
			{Op: trace.Alloc, ID: 2, Size: math.MaxInt64},
			{Op: trace.Alloc, ID: 3, Size: math.MaxInt64},
			{Op: trace.Alloc, ID: 4, Size: math.MaxInt64},
		}, math.MaxInt64},
		{"exactly MaxInt64 does not saturate early", []trace.Event{
			{Op: trace.Alloc, ID: 1, Size: huge},
			{Op: trace.Alloc, ID: 2, Size: 10},
		}, math.MaxInt64},
		{"one byte short of MaxInt64", []trace.Event{
			{Op: trace.Alloc, ID: 1, Size: huge},
			{Op: trace.Alloc, ID: 2, Size: 9},
		}, math.MaxInt64 - 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := trace.Summarize(c.events)
			assert.Equal(t, c.peak, s.PeakLiveBytes)
			assert.Equal(t, len(c.events), s.Allocs)
		})
	}

	// Past the saturation, frees count exactly: after freeing the two huge
	// blocks, 100 bytes are live, and a later 200-byte allocation makes
	// 300, which does not raise the saturated peak; a wrapped sum would
	// have left the live bytes off by 2^64 or the peak negative.
	events := []trace.Event{
		{Op: trace.Alloc, ID: 1, Size: 100},
		{Op: trace.Alloc, ID: 2, Size: huge},
		{Op: trace.Alloc, ID: 3, Size: huge},
		{Op: trace.Free, ID: 2},
		{Op: trace.Free, ID: 3},
		{Op: trace.Alloc, ID: 4, Size: 200},
	}
	assert.Equal(t, trace.Summary{Allocs: 4, Frees: 2, PeakLiveBytes: math.MaxInt64, Leaked: 2, Sizes: 3}, trace.Summarize(events))
	// The same in a trace of its own, without the huge blocks live at
	// once: the peak is exact.
	events = []trace.Event{
		{Op: trace.Alloc, ID: 1, Size: huge},
		{Op: trace.Free, ID: 1},
		{Op: trace.Alloc, ID: 2, Size: huge},
		{Op: trace.Alloc, ID: 3, Size: 5},
	}
	assert.Equal(t, int64(huge+5), trace.Summarize(events).PeakLiveBytes)
}

// Window drops the frees of blocks and segments allocated before the
// window, counts the blocks', and keeps the rest in order.
func TestWindowDropsFreesOfWhatCameBefore(t *testing.T) {
	events := []trace.Event{
		{Op: trace.Free, ID: 1},                    // allocated before: dropped, counted
		{Op: trace.SegmentFree, ID: 7},             // a segment from before: dropped
		{Op: trace.SegmentAlloc, ID: 8, Size: 512}, // kept
		{Op: trace.Alloc, ID: 2, Size: 64},
		{Op: trace.Free, ID: 2},
		{Op: trace.Free, ID: 3}, // before, too
		{Op: trace.SegmentFree, ID: 8},
	}
	kept, dropped := trace.Window(events)
	assert.Equal(t, []trace.Event{events[2], events[3], events[4], events[6]}, kept)
	assert.Equal(t, 2, dropped)
	assert.NoError(t, trace.Check(kept))
}

// TestReplayErrorGivesTheEventIndex: Replay's error at an event is an
// *EventError with the event's index in the events given (segment events
// counted), whose message is the error's, and which unwraps to it.
func TestReplayErrorGivesTheEventIndex(t *testing.T) {
	refused := errors.New("refused")
	events := []trace.Event{
		{Op: trace.Alloc, ID: 1, Size: 10},
		{Op: trace.SegmentAlloc, ID: 1, Size: 4096},
		{Op: trace.Free, ID: 1},
		{Op: trace.Alloc, ID: 1, Size: 99},
	}
	err := trace.Replay(events, func(size int64) (int64, error) {
		if size == 99 {
			return 0, refused
		}
		return size, nil
	}, func(int64) error { return nil })
	var ee *trace.EventError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 3, ee.Index)
	assert.ErrorIs(t, err, refused)
	assert.Equal(t, "trace: allocating block 1 (99 bytes): refused", err.Error())
}
