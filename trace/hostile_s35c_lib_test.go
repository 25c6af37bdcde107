package trace_test

// Hostile review s35c: trace.Plan, Replay and Read as a library.

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PASSES (exploration): Replay with events out of order (a free before
// its allocation, a block allocated twice) refuses them before calling
// free with anything alloc did not return, and frees what it allocated;
// with no block event it calls neither function, nil ones included;
// segments are never replayed.
func TestHostileS35cReplayOutOfOrder(t *testing.T) {
	require.NoError(t, trace.Replay[int](nil, nil, nil))
	require.NoError(t, trace.Replay[int]([]trace.Event{{Op: trace.SegmentAlloc, ID: 1, Size: 8}, {Op: trace.SegmentFree, ID: 1}}, nil, nil))

	for name, events := range map[string][]trace.Event{
		"free first":         {{Op: trace.Free, ID: 1}, {Op: trace.Alloc, ID: 1, Size: 8}},
		"alloc twice":        {{Op: trace.Alloc, ID: 1, Size: 8}, {Op: trace.Alloc, ID: 1, Size: 8}},
		"free twice":         {{Op: trace.Alloc, ID: 1, Size: 8}, {Op: trace.Alloc, ID: 2, Size: 8}, {Op: trace.Free, ID: 1}, {Op: trace.Free, ID: 1}},
		"free of another id": {{Op: trace.Alloc, ID: 1, Size: 8}, {Op: trace.Free, ID: 2}},
	} {
		t.Run(name, func(t *testing.T) {
			next := 0
			given, freed := map[int]bool{}, map[int]int{}
			err := trace.Replay(events,
				func(int64) (int, error) { next++; given[next] = true; return next, nil },
				func(h int) error { freed[h]++; return nil })
			assert.Error(t, err)
			for h, n := range freed {
				assert.True(t, given[h], "free got %d, which alloc never returned", h)
				assert.Equal(t, 1, n, "handle %d freed once", h)
			}
			assert.Len(t, freed, len(given), "every handle given is freed")
		})
	}
}

// PASSES (exploration): a free that fails ends the replay with its
// error, frees the other live blocks, and never frees the failed one
// again.
func TestHostileS35cReplayFreeFails(t *testing.T) {
	events := []trace.Event{{Op: trace.Alloc, ID: 1, Size: 8}, {Op: trace.Alloc, ID: 2, Size: 8}, {Op: trace.Free, ID: 1}, {Op: trace.Free, ID: 2}}
	next := 0
	var freed []int
	boom := errors.New("boom")
	err := trace.Replay(events,
		func(int64) (int, error) { next++; return next, nil },
		func(h int) error {
			freed = append(freed, h)
			if h == 1 {
				return boom
			}
			return nil
		})
	require.ErrorIs(t, err, boom)
	assert.Contains(t, err.Error(), "freeing block 1")
	assert.Equal(t, []int{1, 2}, freed)
}

// PASSES (exploration, for -race): Plan, Summarize, Blocks and Replay
// read the events only: goroutines running them at once on one slice
// agree, and the events are unchanged.
func TestHostileS35cPlanConcurrent(t *testing.T) {
	var sb strings.Builder
	sb.WriteString("op id size t\n")
	for i := 1; i <= 300; i++ {
		sb.WriteString("a " + strconv.Itoa(i) + " " + strconv.Itoa(i*37%5000) + " " + strconv.Itoa(2*i) + "\n")
		if i%3 == 0 {
			sb.WriteString("f " + strconv.Itoa(i-1) + " 0 " + strconv.Itoa(2*i+1) + "\n")
		}
	}
	events, err := trace.ReadComplete(strings.NewReader(sb.String()))
	require.NoError(t, err)
	before := append([]trace.Event(nil), events...)
	want := trace.Plan(events, 256)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			got := trace.Plan(events, 256)
			assert.Equal(t, want, got)
			assert.Equal(t, want.PeakLive, trace.Summarize(trace.Blocks(events)).PeakLiveBytes)
			assert.NoError(t, trace.Replay(events, func(int64) (int, error) { return 0, nil }, func(int) error { return nil }))
		})
	}
	wg.Wait()
	assert.Equal(t, before, events)
}

// PASSES (exploration): Plan ignores the events' times, and a trace of
// events whose times are out of order (which Read refuses, and Check
// names) plans as its order says.
func TestHostileS35cPlanIgnoresTimes(t *testing.T) {
	events := []trace.Event{{Op: trace.Alloc, ID: 1, Size: 1000, Time: 50}, {Op: trace.Alloc, ID: 2, Size: 300, Time: 10}, {Op: trace.Free, ID: 1, Time: 5}, {Op: trace.Alloc, ID: 3, Size: 600, Time: 1}}
	require.ErrorIs(t, trace.Check(events), trace.ErrTimeBackwards)
	l := trace.Plan(events, 256)
	assert.EqualValues(t, 1536, l.Size)
	assert.EqualValues(t, 1300, l.PeakLive)
	assert.Equal(t, []int64{0, 1024, 0}, []int64{l.Blocks[0].Offset, l.Blocks[1].Offset, l.Blocks[2].Offset})
}

// PASSES (exploration): Read's errors are *LineError with the right line
// for CRLF, a BOM (an unknown op at line 1), a header out of place, a
// sited line split on spaces.
func TestHostileS35cReadLines(t *testing.T) {
	for text, line := range map[string]int{
		"op id size\r\na 1 10\r\nf 2 0\r\n":                     3,
		"\ufeffop id size\na 1 10\n":                            1,
		"# c\n\na 1 10\nop id size\n":                           4,
		"op\tid\tsize\tt\tqueue\tsite\n\na 1 10 5 1 x.go:1:f\n": 3,
	} {
		_, err := trace.Read(strings.NewReader(text))
		var le *trace.LineError
		if assert.ErrorAs(t, err, &le, "%q", text) {
			assert.Equal(t, line, le.Line, "%q: %v", text, err)
		}
	}
}
