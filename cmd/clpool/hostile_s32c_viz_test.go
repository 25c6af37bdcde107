package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FAILED on a363727: the segments' analogue of s30's
// TestHostileS30VizPeakActiveWrapsOnHugeBlocks, which was fixed for the
// blocks' live bytes only. viz's page sums a trace's segment bytes (ops
// A and F) in a plain int64 (viz.go, tracePage: segBytes += ev.Size),
// while trace.Summarize keeps them in 128 bits and saturates
// PeakSegmentBytes at math.MaxInt64 ("the most bytes of segments live
// at once, the pool's peak managed bytes (saturating as PeakLiveBytes
// does)"). Three segments of 2^62 bytes wrap the sum negative at the
// second: the page's peak managed is 2^62 at event 1, and its managed
// series goes negative (-2^63, then -2^62), where the recorded pool's
// managed bytes only grew. Expected: the page's peak managed agrees
// with Summarize's PeakSegmentBytes, and no managed figure is negative.
func TestHostileS32cVizPeakManagedWrapsOnHugeSegments(t *testing.T) {
	var sb strings.Builder
	for id := 1; id <= 3; id++ {
		fmt.Fprintf(&sb, "A %d %d\n", id, int64(1)<<62)
	}
	sb.WriteString("a 1 8\nf 1 0\n")
	events, err := trace.ReadComplete(strings.NewReader(sb.String()))
	require.NoError(t, err)
	pg, err := tracePage(events, "arena", newProgress(&bytes.Buffer{}))
	require.NoError(t, err)
	require.Equal(t, "trace", pg.ManagedFrom, "the managed bytes come from the trace's segments")
	assert.Equal(t, trace.Summarize(events).PeakSegmentBytes, pg.PeakManaged.Bytes, "viz's peak managed, against Summarize's PeakSegmentBytes")
	for i := 1; i < len(pg.Managed); i += 2 {
		assert.GreaterOrEqual(t, pg.Managed[i], int64(0), "managed bytes at moment %d", pg.Managed[i-1])
	}
}
