package mempool_test

// Hostile review s40c: a request waiting on the ladder's last rung for
// another request's segment in flight is woken by nothing else: not by a
// block closed that serves it, nor by SetLimit making room for it.

import (
	"fmt"
	"testing"
	"time"

	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A pool capped (WithLimit) at two blocks; block A active; request R takes
// the other block's room and is allocating its segment (slowly: the
// allocator is gated, as a device allocation that takes its time, or an
// allocator that waits for memory); request W, refused by the limit,
// goes down the ladder and waits on its last rung for R's segment. Then
// the user makes room for W: Close of A (its block, held, serves W) or
// SetLimit raising the limit. W should be served (or fail) at once, as
// it was before the change (it failed with ErrOutOfMemory at once).
// Instead it sleeps until R's allocation lands: with a gate that never
// opens (an allocator waiting for a device free that W's caller would
// do), for ever, with a free block that fits it in the pool.
//
// Doc: doc.go, Out of memory (nothing says a request waits for another's
// allocation; step 1: "a free block that fits"); Limits (SetLimit changes
// it at run time). Cause (guess): mempool/ladder.go:257-259: rungFinal
// waits on p.freed until freeBatches or settled changes; a block given
// back to the policy (release.go, takeBackThenUnlock) and SetLimit
// (limit.go:38-45, nothing to free: freeSegments(nil) returns early) change
// neither and signal nothing.
func TestS40cWaitingRequestNotWokenByRoomMadeMeanwhile(t *testing.T) {
	for _, arena := range []bool{false, true} {
		for _, by := range []string{"close", "setlimit"} {
			t.Run(fmt.Sprintf("arena=%v/%s", arena, by), func(t *testing.T) {
				s := newInFlight(t, arena, time.Minute) // only the room made ends W's wait
				w := downToLastRung(s.f.pool, s.size)
				if w.returned(0) {
					t.Skipf("W returned before the room was made (%v): nothing to test", w.err)
				}
				if by == "close" {
					require.NoError(t, s.a.Close())
					s.a = nil
				} else {
					require.NoError(t, s.f.pool.SetLimit(4*s.block))
				}
				moved := false
				select {
				case <-w.done:
				case <-s.g.entered: // room under the limit: W allocates a segment of its own (the gate holds it)
					moved = by == "setlimit"
				case <-time.After(hangLimit):
				}
				assert.True(t, w.returned(0) || moved, "W still waits for R's allocation, %s made room for it", by)
				s.finish(t, w)
				if w.err != nil {
					assert.ErrorIs(t, w.err, mempool.ErrOutOfMemory)
				}
			})
		}
	}
}
