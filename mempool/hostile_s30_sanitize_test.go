package mempool_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHostileS30SanitizerStopHoldingReturnsFreeErrors: the package doc
// says "FreeHeld, StopHolding and Close return the allocator's errors,
// joined" (TestFreeErrorsAreReturned checks it without the sanitizer).
// With the sanitizer, StopHolding first sets the pool stopped, then
// FreeHeld's drainCaches gives the quarantine back through
// leaveQuarantine, whose putFree, the pool being stopped, frees every
// wholly free segment at once; drainCaches (qcache.go) drops the error
// (`_ = p.leaveQuarantine(bs)`), and takeFree finds nothing left to free.
// Expected: errFree. Observed: nil (Stats still counts the FreeErrors).
func TestHostileS30SanitizerStopHoldingReturnsFreeErrors(t *testing.T) {
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			f := newFixture(t, func(a allocator.Allocator) allocator.Allocator { return failingFree{a} },
				append(pol.opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil))...)
			for _, n := range []int64{100, 1000} {
				b, err := f.pool.Allocate(n)
				require.NoError(t, err)
				require.NoError(t, b.Close())
			}
			err := f.pool.StopHolding()
			s := f.pool.Stats()
			assert.Zero(t, s.HeldBlocks)
			assert.Positive(t, s.FreeErrors, "the frees failed, and Stats knows it")
			assert.ErrorIs(t, err, errFree, "StopHolding returns the allocator's errors")
		})
	}
}

// TestHostileS30SanitizerHoldsAfterStopHolding: StopHolding's doc: "frees
// every held segment, and from now on frees segments as they become
// wholly free instead of holding them". A sanitized pool still puts each
// closed block in its quarantine (enter does not look at the pool's
// life), so after StopHolding and the Close of every block the pool holds
// memory, and Stats says Holding=false next to HeldBlocks > 0. The
// sanitizer doc says closed blocks wait in quarantine "before they are
// reused", and a stopped pool never reuses them; nothing says StopHolding
// stops working. Expected: nothing managed once every block is closed, as
// without the sanitizer. Observed: the closed block's segment is held
// (bins: 1 block; arena: 2 blocks, 512 KiB).
func TestHostileS30SanitizerHoldsAfterStopHolding(t *testing.T) {
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			f := newSanFixture(t, pol.opts...)
			require.NoError(t, f.pool.StopHolding())
			b, err := f.pool.Allocate(5000)
			require.NoError(t, err)
			require.NoError(t, b.Close())
			s := f.pool.Stats()
			require.False(t, s.Holding)
			assert.Zero(t, s.HeldBlocks, "a pool that stopped holding holds nothing")
			assert.Zero(t, s.ManagedBytes, "the closed block's segment is freed")
		})
	}
}

// TestHostileS30SanitizerLeakedAtCloseMissesBlocksServedDuringClose:
// Pool.Close's doc: "With the sanitizer, it first records a LeakedAtClose
// finding for each block still open"; LeakedAtClose "is a block still
// open when its pool was closed". poolClosing (sanitize_quarantine.go)
// snapshots s.live at its start, then drains and checks the quarantine
// and harvests, all while the pool still serves Allocate (p.life becomes
// lifeClosed only after poolClosing returns, pool.go). Every block handed
// out in that window is open when Close returns, yet no finding names
// it. Here one goroutine allocates (and keeps) blocks until Allocate
// says ErrPoolClosed while the test closes the pool: expected, a
// LeakedAtClose finding for every block it holds; observed, roughly half
// of them (the ones served during poolClosing) have none.
func TestHostileS30SanitizerLeakedAtCloseMissesBlocksServedDuringClose(t *testing.T) {
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			f := newSanFixture(t, pol.opts...)
			// A full quarantine: poolClosing has checks to make.
			for range mempool.SanitizerQuarantineBlocks {
				b, err := f.pool.Allocate(1 << 16)
				require.NoError(t, err)
				require.NoError(t, b.Close())
			}
			var open []*mempool.PooledBuffer
			var wg sync.WaitGroup
			started := make(chan struct{})
			wg.Go(func() {
				close(started)
				for {
					b, err := f.pool.Allocate(64)
					if err != nil {
						assert.True(t, errors.Is(err, mempool.ErrPoolClosed), "%v", err)
						return
					}
					open = append(open, b)
				}
			})
			<-started
			require.NoError(t, f.pool.Close())
			wg.Wait()
			defer func() {
				for _, b := range open {
					require.NoError(t, b.Close())
				}
			}()
			leaked := map[uint64]bool{}
			for _, fd := range f.pool.Findings() {
				if fd.Kind == mempool.LeakedAtClose {
					leaked[fd.BlockID] = true
				}
			}
			missing := 0
			for _, b := range open {
				if !leaked[b.ID()] {
					missing++
				}
			}
			assert.Zero(t, missing, "of %d blocks open when Close returned, %d have no LeakedAtClose finding", len(open), missing)
		})
	}
}

// TestHostileS30SanitizeEnvAcceptsValuesTheDocRefuses: SanitizeEnv's doc:
// `"1" (or "true") turns it on, "0", "false" or empty leaves it off; any
// other value makes New fail` (and the error says "want 1 or 0").
// resolveSanitizer parses with strconv.ParseBool, which also takes "t",
// "T", "TRUE", "True", "f", "F", "FALSE", "False": New accepts them and
// silently turns the sanitizer on or off. Expected: New fails for each.
func TestHostileS30SanitizeEnvAcceptsValuesTheDocRefuses(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, 0)
	require.NoError(t, err)
	for _, v := range []string{"t", "T", "TRUE", "True", "f", "F", "FALSE", "False"} {
		t.Run(v, func(t *testing.T) {
			t.Setenv(mempool.SanitizeEnv, v)
			p, err := mempool.New(imm, mempool.WithSanitizerOutput(nil))
			if err == nil {
				// On or off? A sanitized pool's block has guard bytes past
				// the request (exact bins: a larger bin).
				b, aerr := p.Allocate(1024)
				require.NoError(t, aerr)
				on := b.Base().Size() >= 1024+mempool.SanitizerGuard
				require.NoError(t, b.Close())
				require.NoError(t, p.Close())
				t.Errorf("%s=%q: New succeeded (sanitizer on: %v); the doc says any value but 1, true, 0, false and empty makes New fail", mempool.SanitizeEnv, v, on)
			}
		})
	}
}
