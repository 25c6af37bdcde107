package trace_test

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadTheCGTrace(t *testing.T) {
	f, err := os.Open("../testdata/cg.tsv")
	require.NoError(t, err)
	defer f.Close()
	events, err := trace.Read(f)
	require.NoError(t, err)
	s := trace.Summarize(events)
	assert.Equal(t, 3307, s.Allocs, "the README of shared/ says 3,307 allocations")
	assert.Equal(t, int64(3670016), s.PeakLiveBytes, "and a peak of 3,670,016 live bytes")
	assert.Equal(t, s.Allocs-s.Leaked, s.Frees)
}

func TestWriteReadRoundTrip(t *testing.T) {
	in := []trace.Event{{trace.Alloc, 1, 100}, {trace.Alloc, 2, 0}, {trace.Free, 1, 0}, {trace.Free, 2, 0}}
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

func TestReadRejectsBadTraces(t *testing.T) {
	for name, text := range map[string]string{
		"free of a dead block": "op\tid\tsize\nf\t1\t0\n",
		"double allocation":    "a\t1\t8\na\t1\t8\n",
		"unknown op":           "x\t1\t8\n",
		"negative size":        "a\t1\t-8\n",
		"bad id":               "a\tone\t8\n",
		"too many fields":      "a\t1\t8\t9\n",
	} {
		_, err := trace.Read(strings.NewReader(text))
		assert.Error(t, err, name)
	}
}

func TestReplayFreesWhatTheTraceLeavesLiveInIDOrder(t *testing.T) {
	events := []trace.Event{{trace.Alloc, 5, 10}, {trace.Alloc, 2, 20}, {trace.Alloc, 9, 30}, {trace.Alloc, 1, 40}, {trace.Free, 2, 0}}
	var freed []int64
	err := trace.Replay(events,
		func(size int64) (int64, error) { return size, nil }, // the handle is the size
		func(h int64) error { freed = append(freed, h); return nil })
	require.NoError(t, err)
	assert.Equal(t, []int64{20, 40, 10, 30}, freed, "block 2 by the trace, then 1, 5, 9")
	assert.Equal(t, trace.Summary{Allocs: 4, Frees: 1, PeakLiveBytes: 100, Leaked: 3}, trace.Summarize(events))
}
