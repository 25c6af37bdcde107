package mempool_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
)

// A lockCaches (Stats, Snapshot, a drain) that holds a queue's cache's
// lock but has not yet marked it frozen, descheduled there, must not make
// a flush on another queue count that cache in use: one goroutine's older
// turn on that queue (a Close) would come in after its newer miss on the
// other, and the peak read 2 for one buffer open at a time (review s41g's
// TestHostileS41gManyStatsReaders, 1 run in about 40 under load). The
// flush waits for the holder to show itself (frozen, lockUnder), past
// 100 ms too (review s43a: 5a13a15 gave up then), within frozenWait.
func TestFlushWaitsForAnInspectorsMark(t *testing.T) {
	for _, pause := range []time.Duration{20 * time.Millisecond, 400 * time.Millisecond} {
		t.Run(pause.String(), func(t *testing.T) {
			q := cltest.Queue(t)
			p := hsPool(t, q, mempool.WithArena())
			b := p.On(q)
			a := p.On(cltest.SecondQueue(t, q, 0))
			for range 2 { // a miss, then a hit: b's cache keeps a Close and a round trip unflushed
				x, err := b.Allocate(4096)
				require.NoError(t, err)
				require.NoError(t, x.Close())
			}
			locked := make(chan struct{})
			done := make(chan error)
			go func() { done <- mempool.LockCacheLate(p, q, locked, pause) }()
			<-locked
			z, err := a.Allocate(4096) // a miss on a: its flush finds b's lock taken
			require.NoError(t, err)
			require.NoError(t, <-done)
			require.NoError(t, z.Close())
			assert.Equal(t, int64(1), p.Stats().Allocation.All.Peak, "one buffer open at a time, on one goroutine")
			assert.Zero(t, mempool.FrozenLate(p), "no wait ended by the backstop")
		})
	}
}
