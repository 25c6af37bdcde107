package mempool_test

// Hostile review s40c: a request waiting on the ladder's last rung for
// another request's segment in flight is woken by nothing else: not by a
// block closed that serves it, nor by SetLimit making room for it.

import (
	"fmt"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
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
				size := int64(1 << 20) // the arena's segment for it: its own (no kernel runs on it: Oclgrind too)
				block := binSize(size)
				var opts []mempool.Option
				if arena {
					block = size // a segment of the request's size, under the limit
					opts = append(opts, mempool.WithArena())
				}
				g := newGated()
				f := newCappedFixture(t, "limit", 2*block, func(a allocator.Allocator) allocator.Allocator { g.Allocator = a; return g }, opts...)
				mempool.SetInFlightWait(f.pool, time.Minute) // only the room made ends W's wait
				a, err := f.pool.Allocate(size)
				require.NoError(t, err)
				open := g.hold()
				defer func() {
					if open != nil {
						open()
					}
				}()
				r := heldInAllocator(t, f.pool, g, size)
				w := downToLastRung(f.pool, size)
				if w.returned(0) {
					t.Skipf("W returned before the room was made (%v): nothing to test", w.err)
				}
				if by == "close" {
					require.NoError(t, a.Close())
					a = nil
				} else {
					require.NoError(t, f.pool.SetLimit(4*block))
				}
				moved := false
				select {
				case <-w.done:
				case <-g.entered: // room under the limit: W allocates a segment of its own (the gate holds it)
					moved = by == "setlimit"
				case <-time.After(hangLimit):
				}
				assert.True(t, w.returned(0) || moved, "W still waits for R's allocation, %s made room for it", by)
				open()
				open = nil
				rb, rErr := r.result(t, "R")
				require.NoError(t, rErr)
				wb, wErr := w.result(t, "W")
				if wErr != nil {
					assert.ErrorIs(t, wErr, mempool.ErrOutOfMemory)
				} else {
					require.NoError(t, wb.Close())
				}
				require.NoError(t, rb.Close())
				if a != nil {
					require.NoError(t, a.Close())
				}
			})
		}
	}
}
