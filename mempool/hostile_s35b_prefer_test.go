package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s35bPrefer gives back six blocks of size on A, then six on B, each
// beside a small block kept in use (so that none merges with another),
// and asks for size on A again: it returns A's figures and whether the
// block it got was one of A's.
func s35bPrefer(t *testing.T, opts []mempool.Option, size int64) (mempool.QueueStats, bool) {
	q := cltest.Queue(t)
	qa := cltest.SecondQueue(t, q, 0)
	qb := cltest.SecondQueue(t, q, 0)
	p := pooltest.New(t, q, opts...)
	type where struct {
		base any
		off  int64
	}
	var mine, theirs, keep []*mempool.PooledBuffer
	for _, set := range []struct {
		on  *mempool.QueueAllocator
		out *[]*mempool.PooledBuffer
	}{{p.On(qa), &mine}, {p.On(qb), &theirs}} {
		for range 6 {
			b, err := set.on.Allocate(size)
			require.NoError(t, err)
			*set.out = append(*set.out, b)
			k, err := p.Allocate(64 << 10)
			require.NoError(t, err)
			keep = append(keep, k)
		}
	}
	mineAt := map[where]bool{}
	for _, b := range mine {
		mineAt[where{b.Base(), b.Offset()}] = true
		require.NoError(t, b.Close())
	}
	for _, b := range theirs {
		require.NoError(t, b.Close())
	}
	before := p.Stats().Queues[1]
	require.Same(t, qa, before.Queue)
	b, err := p.On(qa).Allocate(size)
	require.NoError(t, err)
	got := mineAt[where{b.Base(), b.Offset()}]
	require.NoError(t, b.Close())
	for _, k := range keep {
		require.NoError(t, k.Close())
	}
	after := p.Stats().Queues[1]
	after.Handovers -= before.Handovers
	after.Barriers -= before.Barriers
	return after, got
}

// Review s35b found the docs' "Requests prefer a block that only their
// queue may still use" untrue: six 2 MiB blocks (too large for the queue
// caches) given back on A, then six on B, and A's next request of 2 MiB
// takes one of B's, a handover, while six of A's are free. Exact bins look
// only preferScan = 4 blocks down the bin's stack; the arena's waiting
// blocks are B's newest. The docs now say how far the preference goes
// (mempool/doc.go, Queues; Pool.Allocate). PASSES: what they say, here:
// one of B's blocks, the most recent, is taken, with a handover.
func TestHostileS35bRequestPrefersItsQueuesBlock(t *testing.T) {
	for _, pol := range []struct {
		name string
		opts []mempool.Option
	}{{"bins", nil}, {"arena", []mempool.Option{mempool.WithArena()}}} {
		t.Run(pol.name, func(t *testing.T) {
			s, own := s35bPrefer(t, pol.opts, 2<<20)
			assert.False(t, own, "past the blocks it looks at, a request takes another queue's block")
			assert.Equal(t, int64(1), s.Handovers, "handovers on A")
		})
	}
}
