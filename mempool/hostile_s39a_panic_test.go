package mempool_test

import (
	"fmt"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fixed this session (it failed before): a panic while an Allocate frees held memory is dropped, and the
// Allocate succeeds. Under a device budget that has room for one block, a
// request of another bin goes down the out-of-memory ladder, which frees
// the held block (rung 5, "wholly free segments ... freed one at a time")
// and retries. If the allocator's Free panics there, or a segment_free
// hook does, the pool recovers the panic and throws it away: the request
// is served, and no method ever returns the panic.
//
// Contracts: package doc, Misuse: "A hook or an allocator that panics does
// not break the pool: it recovers the panic, finishes what it was doing
// ..., and returns a *PanicError (matching ErrPanicked) from the method
// that called it. An Allocate whose hook panicked fails, and its block
// goes back to the pool"; Hook: "A hook that panics makes the pool's
// method return a *PanicError (ErrPanicked) once the pool has put its
// accounts in order: an Allocate fails and its block goes back to the
// pool". (FreeHeld, which calls the same freeSegments, does return it:
// TestPanickingFreeOrphansNothing, TestPanickingSegmentFreeHook.)
//
// Cause (guess): mempool/ladder.go, Pool.nextRung (rungKept, rungFree:
// `_ = p.freeSegments(...)`) and Pool.serve (`_ = p.freeSegments(d.free)`,
// the segments BeforeGrow and the final rung give up) discard
// freeSegments' error, which carries the *PanicError of freeSegment and
// segmentFreed.
func TestHostileS39aPanicFreeingInTheLadderIsLost(t *testing.T) {
	for _, who := range []string{"allocator's Free", "segment_free hook"} {
		for _, arena := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/arena=%v", who, arena), func(t *testing.T) {
				var pa *panicky
				size := int64(100 << 10)
				if arena {
					size = 400 << 10 // in the first, 512 KiB, segment
				}
				f := newFixture(t, func(a allocator.Allocator) allocator.Allocator {
					// The budget has room for the held block, or for the
					// request, not for both.
					pa = &panicky{Allocator: allocator.NewBudget(a, 640<<10)}
					return pa
				}, policyOptions(arena)...)
				held, err := f.pool.Allocate(size)
				require.NoError(t, err)
				require.NoError(t, held.Close())
				before := f.pool.Stats()
				require.Equal(t, int64(1), before.DeviceAllocs)

				switch who {
				case "allocator's Free":
					pa.freePanics.Store(1)
				default:
					h := &panicOnce{kind: mempool.SegmentFree}
					defer f.pool.AddHook(h)()
				}
				// Larger than the budget leaves beside the held segment:
				// the device (budget) refuses, and the ladder frees the
				// held segment to make room.
				b, err := f.pool.Allocate(600 << 10)
				s := f.pool.Stats()
				if b != nil {
					require.NoError(t, b.Close())
				}
				require.Equal(t, before.DeviceFrees+1, s.DeviceFrees, "the ladder freed the held segment")
				assert.ErrorIs(t, err, mempool.ErrPanicked, "the panic while freeing comes back from the Allocate that freed (doc.go, Misuse)")
			})
		}
	}
}
