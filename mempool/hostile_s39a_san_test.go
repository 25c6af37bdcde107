package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fixed this session (it failed before): a sanitized pool of exact bins refuses, under a limit lowered
// below its block, a request that a block it holds (in quarantine)
// serves, and serves the same request when it is made again. The limit's
// refusal at once (core.decide's never branch) looks for a free block in
// the policy, and drains only the queue caches (a sanitized pool has
// none), not the quarantine; outOfMemory then drains the quarantine to
// count it, so the OutOfMemoryError says "1 block held (3327 bytes) ...
// largest held: bin 185, 3327 bytes" for a request "allocating 3327",
// and the next Allocate(3000) takes that block. An unsanitized pool
// serves the first request (the free block fits: GetAnyOn).
//
// Contracts: package doc, Limits: "A request whose own block could not
// fit even in an empty pool fails at once and keeps what the pool holds,
// once the queue caches are drained and no free block fits it"; Out of
// memory: "From the first refusal on, every retry takes any free block
// that fits"; the sanitizer counts "its quarantine as held", and the
// device's ladder (FreeHeld, the rung that frees) does drain it. The
// error contradicts itself: LargestHeldSize is "blocks the ladder could
// not free" and equals the AllocSize it could not serve.
//
// Cause (guess): mempool/core.go, core.decide: the never branch drains
// only if req.mayDrain, which mempool/ladder.go, Pool.serve, sets from
// the queue caches alone (cacheState != cachesGone); a sanitized pool's
// quarantine (drain's san.drain) is never emptied there before the
// refusal.
func TestHostileS39aSanitizedLimitRefusalSkipsTheQuarantine(t *testing.T) {
	f := newSanFixture(t)
	b, err := f.pool.Allocate(3000)
	require.NoError(t, err)
	require.NoError(t, f.pool.SetLimit(1)) // nothing held to free: the block is in use
	require.NoError(t, b.Close())          // quarantined: held
	require.Equal(t, 1, f.pool.Stats().HeldBlocks)

	b, err = f.pool.Allocate(3000)
	if err != nil {
		var oom *mempool.OutOfMemoryError
		if assert.ErrorAs(t, err, &oom) {
			assert.Less(t, oom.LargestHeldSize, oom.AllocSize, "the error's largest held block is smaller than the block it could not serve")
		}
		// The same request, with nothing else done, is served now.
		b2, err2 := f.pool.Allocate(3000)
		if err2 == nil {
			t.Logf("the same request, made again at once, was served")
			require.NoError(t, b2.Close())
		}
	}
	require.NoError(t, err, "a held block of the request's bin serves it, as in an unsanitized pool")
	require.NoError(t, b.Close())
	require.NoError(t, f.pool.SetLimit(0))
	assert.Empty(t, f.pool.Findings())
}

// The same sequence in an unsanitized pool of exact bins: the
// held block serves the request under the lowered limit (the reference
// for the test above).
func TestHostileS39aLimitRefusalTakesTheHeldBlock(t *testing.T) {
	f := newFixture(t, nil)
	b, err := f.pool.Allocate(3000)
	require.NoError(t, err)
	require.NoError(t, f.pool.SetLimit(1))
	require.NoError(t, b.Close())
	b, err = f.pool.Allocate(3000)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.NoError(t, f.pool.SetLimit(0))
}
