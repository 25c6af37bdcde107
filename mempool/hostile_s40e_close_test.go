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
			a, err := f.pool.Allocate(size)
			require.NoError(t, err)
			open := g.hold()
			defer func() {
				if open != nil {
					open()
				}
			}()
			rDone := make(chan error, 1)
			var r *mempool.PooledBuffer
			go func() {
				var err error
				r, err = f.pool.Allocate(size)
				rDone <- err
			}()
			select {
			case <-g.entered:
			case <-time.After(hangLimit):
				t.Fatal("R never reached the allocator")
			}
			misses := f.pool.Stats().Misses
			wDone := make(chan error, 1)
			var w *mempool.PooledBuffer
			go func() {
				var err error
				w, err = f.pool.Allocate(size)
				wDone <- err
			}()
			for deadline := time.Now().Add(hangLimit); f.pool.Stats().Misses == misses && time.Now().Before(deadline); {
				time.Sleep(2 * time.Millisecond)
			}
			time.Sleep(50 * time.Millisecond) // down the ladder to its wait
			select {
			case err := <-wDone:
				t.Skipf("W returned before Close (%v): nothing to test", err)
			default:
			}
			oomsBefore := f.pool.Stats().OOMs
			require.NoError(t, f.pool.Close())
			var wErr error
			select {
			case wErr = <-wDone:
			case <-time.After(hangLimit):
				t.Fatal("W never returned after Close")
			}
			open()
			open = nil
			require.NoError(t, <-rDone)
			if wErr == nil {
				require.NoError(t, w.Close())
			}
			assert.ErrorIs(t, wErr, mempool.ErrPoolClosed, "W, unserved when the pool closed")
			assert.Equal(t, oomsBefore, f.pool.Stats().OOMs, "OOMs of a closed pool")
			require.NoError(t, r.Close())
			require.NoError(t, a.Close())
		})
	}
}
