package mempool_test

// Review s42a: a sanitized pool's quarantine, counted held, against a
// request on the out-of-memory ladder (s40c's starvation: the other
// requests' Closes refilled it while the ladder's rounds went by).

import (
	"testing"
	"time"

	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A block closed while a request is on the ladder (here: refused by the
// device once, its retry, after the ladder freed C's wholly free segment,
// held in the allocator) passes through the quarantine to the policy at
// once, its poison checked; one closed once no request is on the ladder
// waits in the quarantine as before. Before the fix, A's block stayed in
// the quarantine, where a request on the ladder's last rung cannot take
// it until its next drain: s40c's four goroutines under a tight limit
// failed one run in fifteen, "0 blocks active, 5 blocks held". Exact
// bins: an arena would serve W from A's or C's segment (the quarantine is
// the same for both).
func TestS42aQuarantineLetsBlocksThroughWhileRequestOnLadder(t *testing.T) {
	s := newS42bOnLadder(t) // A open, W on the ladder, held in the allocator
	require.NoError(t, s.a.Close())
	assert.Equal(t, 0, mempool.Quarantined(s.f.pool), "A's block, closed while W is on the ladder, in the quarantine")
	s.open()
	wb, err := s.w.result(t, "W")
	require.NoError(t, err)
	require.NoError(t, wb.Close())
	assert.Equal(t, 1, mempool.Quarantined(s.f.pool), "W's block, closed once no request is on the ladder, in the quarantine")
	assert.Empty(t, s.f.pool.Findings())
	require.NoError(t, s.f.pool.FreeHeld())
	assert.Equal(t, 0, mempool.Quarantined(s.f.pool))
}

// A request on the ladder's last rung whose wait a Close ends (the block
// given back fits nothing, frees no segment) while memory is still on
// its way (here R's segment, held in the allocator) waits again instead
// of failing. Before the fix it failed with the whole limit on its way:
// s40c's sanitized arena, "unchanged at round 0" with six blocks leaving
// the quarantine, the other goroutines' Closes having ended its wait.
func TestS42aLastRungWaitsAgainWhileMemoryIsOnItsWay(t *testing.T) {
	s := newS42cScene(t, hangLimit/2) // W's waits end by memory, not the time
	w := downToLastRung(s.f, s.big)   // the limit has no room for it while R is on its way
	require.False(t, w.returned(0), "W returned before X's Close: %v", w.err)

	require.NoError(t, s.x.Close()) // ends W's wait; X's piece fits nothing
	assert.False(t, w.returned(200*time.Millisecond), "W gave up while R's segment was on its way: %v", w.err)

	s.open()
	rb, err := s.r.result(t, "R")
	require.NoError(t, err)
	require.NoError(t, rb.Close())
	if wb, err := w.result(t, "W"); err == nil {
		require.NoError(t, wb.Close())
	}
	require.NoError(t, s.a.Close())
}
