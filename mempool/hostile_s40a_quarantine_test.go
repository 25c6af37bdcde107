package mempool_test

// Hostile review s40a: a sanitized pool under a limit refuses a request
// while the blocks that would serve it wait in the quarantine, because
// another request is taking them out of it at that moment.

import (
	"fmt"
	"sync"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A sanitized pool capped at two blocks (WithLimit), both closed and in
// the quarantine (held: the pool is idle). Two goroutines, each on its own
// queue, then ask for one block each at the same moment: the two fit the
// limit exactly, and both blocks are held. One request drains the
// quarantine (leaveQuarantine marks both blocks leaving, checks their
// poison, then gives them to the policy); the other, refused by the limit
// meanwhile, finds the quarantine empty (its blocks "leaving"), nothing
// wholly free and no free in flight, and fails: "0 blocks active ... 2
// blocks held ... over the pool's limit". Without the sanitizer (blocks in
// queue caches or the policy) the same never fails.
//
// Doc: package doc, Sanitizer ("counts ... its quarantine as held") and
// README ("the out-of-memory ladder, FreeHeld and Close take them back
// first"); Out of memory: the error comes only when nothing serves the
// request. Cause (guess): mempool/ladder.go, nextRung's rungFinal: it
// waits for frees in flight (p.l.freeing) but not for blocks in flight
// out of the quarantine (sanitize_quarantine.go, leaveQuarantine: marked
// leaving under s.mu, back in the policy only at its end), and drain's
// san.drain skips blocks already leaving, so "changed" is false.
func TestS40aSanitizedLimitRefusesWhileQuarantineDrains(t *testing.T) {
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			size := int64(cltest.Size(cltest.Queue(t), 64<<10, 1<<20)) - mempool.SanitizerGuard
			need := size + mempool.SanitizerGuard
			block := need
			if !arena {
				block = binSize(need)
			}
			f := newSanFixture(t, append(policyOptions(arena), mempool.WithLimit(2*block))...)
			q2 := cltest.SecondQueue(t, f.q, 0)
			qs := []*cl.CommandQueue{f.q, q2}
			var fails []string
			rounds := 200 // 3 to 10 of them failed before the fix, on POCL
			if testing.Short() {
				rounds = 30 // Oclgrind: about 80 ms a round
			}
			for round := range rounds {
				warm := mustAllocN(t, f.pool, 2, size)
				mustClose(t, warm...) // both in quarantine
				start := make(chan struct{})
				var wg sync.WaitGroup
				got := make([]*mempool.PooledBuffer, 2)
				errs := make([]error, 2)
				for g := range 2 {
					on := f.pool.On(qs[g])
					wg.Go(func() {
						<-start
						got[g], errs[g] = on.Allocate(size)
					})
				}
				close(start)
				if !withinWork(t, "two requests", wg.Wait) {
					return
				}
				for g := range 2 {
					if errs[g] != nil {
						fails = append(fails, fmt.Sprintf("round %d, goroutine %d: %v", round, g, errs[g]))
						continue
					}
					require.NoError(t, got[g].Close())
				}
			}
			assert.Empty(t, fails, "two blocks asked for under a limit of two, both held: %d of %d rounds failed", len(fails), rounds)
			assert.Empty(t, f.pool.Findings())
		})
	}
}

// A sanitized pool (exact bins, or an arena) capped at one block: a block closed
// (in the quarantine, held) and the same size asked for again. The held
// block of the request's bin should serve it, once the ladder takes it
// back from the quarantine (without the sanitizer, a hit). Instead the limit refuses a
// new block, the ladder drains the quarantine and, at the same rung,
// frees the largest wholly free segment: the block just drained. The
// request then gets a new device allocation: a miss, a device free and a
// device allocation per round, where the ladder's first step is "a free
// block that fits".
//
// Doc: package doc, Out of memory, step 1 ("a free block that fits, the
// queue caches drained first") and Sanitizer (the ladder takes the
// quarantine's blocks back first). Cause (guess): mempool/ladder.go,
// nextRung, rungFree: drainFor (the quarantine) and TakeLargest in one
// step, with no retry for a free block in between (rungAny, before it,
// finds nothing for exact bins: AnyFits is never true there).
func TestS40aSanitizedLimitFreesTheFittingQuarantinedBlock(t *testing.T) {
	for _, arena := range []bool{false, true} {
		for _, by := range []string{"limit", "budget"} {
			t.Run(fmt.Sprintf("arena=%v/%s", arena, by), func(t *testing.T) {
				// The arena's first segment is 512 KiB: a 300 KiB block
				// leaves a tail too small for a second one.
				size, total := int64(300<<10), int64(512<<10)
				if !arena {
					total = binSize(size + mempool.SanitizerGuard)
				}
				f := newCappedFixture(t, by, total, nil, append(policyOptions(arena),
					mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil))...)
				for range 3 {
					b, err := f.pool.Allocate(size)
					require.NoError(t, err)
					require.NoError(t, b.Close())
				}
				s := f.pool.Stats()
				assert.Equal(t, int64(1), s.DeviceAllocs, "one segment, reused")
				assert.Equal(t, int64(0), s.DeviceFrees)
				// The block waits in the quarantine, out of the policy's
				// reach, until the ladder takes it back: each request is
				// a miss (found no block that fits), served after a retry.
				assert.Equal(t, int64(3), s.Misses)
				assert.Equal(t, int64(2), s.OOMRetries, "the second and third requests served by the held block, after one retry each")
				assert.Empty(t, f.pool.Findings())
			})
		}
	}
}
