package mempool_test

import (
	"testing"
	"time"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fixed this session (it failed before): the sanitizer's quarantine is never given back on the ladder's
// path where no new segment could fit under the limit.
//
// Contract (README, "Finding memory bugs"): "closed blocks wait in the
// quarantine (the out-of-memory ladder, FreeHeld and Close take them back
// first)"; doc.go: a sanitized pool "counts ... its quarantine as held".
// SetLimit: "memory in use stays, and later requests fail until enough of
// it is given back".
//
// A block allocated, then a limit set below it (nothing to free: it is in
// use), then the block closed: the same request again is served by that
// held block in a plain pool (a hit). In a sanitized pool the block sits
// in the quarantine; the request's own segment is over the limit, so
// core.decide takes its "no segment fits under the limit" path (never),
// which drains only if req.mayDrain, and serve (ladder.go) sets mayDrain
// false whenever p.cacheState is cachesGone, which it always is with the
// sanitizer (resolveSanitizer sets noCaches). serve then returns
// outOfMemory at once, with no rung of the ladder, and outOfMemory drains
// the quarantine only after deciding to fail (errors.go: "p.drainCaches()
// // the figures count..."): the very same request then succeeds.
func TestHostileS39cQuarantineNotDrainedWhenNoSegmentFitsLimit(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	for _, pol := range sanPolicies {
		for _, san := range []bool{false, true} {
			name := pol.name + "/plain"
			if san {
				name = pol.name + "/sanitized"
			}
			t.Run(name, func(t *testing.T) {
				opts := append([]mempool.Option{}, pol.opts...)
				if san {
					opts = append(opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil))
				} else {
					opts = append(opts, mempool.WithoutSanitizer())
				}
				f := newFixture(t, nil, opts...)
				const n = 3 << 20
				a, err := f.pool.Allocate(n)
				require.NoError(t, err)
				managed := f.pool.Stats().ManagedBytes
				// A limit below what the block's segment takes, and below
				// any segment a request of n could get: nothing held to
				// free, the block stays.
				require.NoError(t, f.pool.SetLimit(n-1))
				require.Equal(t, managed, f.pool.Stats().ManagedBytes)
				require.NoError(t, a.Close())
				st := f.pool.Stats()
				assert.GreaterOrEqual(t, st.HeldBytes, int64(n), "the closed block is held (quarantined or free)")

				b, err := f.pool.Allocate(n)
				if assert.NoError(t, err, "a held block of the request's size serves it: the ladder takes the quarantine back first") {
					require.NoError(t, b.Close())
					return
				}
				// The failed request's error path (outOfMemory) drains the
				// quarantine only after deciding to fail: the same request
				// now succeeds.
				b, err = f.pool.Allocate(n)
				if assert.NoError(t, err, "after the refusal drained the quarantine, the same request is served") {
					require.NoError(t, b.Close())
				}
				assert.Empty(t, f.pool.Findings())
			})
		}
	}
}
