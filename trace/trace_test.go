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

func TestReplayFreesWhatTheTraceLeavesLive(t *testing.T) {
	events := []trace.Event{{trace.Alloc, 1, 10}, {trace.Alloc, 2, 20}, {trace.Free, 1, 0}}
	live := map[int64]bool{}
	next := int64(0)
	err := trace.Replay(events,
		func(size int64) (int64, error) { next++; live[next] = true; return next, nil },
		func(h int64) error { delete(live, h); return nil })
	require.NoError(t, err)
	assert.Empty(t, live)
	assert.Equal(t, trace.Summary{Allocs: 2, Frees: 1, PeakLiveBytes: 30, Leaked: 1}, trace.Summarize(events))
}
