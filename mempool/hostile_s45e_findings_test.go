package mempool_test

// Hostile review s45e: Findings racing the quarantine's drain.

import (
	"runtime"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/require"
)

// Review s45e found what these tests describe (in the present tense, as
// found); each failed before its fix in session 45.

// Findings "completes the checks of every block closed so far ... checks
// the poison of the blocks still in quarantine too, and returns every
// finding". Every block here is closed and written through a kept buffer
// (a blocking write) before Findings is called, so each call must return
// a write-after-close finding for each block. FreeHeld racing it drains
// the quarantine: drain marks every block leaving at once, and
// leaveQuarantine then enqueues their checks one by one. checkQuarantine
// skips a leaving block (its check is leaveQuarantine's), and harvest
// reads only the checks enqueued so far: a Findings in that window
// returns without the findings of the blocks whose checks are not yet
// enqueued, though they were closed, and written, before it began.
func TestHostileS45eFindingsDuringFreeHeldMissesLeavingBlocks(t *testing.T) {
	const blocks = mempool.SanitizerQuarantineBlocks
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			worst, rounds := blocks, 0
			for round := range 30 {
				rounds = round + 1
				f := newSanFixture(t, pol.opts...)
				kept := make([]*cl.Buffer, blocks)
				offs := make([]int64, blocks)
				bufs := make([]*mempool.PooledBuffer, blocks)
				for i := range bufs {
					b, err := f.pool.Allocate(1000)
					require.NoError(t, err)
					bufs[i], kept[i], offs[i] = b, b.Base(), b.Offset()
				}
				for _, b := range bufs {
					require.NoError(t, b.Close())
				}
				for i := range kept {
					require.NoError(t, f.q.WriteBuffer(kept[i], offs[i]+16, []byte{1}))
				}
				require.Equal(t, blocks, mempool.Quarantined(f.pool))

				done := make(chan error, 1)
				go func() { done <- f.pool.FreeHeld() }()
				// No Findings before the drain began: its checks would
				// report every block first. Wait for the drain to mark the
				// blocks leaving, then ask.
				for mempool.LeavingBlocks(f.pool) == 0 && mempool.Quarantined(f.pool) > 0 {
					runtime.Gosched()
				}
				n := findingKinds(f.pool.Findings())[mempool.WriteAfterClose]
				worst = min(worst, n)
				require.NoError(t, <-done)
				require.Equal(t, blocks, findingKinds(f.pool.Findings())[mempool.WriteAfterClose],
					"once FreeHeld returned")
				if worst < blocks {
					break
				}
			}
			require.Equal(t, blocks, worst,
				"a Findings called after %d blocks were closed and written after Close returned %d write-after-close findings, racing FreeHeld (round %d)",
				blocks, worst, rounds)
		})
	}
}
