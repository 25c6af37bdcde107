package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A small arena's queue that loops over a few sizes, each closed before
// the next is asked for (a loop's scratch), should hit in its cache for
// every size the cache holds (at most an 8 KiB share here), as the
// two-size loop of review s37c does, and take the pool's lock only for
// the others (larger than the share: never cached) and at flushes.
// 910be71 (a small arena's cache kept at a miss) did. Review s37d: at
// 39edc11 a miss gave back every block put before the miss before it, so
// a block waited for at most two misses: with three cached sizes in the
// loop, each miss gave back the block asked for two requests later, whose
// miss gave back the next one, and every request took p.mu (900 locks
// over 900 requests; 910be71: 14); and two requests too large for the
// cache in a row gave back the whole working set (1800 locks over 1200
// requests; 910be71: 1200, two for each request too large: its Allocate
// and its Close). A block is now stale after four requests of its queue
// (staleRequests), which a loop of up to five sizes does not reach.
func TestHostileS37dSmallArenaLoopStillHits(t *testing.T) {
	for _, c := range []struct {
		name     string
		sizes    []int64
		uncached int // sizes over the share, which take p.mu at Allocate and Close
	}{
		{"two cached sizes (s37c)", []int64{2 << 10, 4 << 10}, 0},
		{"three cached sizes", []int64{1 << 10, 2 << 10, 3 << 10}, 0},
		{"four cached sizes", []int64{1 << 10, 2 << 10, 3 << 10, 1536}, 0},
		{"two cached, two over the share", []int64{1 << 10, 2 << 10, 16 << 10, 64 << 10}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, nil, mempool.WithArena())
			warm, err := f.pool.Allocate(1 << 20) // one small segment: an 8 KiB share
			require.NoError(t, err)
			require.NoError(t, warm.Close())
			s := f.pool.Stats()
			require.Less(t, s.ManagedBytes, int64(4<<20))
			var sum int64
			for _, n := range c.sizes[:len(c.sizes)-c.uncached] {
				sum += n
			}
			require.GreaterOrEqual(t, s.ManagedBytes/mempool.CacheShare, sum, "the cache holds the cached sizes at once")
			for _, n := range c.sizes[len(c.sizes)-c.uncached:] {
				require.Greater(t, n, s.ManagedBytes/mempool.CacheShare, "over the share: never cached")
			}
			loop := func() {
				for _, n := range c.sizes {
					b, err := f.pool.Allocate(n)
					require.NoError(t, err)
					require.NoError(t, b.Close())
				}
			}
			loop()
			loop()
			locks := mempool.CountLocks(f.pool)
			const rounds = 300
			for range rounds {
				loop()
			}
			n := locks.Load()
			t.Logf("p.mu taken %d times over %d requests (%d too large for the cache); cached now %d",
				n, len(c.sizes)*rounds, c.uncached*rounds, f.pool.Stats().Queues[0].Cached)
			assert.Less(t, n, int64(2*c.uncached*rounds+rounds/2), "the sizes the cache holds take the pool's lock at flushes only")
			require.NoError(t, mempool.CheckBlockCounts(f.pool))
		})
	}
}
