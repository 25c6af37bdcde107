package mempool_test

// Hostile tests, round 4, of the arena pool through its public API. Each
// test failed on the code it was written against because of a defect,
// which its comment explains, since fixed.

import (
	"errors"
	"fmt"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// After SetLimit lowers the limit below what the pool manages
// (memory in use stays), a block given back on queue A waits in A's
// cache. A request on queue B of exactly that block's size needs no new
// memory: the block is held, and "a request the pool cannot otherwise
// serve ... first give[s] every cached block back to the pool, so memory
// is still reused across queues" (doc.go). But core.decide checks
// "own segment > limit" (never: fail at once) before it drains the
// caches, so B's request fails with ErrOutOfMemory while A's cache holds
// a block that fits it exactly. The same block given back in the policy
// (no cache) serves it.
func TestHostileR4NeverServableSkipsQueueCaches(t *testing.T) {
	q := cltest.Queue(t)
	qa := cltest.SecondQueue(t, q, 0)
	qb := cltest.SecondQueue(t, q, 0)
	p := pooltest.New(t, q, mempool.WithArena())
	onA, onB := p.On(qa), p.On(qb)

	first, err := onA.Allocate(512 << 10) // the first segment, whole
	require.NoError(t, err)
	const size = 300 << 10
	c, err := onA.Allocate(size) // a segment of its own
	require.NoError(t, err)
	require.NoError(t, p.SetLimit(256<<10)) // below what is in use: nothing to free
	require.NoError(t, c.Close())           // waits in A's cache
	require.Equal(t, int64(1), queueStats(t, p.Stats(), qa).Cached, "the block waits in A's cache")

	b, err := onB.Allocate(size)
	if assert.NoError(t, err, "a held block of exactly the size serves B's request: no new memory needed") {
		require.NoError(t, b.Close())
	}
	require.NoError(t, first.Close())
}

// An *OutOfMemoryError's LargestHeldSize is "0 if nothing is held"
// (errors.go), but when the refusal is the limit's at once (the
// request's own block larger than the limit), outOfMemory reads the
// policy's largest free block only, not the queue caches': with the one
// held block waiting in a queue's cache, the error says HeldBlocks 1,
// HeldBytes 16 KiB, and LargestHeldSize 0; pool.LargestHeldBin, which
// counts cached blocks, says a block of that size is held.
func TestHostileR4OOMErrorLargestHeldMissesCachedBlocks(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q, mempool.WithArena(), mempool.WithLimit(1<<20))
	on := p.On(q)
	small, err := on.Allocate(16 << 10)
	require.NoError(t, err)
	rest, err := on.Allocate(512<<10 - 16<<10) // the rest of the first segment
	require.NoError(t, err)
	require.NoError(t, small.Close()) // into q's cache
	s := p.Stats()
	require.Equal(t, 1, s.HeldBlocks)
	require.Equal(t, int64(16<<10), s.HeldBytes)
	bin, ok := p.LargestHeldBin()
	require.True(t, ok)

	_, err = on.Allocate(2 << 20) // over the limit: refused at once
	var oom *mempool.OutOfMemoryError
	require.True(t, errors.As(err, &oom), "%v", err)
	assert.Equal(t, 1, oom.HeldBlocks)
	assert.Equal(t, int64(16<<10), oom.HeldBytes)
	assert.Equal(t, int64(16<<10), oom.LargestHeldSize, "the held block is the largest held: %v", err)
	assert.Equal(t, bin, oom.LargestHeldBin)
	require.NoError(t, rest.Close())
}

// WithMaxSplitSize accepts any positive size; one under the
// arena's alignment (512 bytes) makes every request oversize, tiny ones
// included. A tiny request takes blocks of tiny segments only
// (Arenas.GetOn's tiny path), but the tiny segment made for it is marked
// oversize (NewSegment), so it is never split, and its block, given
// back, is neither indexed nor put on the quick lists (oversize blocks
// are found by GetWhole only, which the tiny path never calls): no
// request ever reuses it. And BeforeGrow frees nothing for a tiny
// request. So a loop that allocates and closes one 8-byte buffer takes a
// new device allocation every round and never frees one: the pool grows
// without bound while it holds nothing in use.
func TestHostileR4TinyOversizeNeverReused(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q, mempool.WithArena(), mempool.WithMaxSplitSize(256))
	for range 20 {
		b, err := p.Allocate(8)
		require.NoError(t, err)
		require.NoError(t, b.Close())
	}
	s := p.Stats()
	assert.Equal(t, int64(1), s.DeviceAllocs, "one block, given back and reused: one device allocation")
	assert.Equal(t, int64(19), s.Hits)
	assert.LessOrEqual(t, s.ManagedBytes, int64(64<<10), "the pool holds one buffer's worth, not one per round")
}

// Hits + Misses is the number of requests served or refused past
// the size check (qcache_test, stress_test and queue_test pin it), and a
// queue's Requests counts each of its requests. A request the allocator
// fails with an error that is not an out-of-memory (returned at once, as
// doc.go says) found no held block: a miss. But in an arena (whose queue
// caches may hold blocks), core.decide does not count the first miss
// when it asks for a drain of the caches (d.drain), and serve returns the
// allocator's error from grow without counting it: the request is
// neither a hit nor a miss, and its queue does not count it at all. The
// same request in a pool without caches (drain never asked) counts a
// miss.
func TestHostileR4AllocatorErrorNotCountedAsMiss(t *testing.T) {
	q := cltest.Queue(t)
	var inj *injector
	p, _ := pooltest.NewOver(t, q, func(a allocator.Allocator) allocator.Allocator {
		inj = &injector{Allocator: a}
		return inj
	}, mempool.WithArena())
	boom := errors.New("boom: not an out-of-memory")
	inj.failNext(boom)
	_, err := p.On(q).Allocate(4096)
	require.ErrorIs(t, err, boom)
	s := p.Stats()
	assert.Equal(t, int64(1), s.Hits+s.Misses, "one request, refused: a miss")
	assert.Equal(t, int64(1), queueStats(t, s, q).Requests, "the queue's one request")
}

// Under a device budget, a large request's own segment (2 MiB,
// made past the growth step) is cut: 1.5 MiB in use, 512 KiB free in its
// tail. The budget is spent. A request of 8 KiB (or a tiny one, 64
// bytes) fails with ErrOutOfMemory, though 512 KiB free in a segment in
// use fit it many times over: the out-of-memory ladder's first rung is
// "a free block that fits" (doc.go), and the error itself reports the
// 512 KiB block as held. The arena keeps own segments' free blocks for
// requests of at least 1/192 of the pool (Arena.findOwned, adopt only
// takes wholly free own segments) and tiny requests look in the ordinary
// index only (Arena.hole), even when the alternative is failing the
// request: nothing on the ladder lifts the restriction.
func TestHostileR4OwnSegmentTailUnusedBeforeOOM(t *testing.T) {
	for _, size := range []int64{8 << 10, 64} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			q := cltest.Queue(t)
			p, _ := pooltest.NewOver(t, q, func(a allocator.Allocator) allocator.Allocator {
				return allocator.NewBudget(a, 2<<20)
			}, mempool.WithArena())
			big, err := p.Allocate(2 << 20) // a segment of its own
			require.NoError(t, err)
			require.NoError(t, big.Close())
			big, err = p.Allocate(3 << 19) // 1.5 MiB of it
			require.NoError(t, err)
			s := p.Stats()
			require.Equal(t, int64(2<<20), s.ManagedBytes)
			require.Equal(t, int64(512<<10), s.HeldBytes, "512 KiB free in the segment's tail")

			b, err := p.Allocate(size)
			if assert.NoError(t, err, "the free tail fits the request") {
				require.NoError(t, b.Close())
			} else {
				var oom *mempool.OutOfMemoryError
				if errors.As(err, &oom) {
					t.Logf("held %d bytes, largest held %d, for a %d-byte request", oom.HeldBytes, oom.LargestHeldSize, size)
				}
			}
			require.NoError(t, big.Close())
		})
	}
}
