package mempool_test

// Hostile review s40e: the last rung's wait is "half a second at most"
// (README, doc.go step 7), but a request in a busy pool waits once per
// round, up to finalRounds (16) times: a request that can never be served
// takes seconds to fail where it failed at once before the change.

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s40eSlow is an allocator whose allocations of size bytes take delay (a
// device allocation that takes its time, or an allocator that waits for
// memory); others pass at once.
type s40eSlow struct {
	allocator.Allocator
	size  int64
	delay time.Duration
	n     atomic.Int64 // calls of Allocate, all sizes
}

func (s *s40eSlow) Allocate(size int64) (*cl.Buffer, error) {
	s.n.Add(1)
	if size == s.size {
		time.Sleep(s.delay)
	}
	return s.Allocator.Allocate(size)
}

func (s *s40eSlow) Unwrap() allocator.Allocator { return s.Allocator }

// A pool (exact bins) capped at five units (a device Budget, or the
// pool's limit); the user holds X, three units, active. Two workers, B,
// each allocate one unit and close it, over and over (staggered): its segment
// is allocated (slowly: 800 ms, an allocator that takes its time), and
// freed after each Close (FreeHeld: the worker gives back what it
// holds). The user then asks for three units:
// they can never fit beside X. Before the change that request failed at
// once (the ladder's last rung waited only for frees in flight). Now each
// of its 16 last rounds waits for B's segment in flight, which arrives
// (a change: settled), so it retries, frees B's segment again (every
// wholly free segment goes in the final decide), is refused again, and
// B reallocates: the request takes 16 rounds, 3.5-6.5 s here, to fail (it
// failed in 30 ms before the change, 1163bfa), while
// README says the ladder waits "half a second at most" for memory on its
// way before the error, and the inFlightWait comment says "Past it, the
// request fails as if nothing were in flight". Each round also asks the
// device again (budget) and costs B a device allocation.
//
// Doc: README.md ladder paragraph ("then wait (half a second at most) for
// memory on its way ... before the error"); doc.go step 7. Cause (guess):
// mempool/ladder.go:250-272 (rungFinal): every round calls awaitInFlight
// (inflight.go:31) afresh, with a fresh 500 ms, and counts any arrival,
// useful or not (settled, freeBatches), as a change: the bound is per
// round, 16 x 500 ms in all, not per request.
func TestS40eBusyPoolRefusalTakesSecondsToFail(t *testing.T) {
	for _, by := range []string{"budget", "limit"} {
		t.Run(by, func(t *testing.T) {
			unit := int64(cltest.Size(cltest.Queue(t), 64<<10, 256<<10))
			bSize := binSize(unit)
			slow := &s40eSlow{size: bSize, delay: 800 * time.Millisecond}
			total := binSize(3*unit) + 2*bSize
			f := newCappedFixture(t, by, total, func(a allocator.Allocator) allocator.Allocator { slow.Allocator = a; return slow })
			x, err := f.pool.Allocate(3 * unit)
			require.NoError(t, err)
			var stop atomic.Bool
			var wg sync.WaitGroup
			var bErrs errSink
			for w := range 2 {
				wg.Go(func() {
					time.Sleep(time.Duration(w) * 400 * time.Millisecond) // staggered: one of them is nearly always allocating
					for !stop.Load() {
						b, err := f.pool.Allocate(unit)
						if err != nil {
							if !errors.Is(err, mempool.ErrOutOfMemory) {
								bErrs.add(err)
							}
							continue
						}
						bErrs.add(b.Close())
						bErrs.add(f.pool.FreeHeld()) // the worker gives back what it cached: its next segment is a device allocation
					}
				})
			}
			time.Sleep(1200 * time.Millisecond) // B's first segments are in
			before, calls0 := f.pool.Stats(), slow.n.Load()
			var rErr error
			var took time.Duration
			ok := withinLimit(t, "the request that can never fit", hangLimit+10*time.Second, func() {
				start := time.Now()
				var r *mempool.PooledBuffer
				r, rErr = f.pool.Allocate(3 * unit)
				took = time.Since(start)
				if rErr == nil {
					_ = r.Close()
				}
			})
			stop.Store(true)
			if !withinWork(t, "B", wg.Wait) || !ok {
				return
			}
			after := f.pool.Stats()
			t.Logf("%v", rErr)
			t.Logf("the refused request took %v: %d OOMRetries, %d device allocations asked meanwhile, B's device allocations %d",
				took, after.OOMRetries-before.OOMRetries, slow.n.Load()-calls0, after.DeviceAllocs-before.DeviceAllocs)
			require.ErrorIs(t, rErr, mempool.ErrOutOfMemory, "three units beside three under a cap of five")
			assert.Less(t, took, 1500*time.Millisecond,
				"a request that can never fit failed after %v; README: the ladder waits half a second at most for memory on its way", took)
			assert.NoError(t, bErrs.err())
			require.NoError(t, x.Close())
		})
	}
}

// A pool capped by WithLimit at two blocks; block A active; request R,
// the other block's room, is allocating its segment (gated: slow); request
// W, refused by the limit, waits on the last rung for R's segment. The
// user then removes the limit: SetLimit(0), "no limit", as the docs and
// CuPy's set_limit(size=0) mean. W should now be served: nothing caps the
// pool (SetLimit raising the limit wakes W and serves it, s40c). Instead
// W keeps waiting to the end of its half second and fails with an
// OutOfMemoryError whose reason, with no limit left and no allocator
// error, reads "over the most bytes the pool can count (math.MaxInt64)"
// for a 1 MiB request. Set.SetLimit(ctx, 0) takes the same path.
//
// Doc: limit.go SetLimit ("0 removes the limit"), doc.go Limits; doc.go
// step 7 ("or the limit has room"). Cause (guess): core.room returns -1
// for no limit (core.go:197), and both awaitInFlight's wake test
// (inflight.go:43, `limited && p.room(nil) >= need`) and rungFinal's
// `changed` (ladder.go:265, `lad.cause == nil && p.room(nil) >=
// lad.try().Size`) compare -1 with the size: no limit never counts as
// room.
func TestS40eSetLimitZeroWhileWaitingFails(t *testing.T) {
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			var fails []string
			tried := 0
			for range 5 { // a round whose W returned before SetLimit proves nothing: again
				s := newInFlight(t, arena, time.Minute) // only SetLimit ends W's wait
				w := downToLastRung(s.f.pool, s.size)
				served := false
				if !w.returned(0) {
					tried++
					require.NoError(t, s.f.pool.SetLimit(0))
					select {
					case <-w.done:
						if w.err != nil {
							fails = append(fails, w.err.Error())
						}
					case <-s.g.entered: // W allocates its segment: served, once the gate opens
						served = true
					case <-time.After(hangLimit):
						fails = append(fails, "W neither returned nor allocated")
					}
				}
				s.finish(t, w)
				if served {
					assert.NoError(t, w.err)
				}
				if tried >= 2 {
					break
				}
			}
			require.Positive(t, tried, "W never waited long enough to test")
			assert.Empty(t, fails, "the limit removed (SetLimit(0)) while W waited on the last rung: W failed")
		})
	}
}
