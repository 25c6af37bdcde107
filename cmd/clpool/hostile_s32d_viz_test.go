package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FAILED on 7bb0ffd: the replayed pool's analogue of s32c's segment fix.
// A trace with no segment events has its managed bytes from the pool viz
// replays it through (over nothing{}), which serves requests up to 2^60
// bytes. Nine blocks of 2^60 bytes took the pool's managed bytes past
// 2^63: its int64 ledger (Stats.ManagedBytes, ReservedBytes) wrapped, and
// the page's managed series went negative. The pool now refuses the
// request that would pass math.MaxInt64 managed bytes (an out-of-memory
// error), so viz names the event it cannot replay; what it replayed
// before that never wraps.
func TestHostileS32dVizReplayedManagedWraps(t *testing.T) {
	for _, policy := range []string{"bins", "arena"} {
		t.Run(policy, func(t *testing.T) {
			var sb strings.Builder
			for id := 1; id <= 9; id++ {
				fmt.Fprintf(&sb, "a %d %d\n", id, int64(1)<<60)
			}
			for id := 1; id <= 9; id++ {
				fmt.Fprintf(&sb, "f %d 0\n", id)
			}
			events, err := trace.ReadComplete(strings.NewReader(sb.String()))
			require.NoError(t, err)
			pg, err := tracePage(events, policy, newProgress(&bytes.Buffer{}))
			if err != nil {
				require.ErrorContains(t, err, "replaying event 8", "the first request that would pass 2^63 managed bytes")
				require.ErrorIs(t, err, mempool.ErrOutOfMemory)
				return
			}
			require.Equal(t, "replay", pg.ManagedFrom)
			for i := 1; i < len(pg.Managed); i += 2 {
				assert.GreaterOrEqual(t, pg.Managed[i], int64(0), "managed bytes at moment %d", pg.Managed[i-1])
			}
			assert.GreaterOrEqual(t, pg.PeakManaged.Bytes, trace.Summarize(events).PeakLiveBytes, "the replayed pool's peak managed, against the trace's peak live bytes")
			assert.GreaterOrEqual(t, pg.Map.ManagedBytes, int64(0), "the map's managed bytes")
			assert.GreaterOrEqual(t, pg.Map.ActiveBytes, int64(0), "the map's active bytes")
			t.Logf("peak managed %+v, map managed %d active %d", pg.PeakManaged, pg.Map.ManagedBytes, pg.Map.ActiveBytes)
		})
	}
}
