package trace_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sitedText = "op\tid\tsize\tt\tqueue\tsite\n" +
	"A\t1\t8192\t90\t1\tmain.go:3:main.main\n" +
	"a\t1\t4096\t100\t1\tmain.go:3:main.main\n" +
	"a\t2\t100\t150\t-\tsolve.go:10:main.(*solver).step < main.go:4:main.main\n" +
	"f\t1\t0\t200\t2\tmain.go:5:main.main\n" +
	"f\t2\t100\t250\t-\t-\n" +
	"F\t1\t8192\t300\t-\t-\n"

var sitedEvents = []trace.Event{
	{Op: trace.SegmentAlloc, ID: 1, Size: 8192, Time: 90, Queue: 1, Site: "main.go:3:main.main"},
	{Op: trace.Alloc, ID: 1, Size: 4096, Time: 100, Queue: 1, Site: "main.go:3:main.main"},
	{Op: trace.Alloc, ID: 2, Size: 100, Time: 150, Site: "solve.go:10:main.(*solver).step < main.go:4:main.main"},
	{Op: trace.Free, ID: 1, Time: 200, Queue: 2, Site: "main.go:5:main.main"},
	{Op: trace.Free, ID: 2, Time: 250},
	{Op: trace.SegmentFree, ID: 1, Time: 300},
}

// A sited trace is split on tabs only: its sites hold spaces.
func TestReadSitedTrace(t *testing.T) {
	events, err := trace.Read(strings.NewReader(sitedText))
	require.NoError(t, err)
	assert.Equal(t, sitedEvents, events)
	assert.True(t, trace.Sited(events))
	assert.True(t, trace.Timed(events))
	assert.False(t, trace.Sited(events[4:]))

	events, err = trace.ReadComplete(strings.NewReader(strings.ReplaceAll(sitedText, "\n", "\r\n")))
	require.NoError(t, err, "CRLF")
	assert.Equal(t, sitedEvents, events)
}

func TestSitedWriterWritesWhatReadReads(t *testing.T) {
	var buf bytes.Buffer
	w := trace.NewSitedWriter(&buf)
	for _, ev := range sitedEvents {
		require.NoError(t, w.Write(ev))
	}
	require.NoError(t, w.Flush())
	want := strings.Replace(strings.Replace(sitedText, "f\t2\t100", "f\t2\t0", 1), "F\t1\t8192", "F\t1\t0", 1)
	assert.Equal(t, want, buf.String())

	// Tabs and line breaks in a site are written as spaces.
	buf.Reset()
	w = trace.NewSitedWriter(&buf)
	require.NoError(t, w.Write(trace.Event{Op: trace.Alloc, ID: 1, Size: 8, Site: "odd\tfile.go:1:f\r\n"}))
	require.NoError(t, w.Flush())
	events, err := trace.ReadComplete(&buf)
	require.NoError(t, err)
	assert.Equal(t, "odd file.go:1:f  ", events[0].Site)
}

// Issue 24: a Writer hands its writer whole lines only, so that a program
// stopped between two writes leaves no line cut. (It wrapped a
// bufio.Writer, which writes its buffer out when full, mid-line.)
func TestWriterWritesWholeLinesOnly(t *testing.T) {
	var calls [][]byte
	w := trace.NewSitedWriter(writerFunc(func(p []byte) (int, error) {
		calls = append(calls, bytes.Clone(p))
		return len(p), nil
	}))
	for i := range 10000 {
		require.NoError(t, w.Write(trace.Event{Op: trace.Alloc, ID: int64(i + 1), Size: 4096, Time: 1000, Queue: 1, Site: "some_file.go:123:main.someFunction"}))
	}
	require.NotEmpty(t, calls, "written as the buffer fills")
	require.NoError(t, w.Flush())
	for i, c := range calls {
		assert.True(t, bytes.HasSuffix(c, []byte("\n")), "write %d ends mid-line", i)
	}
	events, err := trace.ReadComplete(bytes.NewReader(bytes.Join(calls, nil)))
	require.NoError(t, err)
	assert.Len(t, events, 10000)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// Issue 24: ReadComplete refuses a last line without its newline, as a
// program stopped mid-line leaves it; Read, as before, reads it.
func TestReadCompleteRefusesACutLastLine(t *testing.T) {
	text := "op\tid\tsize\tt\na\t1\t8\t100\nf\t1\t0\t200\na\t3628\t237568\t186"
	_, err := trace.ReadComplete(strings.NewReader(text))
	require.ErrorIs(t, err, trace.ErrCut)
	var le *trace.LineError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, 4, le.Line)
	assert.EqualError(t, err, `trace: line 4: the last line, "a\t3628\t237568\t186", has no newline: the trace was cut`)

	// A cut so short it is no event is cut all the same, not a bad line.
	_, err = trace.ReadComplete(strings.NewReader("op\tid\tsize\tt\na\t1\t8\t100\na\t3"))
	require.ErrorIs(t, err, trace.ErrCut)

	for _, whole := range []string{"a\t1\t8\t100\n", "a\t1\t8\t100\n\n  ", "", "a\t1\t8\t100\r\n"} {
		_, err := trace.ReadComplete(strings.NewReader(whole))
		assert.NoError(t, err, "%q", whole)
	}
	events, err := trace.Read(strings.NewReader("a\t1\t8\t100\nf\t1\t0\t200"))
	require.NoError(t, err, "Read takes the last line as it is")
	assert.Len(t, events, 2)
}

// Issue 24: times that go backwards, and columns that disagree with the
// header, are refused.
func TestReadRefusesBackwardTimesAndColumnsThatDisagree(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		kind       error
		want       string
	}{
		{"time going backwards", "a\t1\t8\t100\na\t2\t8\t300\nf\t1\t0\t200\n", trace.ErrTimeBackwards,
			"trace: line 3: time 200 ns is before the 300 ns of line 2: a trace's times never go backwards"},
		{"backwards across a comment", "op id size t\na 1 8 100\n# note\nf 1 0 99\n", trace.ErrTimeBackwards, "line 4: time 99 ns is before the 100 ns of line 2"},
		{"backwards in a sited trace", "op\tid\tsize\tt\tqueue\tsite\nA\t1\t8\t100\t-\t-\nF\t1\t0\t50\t-\t-\n", trace.ErrTimeBackwards, "line 3: time 50 ns"},
		{"fewer columns than the sited header", "op\tid\tsize\tt\tqueue\tsite\na\t1\t8\t100\n", trace.ErrColumns,
			"trace: line 2: 4 tab-separated fields, but the header (line 1) names 6: op id size t queue site"},
		{"a sited line split by spaces", "op\tid\tsize\tt\tqueue\tsite\na 1 8 100 1 main.go:3:main.main\n", trace.ErrColumns, "line 2: 1 tab-separated fields"},
		{"more columns than the timed header", "op\tid\tsize\tt\na\t1\t8\t100\t1\tx\n", trace.ErrColumns, "got 6 fields (a trace with queue and site columns names them in its header)"},
		{"time under the untimed header", "op\tid\tsize\na\t1\t8\t5\n", trace.ErrColumns, "trace: line 2: 4 fields, but line 1 has 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := trace.Read(strings.NewReader(tc.text))
			require.ErrorIs(t, err, tc.kind)
			assert.ErrorContains(t, err, tc.want)
			assert.Equal(t, 1, strings.Count(err.Error(), "trace:"), "one prefix: %v", err)
		})
	}
	// Equal times are fine: two events in one clock tick.
	_, err := trace.Read(strings.NewReader("a\t1\t8\t100\nf\t1\t0\t100\n"))
	require.NoError(t, err)
}

func TestReadRejectsBadSitedAndSegmentLines(t *testing.T) {
	const h = "op\tid\tsize\tt\tqueue\tsite\n"
	for _, tc := range []struct{ name, text, want string }{
		{"queue zero", h + "a\t1\t8\t1\t0\tx\n", `line 2: queue "0" is neither a positive integer nor -`},
		{"queue a name", h + "a\t1\t8\t1\tcopy\tx\n", `queue "copy"`},
		{"free of a dead segment", "F\t1\t0\n", "line 1: free of segment 1, which is not live"},
		{"segment allocated while live", "A\t1\t8\nA\t1\t8\n", "line 2: segment 1 allocated while live"},
		{"segment freed with another size", "A\t1\t8\nF\t1\t9\n", "line 2: free of segment 1 with size 9, but it was allocated with 8"},
		{"a block id is not a segment id", "A\t1\t8\nf\t1\t0\n", "line 2: free of block 1, which is not live"},
		{"unknown header", "op\tid\tsize\tt\tsite\tqueue\n", "header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := trace.Read(strings.NewReader(tc.text))
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

func TestBlocksAndSummarizeOfSegments(t *testing.T) {
	blocks := trace.Blocks(sitedEvents)
	assert.Equal(t, []trace.Event{sitedEvents[1], sitedEvents[2], sitedEvents[3], sitedEvents[4]}, blocks)
	assert.Equal(t, blocks, trace.Blocks(blocks))
	s := trace.Summarize(sitedEvents)
	assert.Equal(t, trace.Summary{Allocs: 2, Frees: 2, PeakLiveBytes: 4196, Sizes: 2,
		SegmentAllocs: 1, SegmentFrees: 1, PeakSegmentBytes: 8192}, s)

	var freed []int64
	require.NoError(t, trace.Replay(sitedEvents, func(size int64) (int64, error) { return size, nil },
		func(h int64) error { freed = append(freed, h); return nil }))
	assert.Equal(t, []int64{4096, 100}, freed, "the segments are not replayed")
	assert.Len(t, trace.Plan(sitedEvents, 256).Blocks, 2, "nor planned")
}

func TestSegmentEventJSON(t *testing.T) {
	data, err := json.Marshal(sitedEvents[:3])
	require.NoError(t, err)
	assert.JSONEq(t, `[{"op":"A","id":1,"size":8192,"t":90,"queue":1,"site":"main.go:3:main.main"},
		{"op":"a","id":1,"size":4096,"t":100,"queue":1,"site":"main.go:3:main.main"},
		{"op":"a","id":2,"size":100,"t":150,"site":"solve.go:10:main.(*solver).step < main.go:4:main.main"}]`, string(data))
	var back []trace.Event
	require.NoError(t, json.Unmarshal(data, &back))
	assert.Equal(t, sitedEvents[:3], back)
	assert.True(t, trace.SegmentFree.Segment())
	assert.False(t, trace.Free.Segment())
}
