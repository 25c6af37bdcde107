package mempool_test

// Hostile review s40e: Close while a request waits on the ladder's last
// rung for another request's segment in flight.

import (
	"fmt"
	"testing"
	"time"

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
			s := newInFlight(t, arena, time.Minute) // only the Close ends W's wait
			w := downToLastRung(s.f.pool, s.size)
			if w.returned(0) {
				t.Skipf("W returned before Close (%v): nothing to test", w.err)
			}
			oomsBefore := s.f.pool.Stats().OOMs
			require.NoError(t, s.f.pool.Close())
			_, wErr := w.result(t, "W, after Close")
			assert.ErrorIs(t, wErr, mempool.ErrPoolClosed, "W, unserved when the pool closed")
			assert.Equal(t, oomsBefore, s.f.pool.Stats().OOMs, "OOMs of a closed pool")
			s.finish(t, w)
		})
	}
}
