package trace_test

// Hostile review s33e: the trace package's doc promises, literally.

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PASSES. Package doc: "An Event also encodes as JSON,
// {"op":"a","id":1,"size":512,"t":123}, with t in nanoseconds, and queue
// and site when it has them."
func TestHostileS33EEventJSON(t *testing.T) {
	b, err := json.Marshal(trace.Event{Op: trace.Alloc, ID: 1, Size: 512, Time: 123})
	require.NoError(t, err)
	assert.Equal(t, `{"op":"a","id":1,"size":512,"t":123}`, string(b))
	b, err = json.Marshal(trace.Event{Op: trace.Free, ID: 1, Queue: 2, Site: "x.go:1:f"})
	require.NoError(t, err)
	assert.Equal(t, `{"op":"f","id":1,"size":0,"t":0,"queue":2,"site":"x.go:1:f"}`, string(b))
}

// PASSES. Read: "The events Read returns have Size 0 for every free";
// "Blank lines and lines starting with # are skipped, and so is the
// header".
func TestHostileS33EReadFreeSizeZero(t *testing.T) {
	ev, err := trace.Read(strings.NewReader("# c\n\nop id size\na 1 100\n\nf 1 100\n"))
	require.NoError(t, err)
	require.Len(t, ev, 2)
	assert.Zero(t, ev[1].Size)
}

// PASSES. Writer: "hands them to w, a number of whole lines in one Write
// call, when the buffer passes 64 KiB and at Flush".
func TestHostileS33EWriterBuffers64KiB(t *testing.T) {
	var calls []string
	w := trace.NewTimedWriter(s33eWriterFunc(func(p []byte) (int, error) {
		calls = append(calls, string(p))
		return len(p), nil
	}))
	n := 0
	for i := 1; n < 60<<10; i++ {
		require.NoError(t, w.Write(trace.Event{Op: trace.Alloc, ID: int64(i), Size: 123456, Time: 1000}))
		n += len("a\t\t123456\t1000\n") + 4
	}
	assert.Empty(t, calls, "nothing before 64 KiB")
	for i := 100000; len(calls) == 0 && i < 200000; i++ {
		require.NoError(t, w.Write(trace.Event{Op: trace.Alloc, ID: int64(i), Size: 123456, Time: 1000}))
	}
	require.NotEmpty(t, calls)
	for _, c := range calls {
		assert.True(t, strings.HasSuffix(c, "\n"))
		assert.Greater(t, len(c), 64<<10-64)
	}
	require.NoError(t, w.Flush())
}

type s33eWriterFunc func([]byte) (int, error)

func (f s33eWriterFunc) Write(p []byte) (int, error) { return f(p) }

// PASSES. NewSitedWriter: "Queue (- for 0) and Site (- for ""; its tabs and
// line breaks written as spaces)".
func TestHostileS33ESitedWriterSites(t *testing.T) {
	var buf bytes.Buffer
	w := trace.NewSitedWriter(&buf)
	require.NoError(t, w.Write(trace.Event{Op: trace.Alloc, ID: 1, Size: 10, Time: 5, Site: "a\tb\nc\r\nd"}))
	require.NoError(t, w.Write(trace.Event{Op: trace.Free, ID: 1, Time: 6}))
	require.NoError(t, w.Flush())
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	require.Len(t, lines, 3, buf.String())
	assert.Equal(t, "op\tid\tsize\tt\tqueue\tsite", lines[0])
	assert.Equal(t, "a\t1\t10\t5\t-\ta b c  d", lines[1])
	assert.Equal(t, "f\t1\t0\t6\t-\t-", lines[2])
}

// PASSES. Layout.Ratio: "+Inf when PeakLive is 0 and Size is not (a trace
// of empty blocks) and NaN when both are 0"; Plan "panics if align is less
// than 1"; "a block of 0 bytes ... takes align bytes".
func TestHostileS33EPlanEdges(t *testing.T) {
	l := trace.Plan([]trace.Event{{Op: trace.Alloc, ID: 1, Size: 0}}, 256)
	assert.EqualValues(t, 256, l.Size)
	assert.True(t, math.IsInf(l.Ratio(), 1))
	assert.True(t, math.IsNaN(trace.Plan(nil, 256).Ratio()))
	assert.Panics(t, func() { trace.Plan(nil, 0) })
}

// PASSES. Blocks: "It returns events itself if they have no segment event."
func TestHostileS33EBlocksSame(t *testing.T) {
	ev := []trace.Event{{Op: trace.Alloc, ID: 1, Size: 1}, {Op: trace.Free, ID: 1}}
	got := trace.Blocks(ev)
	assert.Same(t, &ev[0], &got[0])
}
