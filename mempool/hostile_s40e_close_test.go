package mempool_test

// Hostile review s40e: Close while a request waits on the ladder's last
// rung for another request's segment in flight.

import (
	"fmt"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A pool capped (WithLimit) at two blocks; block A active; request R,
// the other block's room, is allocating its segment (gated: slow); request
// W, refused by the limit, waits on the last rung for R's segment. The
// user closes the pool. Close "refuses further Allocates with
// ErrPoolClosed" and "a closed pool refuses every request alike"
// (errors.go): W, which has not been served, should return ErrPoolClosed
// when the pool closes. Instead Close wakes nothing: W sleeps out its
// half second, finds nothing changed, and fails with an
// *OutOfMemoryError ("over the pool's limit") counted in the closed
// pool's OOMs; a caller that tells a closed pool from a full one (retry
// later, or give up) takes the wrong branch.
//
// Doc: pool.go Close; errors.go refuseSize ("a closed pool refuses every
// request alike"); doc.go step 7. Cause (guess): Close (pool.go:210-231)
// sets lifeClosed and frees nothing when nothing is held, so nothing
// broadcasts p.freed; awaitInFlight (inflight.go:42) does not look at
// p.life, and rungFinal (ladder.go:250-271) ends in outOfMemory without
// a decide that would see lifeClosed.
func TestS40eCloseWhileWaitingGivesOutOfMemory(t *testing.T) {
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			size := int64(1 << 20)
			block := binSize(size)
			var opts []mempool.Option
			if arena {
				block = size
				opts = append(opts, mempool.WithArena())
			}
			g := newGated()
			f := newCappedFixture(t, "limit", 2*block, func(a allocator.Allocator) allocator.Allocator { g.Allocator = a; return g }, opts...)
			mempool.SetInFlightWait(f.pool, time.Minute) // only what the test does ends W's wait
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
				t.Skipf("W returned before Close (%v): nothing to test", w.err)
			}
			oomsBefore := f.pool.Stats().OOMs
			require.NoError(t, f.pool.Close())
			wb, wErr := w.result(t, "W, after Close")
			open()
			open = nil
			rb, rErr := r.result(t, "R")
			require.NoError(t, rErr)
			if wErr == nil {
				require.NoError(t, wb.Close())
			}
			assert.ErrorIs(t, wErr, mempool.ErrPoolClosed, "W, unserved when the pool closed")
			assert.Equal(t, oomsBefore, f.pool.Stats().OOMs, "OOMs of a closed pool")
			require.NoError(t, rb.Close())
			require.NoError(t, a.Close())
		})
	}
}
