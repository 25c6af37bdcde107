package mempool_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
)

// FAILS on 0001afb: expected RequestedBytes.All.Peak 65536, got 65792.
// One goroutine (the worker) on queues A, B and C; another reads Stats.
// The worker closes its 256-byte buffer on A (a put, in A's cache's turn),
// then takes a 64 KiB block on B and gives it back, then a round trip on
// C, then a hit on B that begins B's 9th turn: it never had the 256 bytes
// and the 64 KiB asked for at once. Stats, meanwhile, has locked the
// caches up to A's (lockCaches, qcache.go:351-353) and waits for B's,
// which the worker's hit holds while its beginTurn waits for p.mu
// (qflush.go:87, held a moment by a pool operation on a third goroutine:
// S31cHoldPoolLock). The 9th turn's flushLocked (qflush.go:235-243) finds
// A's lock taken, counts that as no queue's operation (p.inspecting > 0,
// qflush.go:254), and brings in B's and C's turns without A's older one:
// B's 64 KiB reach the ledger while the 256 bytes still count as asked
// for. A Stats reader is no goroutine on a queue; doc.go ("# Many
// goroutines") allows an error only to "a peak across queues used by
// goroutines at the same time". Now Stats and Snapshot hold no cache's
// lock while they wait for p.mu (lockCaches, flushAll).
func TestHostileS31cStatsReaderSplitsWorkersTurns(t *testing.T) {
	for _, pol := range []int{2, 4} { // bins: an arena's cache keeps no 64 KiB block in so small a pool
		pol := policies[pol]
		t.Run(pol.name, func(t *testing.T) {
			f := newFixture(t, nil, pol.opts...)
			p := f.pool
			a := p.On(f.q)
			b := p.On(cltest.SecondQueue(t, f.q, 0))
			c := p.On(cltest.SecondQueue(t, f.q, 0))
			xs := []*mempool.PooledBuffer{s31aAlloc(t, a, 256), s31aAlloc(t, b, 4096),
				s31aAlloc(t, b, 65536), s31aAlloc(t, c, 4096)}
			for _, x := range xs {
				require.NoError(t, x.Close())
			}
			xa := s31aAlloc(t, a, 256) // a hit
			p.ResetPeak()              // every cache flushed, peaks at 256 bytes asked for
			for range 7 {
				require.NoError(t, s31aAlloc(t, b, 4096).Close())
				require.NoError(t, s31aAlloc(t, c, 4096).Close())
			}
			require.NoError(t, xa.Close())                     // A's turn: 256 bytes no more
			require.NoError(t, s31aAlloc(t, b, 65536).Close()) // B's 8th turn
			require.NoError(t, s31aAlloc(t, c, 4096).Close())  // C's 8th turn: the clock moves

			bLocked := mempool.S31cCacheLocked(p, b.Queue())
			release := mempool.S31cHoldPoolLock(p) // a pool operation on another goroutine
			hit := make(chan *mempool.PooledBuffer)
			go func() { // the worker's next operation (it waits for it)
				x, err := b.Allocate(4096)
				assert.NoError(t, err)
				hit <- x
			}()
			waitFor(t, bLocked)
			time.Sleep(20 * time.Millisecond) // the hit waits for p.mu in B's 9th turn
			stats := make(chan mempool.Stats)
			go func() { stats <- p.Stats() }()
			time.Sleep(20 * time.Millisecond) // Stats waits (on 0001afb, with A's lock held, for B's)
			release()
			x := <-hit
			s := <-stats
			require.NoError(t, x.Close())
			assert.Equal(t, int64(4096), s.RequestedBytes.All.Current)
			assert.Equal(t, int64(65536), s.RequestedBytes.All.Peak, "the 256 bytes were given back before the 64 KiB were asked for")
		})
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "timed out")
		time.Sleep(time.Millisecond)
	}
}
