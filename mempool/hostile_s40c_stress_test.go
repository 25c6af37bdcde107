package mempool_test

// Hostile review s40c: goroutines on several queues (in order and out of
// order) under a limit that holds all their blocks at once, bins and
// arena, sanitizer on and off, a device Budget among them: no request may
// fail, none may hang, and the device's allocations match the pool's
// counts.

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

// Four goroutines, each on its own queue (two in order, one out of
// order, the pool's own), allocate one block each, of one size or twice
// that in turn (the blocks held of the other size must be freed to make
// room), and close it, 100 times, under a limit of four blocks of the
// larger size (the pool's limit or a device Budget): all four always fit
// at once. Every request must be
// served, in time; the pool's DeviceAllocs and DeviceFrees must match the
// device's (allocator.Counting). Ten pools in a row, as a failure is a
// race.
//
// Found (s40c): san=true/arena=true/budget fails under load (a busy
// machine: one pool in ten to thirty; none in a quiet run), with "0 blocks active ..., 8 blocks held ...: clCreateBuffer:
// ... allocator.Budget: 524800 bytes would exceed the budget": out of
// memory with nothing in use. A build of the change that reports why
// rungFinal gives up says "finalRounds exhausted" each time: under a
// device refusal each round counts the request's own unreserve as a
// change (see TestS40cDeviceRefusalRetriedWithNothingChanged), so the 16
// rounds go by without waiting for anything, while the other goroutines'
// blocks cycle through the quarantine (held, not wholly free at the
// final decide). Before the change the sanitized cases failed too (limit
// and budget, more often).
func TestS40cFourQueuesWithinLimitNeverFail(t *testing.T) {
	for _, san := range []bool{false, true} {
		for _, arena := range []bool{false, true} {
			for _, by := range []string{"limit", "budget"} {
				t.Run(fmt.Sprintf("san=%v/arena=%v/%s", san, arena, by), func(t *testing.T) {
					q := cltest.Queue(t)
					size := int64(cltest.Size(q, 16<<10, 256<<10))
					need := size
					if san {
						need += mempool.SanitizerGuard
					}
					block := binSize(2 * need)
					opts := policyOptions(arena)
					if arena {
						block = (2*need + 4095) &^ 4095
					}
					if san {
						opts = append(opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil))
					}
					pools, rounds := 10, 100
					if testing.Short() { // Oclgrind: a sanitized pool's check kernels take 20 s a case
						pools, rounds = 2, 30
						if san && arena {
							// Blocks of 16 and 32 KiB: the arena's first segment
							// (128 KiB) leaves 16 KiB of the limit, less than a
							// block, and holds three of the larger ones, not four.
							t.Skip("four blocks of the larger size fit the limit, not the arena's segments, at these sizes")
						}
					}
					// san && arena: seen once in CI (614c02d..9158855), all memory
					// free after the error's drain, the request having lost its
					// 16 rounds to the other goroutines' Closes refilling the
					// quarantine, which counts against the limit; skipped until
					// session 42. Since then the quarantine lets blocks through
					// while a request is on the ladder (s42a), and the last
					// rung waits again when a Close ends its wait with memory
					// still on its way: 60 runs of the four sanitized cases
					// beside a CPU hog passed (the bins cases failed 1 in 15
					// before, the arena's 2 in about 165 between the fixes).
					total := 4 * block
					if arena {
						// An arena's segments mix the two sizes: three blocks
						// in use can pin free pieces none of which holds the
						// fourth (3 active, 4 held pieces of 338 KiB, a 524 KiB
						// request, under a budget of four: a busy machine's
						// run). Two blocks of slack keep the test to hangs,
						// counts and the ladder's waits.
						total += 2 * block
					}
					for range pools {
						f := newCappedFixture(t, by, total, nil, opts...)
						qs := []*cl.CommandQueue{f.q, cltest.SecondQueue(t, f.q, 0), cltest.SecondQueue(t, f.q, cl.QueueOutOfOrder), nil}
						var sink errSink
						var wg sync.WaitGroup
						for g := range 4 {
							wg.Go(func() {
								for i := range rounds {
									n := size << ((i + g) % 2)
									var b *mempool.PooledBuffer
									var err error
									if qs[g] == nil {
										b, err = f.pool.Allocate(n)
									} else {
										b, err = f.pool.On(qs[g]).Allocate(n)
									}
									if err != nil {
										sink.add(fmt.Errorf("goroutine %d, request %d: %w", g, i, err))
										continue
									}
									sink.add(b.Close())
								}
							})
						}
						if !withinWork(t, "four goroutines under the limit", wg.Wait) {
							return
						}
						assert.NoError(t, sink.err())
						s, c := f.pool.Stats(), f.count.Stats()
						assert.Equal(t, c.Allocs, s.DeviceAllocs, "device allocations")
						assert.Equal(t, c.Frees, s.DeviceFrees, "device frees")
						assert.Empty(t, f.pool.Findings())
						require.NoError(t, f.pool.FreeHeld())
						if t.Failed() {
							return
						}
					}
				})
			}
		}
	}
}
