package mempool_test

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Tests of a hostile review of the memory pool. Each TestHostile... test
// fails because of a defect, which the comment above it explains; each
// TestProbe... test passes, and attacks what no other test does.

// waitReclaimed runs the collector until p has reclaimed n buffers in all,
// or a few seconds passed.
func waitReclaimed(p *mempool.Pool, n int64) {
	for deadline := time.Now().Add(3 * time.Second); p.Stats().Reclaimed < n && time.Now().Before(deadline); {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
}

// A request that the ladder serves with a dropped buffer its collection
// brought back is counted twice: once as a miss (before the ladder) and
// once as a hit (after it). Hits + Misses then exceed the requests made,
// and the pool's Hits exceed the sum of its queues' Hits.
func TestHostileHitAfterCollectionCountsTwice(t *testing.T) {
	total := allocSize(8000) + allocSize(4000) // room for two blocks only
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator {
		return allocator.NewBudget(a, total)
	})
	held, err := f.pool.Allocate(8000)
	require.NoError(t, err)
	require.NoError(t, held.Close())
	dropAllocate(t, f.pool, 4000)

	b, err := f.pool.Allocate(4000) // the ladder collects the dropped block, which serves it
	require.NoError(t, err)
	require.NoError(t, b.Close())
	s := f.pool.Stats()
	require.Equal(t, int64(1), s.Reclaimed, "the dropped block came back through the ladder")
	const requests = 3
	assert.Equal(t, int64(requests), s.Hits+s.Misses, "hits %d + misses %d, for %d requests", s.Hits, s.Misses, requests)
	var qhits, qreqs int64
	for _, q := range s.Queues {
		qhits += q.Hits
		qreqs += q.Requests
	}
	assert.Equal(t, int64(requests), qreqs)
	assert.Equal(t, s.Hits, qhits, "the pool's hits are its queues' hits")
}

// The ladder's collection rung (nextRung, rungCollect) asks the ledger
// whether any block is active, without bringing in the queue caches'
// sums first. A block handed out by a queue cache's hit since its last
// flush is not in the ledger yet: with it dropped (and no other block
// active), the rung sees no active block, skips the collection, and a
// request that the dropped block's memory would serve fails with an
// out-of-memory. (A request whose block is cacheable drains the caches,
// which flushes them, before the ladder: a large one does not.)
func TestHostileCollectionSkippedForUnflushedCacheHit(t *testing.T) {
	const big = 2 * mib // not cacheable: no drain before the ladder
	limit := binSize(big) + binSize(4096) - 1
	f := newFixture(t, nil, mempool.WithLimit(limit))
	x, err := f.pool.Allocate(4096)
	require.NoError(t, err)
	require.NoError(t, x.Close()) // into the queue's cache
	_ = f.pool.Stats()            // the cache's sums are in the ledger: no block active
	dropAllocate(t, f.pool, 4096) // a cache hit, not in the ledger yet; dropped at once
	q2 := cltest.SecondQueue(t, f.q, 0)

	b, err := f.pool.On(q2).Allocate(big)
	assert.NoError(t, err, "the dropped 4096-byte block, collected and freed, leaves room for %d bytes under the limit %d", big, limit)
	if b != nil {
		require.NoError(t, b.Close())
	}
	s := f.pool.Stats()
	assert.Equal(t, int64(1), s.Reclaimed, "the ladder collected the dropped buffer")
	waitReclaimed(f.pool, 1) // so that the fixture's checks see no block left open
}

// A panic on a refused allocation does not make Allocate fail when a
// later rung of the ladder serves the request: the panic is dropped. The
// package doc says "An Allocate whose hook panicked fails" and that a
// hook or an allocator that panics makes "the method that called it"
// return a *PanicError.
//   - A hook that panics at alloc_after, told of the device's refusal:
//     grow joins the refusal with the panic, the joined error still
//     matches an out-of-memory (isOutOfMemory), so the ladder goes on.
//   - An allocator that panics with an out-of-memory error as its value
//     (panic(cl.ErrOutOfResources), as a wrapper that panics on a failed
//     call would): the *PanicError unwraps to it, so it is taken for a
//     refusal.
func TestHostilePanicOnARefusalIsLost(t *testing.T) {
	t.Run("alloc_after hook", func(t *testing.T) {
		f, inj := newFixtureHoldingOneBlock(t)
		h := &panicOnce{kind: mempool.AllocAfter}
		remove := f.pool.AddHook(h)
		defer remove()
		inj.failNext(cl.ErrMemObjectAllocationFailure)

		b, err := f.pool.Allocate(1000) // refused once; the ladder frees the held block and retries
		require.True(t, h.done.Load(), "the hook panicked")
		if b != nil {
			require.NoError(t, b.Close())
		}
		assert.ErrorIs(t, err, mempool.ErrPanicked, "an Allocate whose hook panicked fails (doc.go, Misuse)")
	})
	t.Run("allocator", func(t *testing.T) {
		pa := &panicsWith{value: cl.ErrOutOfResources}
		f := newFixture(t, func(a allocator.Allocator) allocator.Allocator { pa.Allocator = a; return pa })
		held, err := f.pool.Allocate(64)
		require.NoError(t, err)
		require.NoError(t, held.Close())
		pa.left.Store(1)
		b, err := f.pool.Allocate(1000) // the allocator panics once, with an out-of-memory value
		if b != nil {
			require.NoError(t, b.Close())
		}
		assert.ErrorIs(t, err, mempool.ErrPanicked, "the allocator's panic is returned (doc.go, Misuse)")
		assert.Equal(t, int32(0), pa.left.Load(), "a panic ends the ladder: no retry")
	})
}

// panicsWith is an allocator whose Allocate panics with value while left
// is positive (counting down).
type panicsWith struct {
	allocator.Allocator
	value error
	left  atomic.Int32
}

func (a *panicsWith) Allocate(size int64) (*cl.Buffer, error) {
	if a.left.Add(-1) >= 0 {
		panic(a.value)
	}
	return a.Allocator.Allocate(size)
}

func (a *panicsWith) Unwrap() allocator.Allocator { return a.Allocator }

// gated is an allocator that, while it has a gate, tells entered of each
// Allocate and waits until the gate is closed; it first refuses the
// number of allocations in refuse with cl.ErrMemObjectAllocationFailure,
// at once.
type gated struct {
	allocator.Allocator
	gate    atomic.Pointer[chan struct{}] // nil: pass through
	entered chan struct{}
	refuse  atomic.Int32
}

func newGated() *gated { return &gated{entered: make(chan struct{}, 16)} }

// close opens the gate it set.
func (g *gated) hold() (open func()) {
	ch := make(chan struct{})
	g.gate.Store(&ch)
	return func() { g.gate.Store(nil); close(ch) }
}

func (g *gated) Allocate(size int64) (*cl.Buffer, error) {
	if g.refuse.Add(-1) >= 0 {
		return nil, cl.ErrMemObjectAllocationFailure
	}
	if ch := g.gate.Load(); ch != nil {
		g.entered <- struct{}{}
		<-*ch
	}
	return g.Allocator.Allocate(size)
}

func (g *gated) Unwrap() allocator.Allocator { return g.Allocator }

// Stats.ManagedBytes and Stats.ReservedBytes are documented as "plus
// allocations in flight" (stats.go), but the ledger keeps the bytes in
// flight apart (ledger.inflight) and "no statistic shows them until
// segmentAdded": while a segment is being allocated, Stats shows none of
// it.
func TestHostileManagedBytesLeavesOutAllocationsInFlight(t *testing.T) {
	g := newGated()
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator { g.Allocator = a; return g })
	open := g.hold()
	done := make(chan *mempool.PooledBuffer)
	go func() {
		b, err := f.pool.Allocate(4096)
		assert.NoError(t, err)
		done <- b
	}()
	<-g.entered // the segment is reserved and being allocated
	s := f.pool.Stats()
	open()
	b := <-done
	require.NoError(t, b.Close())
	assert.Zero(t, s.ManagedBytes, "ManagedBytes: a segment being allocated counts once it is")
	assert.Zero(t, s.ReservedBytes.All.Current, "ReservedBytes: their sizes, once allocated")
	assert.Equal(t, binSize(4096), f.pool.Stats().ManagedBytes, "counted once allocated")
}

// A segment whose only block not free waits in a queue's cache is idle:
// it has no inactive split, and the ledger counts it so, Allocated, Freed
// and Peak with Current (Stats once took the idle splits out of Current
// alone). Right after ResetPeak every peak is the current value.
func TestIdleSplitCountsInEveryFieldOfTheStat(t *testing.T) {
	f := newFixture(t, nil, mempool.WithArena())
	b, err := f.pool.Allocate(1000)
	require.NoError(t, err)
	require.NoError(t, b.Close()) // waits in the queue's cache
	f.pool.ResetPeak()
	s := f.pool.Stats()
	m := f.pool.MemoryStats()
	assert.Zero(t, s.InactiveSplit.All.Current, "an idle pool has no inactive split")
	for _, g := range []struct {
		name string
		st   mempool.Stat
	}{{"inactive_split", s.InactiveSplit.All}, {"inactive_split_bytes", s.InactiveSplitBytes.All}} {
		assert.Equal(t, g.st.Current, g.st.Peak, "%s: the peak is the current value after ResetPeak", g.name)
		assert.Equal(t, g.st.Current, g.st.Allocated-g.st.Freed, "%s: current = allocated - freed", g.name)
		assert.Equal(t, m[g.name+".all.current"], m[g.name+".all.peak"], g.name)
	}
}

// RecordQueue on a closed buffer returns ErrClosed, but registers the
// queue with the pool first (queueState runs before the closed check):
// the misuse changes the pool's Stats.Queues.
func TestHostileRecordQueueAfterCloseRegistersTheQueue(t *testing.T) {
	f := newFixture(t, nil)
	b, err := f.pool.Allocate(64)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	before := len(f.pool.Stats().Queues)
	q2 := cltest.SecondQueue(t, f.q, 0)
	require.ErrorIs(t, b.RecordQueue(q2), mempool.ErrClosed)
	assert.Len(t, f.pool.Stats().Queues, before, "a RecordQueue refused with ErrClosed changes nothing")
}

// Allocate on a closed pool is documented to return ErrPoolClosed
// ("Close refuses further Allocates"; ErrPoolClosed "is returned by
// Allocate on a closed Pool"). A size over the device's largest buffer is
// checked first: on a closed pool it returns an *OutOfMemoryError, not
// ErrPoolClosed, counts an OOM and tells the hooks of a malloc.
func TestHostileClosedPoolRefusesOversizeAsOutOfMemory(t *testing.T) {
	f := newFixture(t, nil)
	require.NoError(t, f.pool.Close())
	for _, size := range []int64{f.q.Device().MaxMemAllocSize + 1, math.MaxInt64} {
		_, err := f.pool.Allocate(size)
		assert.ErrorIs(t, err, mempool.ErrPoolClosed, "Allocate(%d) on a closed pool", size)
	}
	assert.Zero(t, f.pool.Stats().OOMs, "a closed pool refuses requests as closed, not out of memory")
}

// Stats.OOMRetries is documented as "device allocations that failed for
// lack of memory and were retried after freeing (num_alloc_retries)".
// nextRung counts one at every refusal, before it knows whether anything
// is left to try: a request the limit refuses, with nothing held to free
// and nothing to retry, counts a retry that never happened.
func TestHostileOOMRetriesCountsRefusalsNeverRetried(t *testing.T) {
	limit := binSize(4096) + binSize(100)
	f := newFixture(t, nil, mempool.WithLimit(limit))
	a, err := f.pool.Allocate(4096)
	require.NoError(t, err)
	before := f.pool.Stats()
	_, err = f.pool.Allocate(4096) // the limit refuses; nothing is held; the own size is the bin's
	require.ErrorIs(t, err, mempool.ErrOutOfMemory)
	s := f.pool.Stats()
	assert.Equal(t, before.DeviceAllocs, s.DeviceAllocs, "the device was not asked")
	assert.Equal(t, before.OOMRetries, s.OOMRetries, "no device allocation failed, none was retried")
	require.NoError(t, a.Close())
}

// Two goroutines, each on a queue of its own, each with at most one
// block open at a time (of six bins), under a limit (or a device budget)
// of twice the largest block: whatever the other holds, in use or being
// allocated, a request always fits once the pool frees what it holds. Yet
// requests fail with an out-of-memory whose own figures show the pool
// holding wholly free blocks, often with no block in use at all and room
// enough without freeing anything. Freeing and retrying are not one step:
// the ladder's rung 3 frees one segment, lets go of the lock, and decides
// again, while the other goroutine reserves its next segment (taking the
// room), or closes its block into the pool (held again); rung 3 gives up
// after as many frees as the pool had segments when it began (nextRung,
// lad.frees), and a rung that frees nothing passes to the next without
// deciding again, so the request fails on a refusal that no longer
// holds, with memory held that it could have freed. (Under a budget, a
// segment taken out of the accounts but not yet given back to the device
// refuses the other goroutine's allocation the same way.)
func TestHostileConcurrentLadderFailsWithMemoryToFree(t *testing.T) {
	for _, by := range []string{"limit", "budget"} {
		t.Run(by, func(t *testing.T) {
			const goroutines = 2
			sizes := []int64{100000, 200000, 300000, 500000, 700000, 1000000}
			var largest int64
			for _, s := range sizes {
				largest = max(largest, binSize(s))
			}
			total := goroutines * largest
			f := newCappedFixture(t, by, total, nil)
			var failed atomic.Pointer[error]
			deadline := time.Now().Add(5 * time.Second)
			var wg sync.WaitGroup
			for g := range goroutines {
				q := cltest.SecondQueue(t, f.q, 0)
				wg.Go(func() {
					on := f.pool.On(q)
					for i := 0; failed.Load() == nil && time.Now().Before(deadline); i++ {
						b, err := on.Allocate(sizes[(g*3+i*5)%len(sizes)])
						if err != nil {
							failed.CompareAndSwap(nil, &err)
							return
						}
						if err := b.Close(); err != nil {
							failed.CompareAndSwap(nil, &err)
							return
						}
					}
				})
			}
			wg.Wait()
			if perr := failed.Load(); perr != nil {
				var oom *mempool.OutOfMemoryError
				if errors.As(*perr, &oom) {
					t.Logf("the failure's figures: %d blocks active, %d bytes held in %d blocks, %d managed, of %d",
						oom.ActiveBlocks, oom.HeldBytes, oom.HeldBlocks, oom.ManagedBytes, total)
				}
				t.Errorf("a request failed though %d goroutines with a block of at most %d bytes each fit in %d: %v", goroutines, largest, total, *perr)
			}
		})
	}
}

// fillSegmentOf allocates blocks of at most 1 MiB until the segment of
// b has no free bytes left, and returns them.
func fillSegmentOf(t *testing.T, p *mempool.Pool, b *mempool.PooledBuffer) []*mempool.PooledBuffer {
	t.Helper()
	var fill []*mempool.PooledBuffer
	for {
		var free int64
		for _, seg := range p.Snapshot().Segments {
			for _, blk := range seg.Blocks {
				if blk.State == mempool.StateActive && blk.ID == b.ID() {
					for _, other := range seg.Blocks {
						if other.State != mempool.StateActive {
							free = max(free, other.Size)
						}
					}
				}
			}
		}
		if free == 0 {
			return fill
		}
		c, err := p.Allocate(min(free, mib))
		require.NoError(t, err)
		require.Same(t, b.Base(), c.Base(), "the free block of b's segment serves it")
		fill = append(fill, c)
	}
}

// A request that no limit could ever serve (decide's never branch) has
// looked for a free block first: with an arena, that merged the blocks
// waiting unmerged on its quick lists. The never branch returns without
// bringing the ledger up to date with the policy (c.l.sync, which every
// other branch reaches through forget), so Stats().HeldBlocks and the
// inactive split counts still count the blocks merged away: they disagree
// with Snapshot (and with the policy) until some later operation syncs.
// The OutOfMemoryError's HeldBlocks is stale the same way.
func TestHostileNeverServableLeavesHeldCountsStale(t *testing.T) {
	f := newFixture(t, nil, mempool.WithArena(), mempool.WithoutQueueCaches())
	var bs []*mempool.PooledBuffer
	for range 2 {
		b, err := f.pool.Allocate(1000)
		require.NoError(t, err)
		bs = append(bs, b)
	}
	bs = append(bs, fillSegmentOf(t, f.pool, bs[0])...)
	require.NoError(t, f.pool.SetLimit(1)) // frees nothing: the segment is in use
	require.NoError(t, bs[0].Close())      // two neighbours wait unmerged
	require.NoError(t, bs[1].Close())
	require.Equal(t, 2, f.pool.Stats().HeldBlocks)

	_, err := f.pool.Allocate(3000) // its own 3072 bytes pass the limit: refused at once
	require.ErrorIs(t, err, mempool.ErrOutOfMemory)
	var oom *mempool.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	held := 0
	for _, seg := range f.pool.Snapshot().Segments {
		for _, b := range seg.Blocks {
			if b.State != mempool.StateActive {
				held++
			}
		}
	}
	require.Equal(t, 1, held, "the request merged the two waiting blocks")
	s := f.pool.Stats()
	assert.Equal(t, held, s.HeldBlocks, "Stats' held blocks are the snapshot's")
	assert.Equal(t, int64(held), s.InactiveSplit.All.Current, "Stats' inactive splits are the snapshot's")
	assert.Equal(t, held, oom.HeldBlocks, "the error's held blocks")
	require.NoError(t, f.pool.SetLimit(0))
	for _, b := range bs[2:] {
		require.NoError(t, b.Close())
	}
}

// The ladder's rungs that free nothing drop the sub-buffers the policy
// gave up meanwhile. nextRung's rungKept (and rungFree) takes the stale
// sub-buffers out of the policy with forget, but releases them only when
// it has a segment to free. TakeKept and TakeLargest merge the blocks
// waiting unmerged on the arena's quick lists first, which parks their
// sub-buffers and pushes the oldest parked ones (a segment parks 8) to
// the stale list; with no wholly free segment to take, that list is
// dropped, and those sub-buffers are never released, even by the pool's
// Close. Here the blocks that wait unmerged are closed by another
// goroutine while the request is between its refusal and the ladder (its
// alloc_after hook waits for them).
func TestHostileLadderLeaksStaleSubBuffers(t *testing.T) {
	g := newGated()
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator { g.Allocator = a; return g },
		mempool.WithArena(), mempool.WithoutQueueCaches(), mempool.WithDropSafety(false))
	var bs []*mempool.PooledBuffer
	var subs []*cl.Buffer
	for range 16 {
		b, err := f.pool.Allocate(1024) // 16 blocks (not tiny: see policy.TinyBlock), in order, at the start of a segment
		require.NoError(t, err)
		sub := b.Buffer()
		require.NotNil(t, sub)
		parent, _ := sub.Parent()
		require.NotNil(t, parent, "a sub-buffer")
		bs = append(bs, b)
		subs = append(subs, sub)
	}
	// Four wait unmerged, the fifth merges them (parking 5 sub-buffers);
	// four more wait, the next merges them (8 parked, 2 released).
	for _, b := range bs[:10] {
		require.NoError(t, b.Close())
	}
	inHook, resume := make(chan struct{}), make(chan struct{})
	remove := f.pool.AddHook(mempool.HookFunc(func(e mempool.Event) {
		if e.Kind == mempool.AllocAfter && e.Err != nil {
			close(inHook)
			<-resume
		}
	}))
	defer remove()
	g.refuse.Store(1) // the device refuses the next segment
	done := make(chan error, 1)
	go func() {
		_, err := f.pool.Allocate(64 * mib)
		done <- err
	}()
	<-inHook
	// Four more wait unmerged, with their sub-buffers, as the request
	// goes down the ladder. The last two blocks stay open: nothing is
	// wholly free.
	for _, b := range bs[10:14] {
		require.NoError(t, b.Close())
	}
	close(resume)
	require.ErrorIs(t, <-done, mempool.ErrOutOfMemory)
	require.NoError(t, bs[14].Close())
	require.NoError(t, bs[15].Close())
	require.NoError(t, f.pool.Close())
	unreleased := map[*cl.Buffer]bool{}
	for _, sub := range subs {
		if !sub.Released() {
			unreleased[sub] = true
			_ = sub.Release() // so that the context can go
		}
	}
	assert.Empty(t, unreleased, "sub-buffers of the %d blocks never released after the pool's Close", len(subs))
}

// PROBE: while one Allocate waits inside the allocator (a long device
// allocation, in the ladder or not), every other call of the pool
// answers: Stats, MemoryStats, Snapshot, WriteSummary, another queue's
// Allocate and Close, SetLimit, ResetPeak, FreeHeld, a queue's FreeHeld,
// a Close of a buffer, StopHolding and the pool's Close; the waiting Allocate then finishes
// on the closed pool, and everything is freed.
func TestProbeCallsAnswerDuringALongAllocate(t *testing.T) {
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			g := newGated()
			opts := policyOptions(arena)
			f := newFixture(t, func(a allocator.Allocator) allocator.Allocator {
				g.Allocator = a
				return g
			}, opts...)
			// Blocks held, in a queue's cache and in the policy.
			q2 := cltest.SecondQueue(t, f.q, 0)
			// Bins: a 7 MiB request, refused, frees the 3 MiB block and
			// retries: it waits in the ladder. Arena: a 64 MiB request
			// waits for its first segment.
			sizes, request, refuse := []int64{1000, 3 * mib, 5000}, int64(7*mib), int32(1)
			if arena {
				request, refuse = 64*mib, 0
			}
			var hold []*mempool.PooledBuffer
			for _, n := range sizes {
				b, err := f.pool.On(q2).Allocate(n)
				require.NoError(t, err)
				hold = append(hold, b)
			}
			keep, err := f.pool.Allocate(64)
			require.NoError(t, err)
			for _, b := range hold {
				require.NoError(t, b.Close())
			}
			g.refuse.Store(refuse)
			open := g.hold()
			done := make(chan error, 1)
			go func() {
				b, err := f.pool.Allocate(request)
				if err == nil {
					err = b.Close()
				}
				done <- err
			}()
			select { // waiting for its segment
			case <-g.entered:
			case err := <-done:
				open()
				t.Fatalf("Allocate(%d) returned %v without asking the device again", request, err)
			}
			calls := []struct {
				name string
				fn   func() error
			}{
				{"Stats", func() error { _ = f.pool.Stats(); return nil }},
				{"MemoryStats", func() error { _ = f.pool.MemoryStats(); return nil }},
				{"Snapshot", func() error { _ = f.pool.Snapshot(); return nil }},
				{"WriteSummary", func() error { return f.pool.WriteSummary(io.Discard) }},
				{"another queue's Allocate and Close", func() error {
					b, err := f.pool.On(q2).Allocate(1000) // a held block: the gate would hold a miss
					if err != nil {
						return err
					}
					return b.Close()
				}},
				{"SetLimit", func() error { return f.pool.SetLimit(64 * mib) }},
				{"ResetPeak", func() error { f.pool.ResetPeak(); return nil }},
				{"FreeHeld", func() error { return f.pool.FreeHeld() }},
				{"On(q2).FreeHeld", func() error { return f.pool.On(q2).FreeHeld() }},
				{"Close of a buffer", func() error { return keep.Close() }},
				{"StopHolding", func() error { return f.pool.StopHolding() }},
				{"Close", func() error { return f.pool.Close() }},
			}
			for _, c := range calls {
				var err error
				if !within(t, c.name+" during a long Allocate", func() { err = c.fn() }) {
					return
				}
				assert.NoError(t, err, c.name)
			}
			open()
			select {
			case err := <-done:
				assert.NoError(t, err, "the Allocate in flight finishes")
			case <-time.After(hangLimit):
				t.Fatal("the long Allocate never returned")
			}
			s := f.pool.Stats()
			assert.Zero(t, s.ManagedBytes, "a closed pool frees what comes back")
		})
	}
}

// PROBE: goroutines on queues of their own (and on none) allocate and
// close while two goroutines Close the pool at once, and a third reads
// Stats: no call hangs, requests after the Close fail with ErrPoolClosed
// only, the counters stay consistent, and everything is freed.
func TestProbePoolClosesRacingRequests(t *testing.T) {
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			opts := policyOptions(arena)
			f := newFixture(t, nil, opts...)
			stopStats := pooltest.ReadStats(t, f.pool, nil)
			const workers = 4
			var wg sync.WaitGroup
			started := make(chan struct{}, workers)
			for w := range workers {
				q := cltest.SecondQueue(t, f.q, 0)
				wg.Go(func() {
					on := f.pool.On(q)
					var live []*mempool.PooledBuffer
					for i := range 400 {
						if i == 20 {
							started <- struct{}{}
						}
						var b *mempool.PooledBuffer
						var err error
						if w == 0 {
							b, err = f.pool.Allocate(stressSizes[i%len(stressSizes)])
						} else {
							b, err = on.Allocate(stressSizes[(i*w)%len(stressSizes)])
						}
						if err != nil {
							assert.ErrorIs(t, err, mempool.ErrPoolClosed)
						} else {
							live = append(live, b)
						}
						if len(live) > 3 || err != nil && len(live) > 0 {
							assert.NoError(t, live[0].Close())
							live = live[1:]
						}
					}
					for _, b := range live {
						assert.NoError(t, b.Close())
					}
				})
			}
			for range workers {
				<-started
			}
			var closes sync.WaitGroup
			for range 2 {
				closes.Go(func() {
					within(t, "the pool's Close racing requests", func() { assert.NoError(t, f.pool.Close()) })
				})
			}
			closes.Wait()
			if !within(t, "the requests after the Close", wg.Wait) {
				return
			}
			stopStats()
			s := f.pool.Stats()
			assert.Zero(t, s.ActiveBlocks)
			assert.Zero(t, s.HeldBlocks)
			assert.Zero(t, s.ManagedBytes)
			assert.Equal(t, s.DeviceAllocs, s.DeviceFrees)
		})
	}
}

// checkViews checks that Stats, MemoryStats, Snapshot and the counting
// allocator agree with each other and with the buffers the test holds
// open.
func checkViews(t *testing.T, step string, p *mempool.Pool, count *allocator.Counting, open map[*mempool.PooledBuffer]int64) {
	t.Helper()
	require.NoError(t, mempool.CheckBlockCounts(p), step)
	s := p.Stats()
	m := p.MemoryStats()
	snap := p.Snapshot()
	var activeBytes int64
	for _, n := range open {
		activeBytes += n
	}
	require.Equal(t, len(open), s.ActiveBlocks, step)
	require.Equal(t, activeBytes, s.ActiveBytes, step)
	var segBytes, heldBytes, splitBytes int64
	var active, held, split int
	for _, seg := range snap.Segments {
		segBytes += seg.Size
		for _, b := range seg.Blocks {
			switch b.State {
			case mempool.StateActive:
				active++
			case mempool.StateHeld:
				held++
				heldBytes += b.Size
			case mempool.StateInactiveSplit:
				split++
				splitBytes += b.Size
				held++
				heldBytes += b.Size
			}
		}
	}
	require.Equal(t, s.ActiveBlocks, active, step+": snapshot's active blocks")
	require.Equal(t, s.ManagedBytes, segBytes, step+": snapshot's segments")
	require.Equal(t, s.ManagedBytes, snap.ManagedBytes, step)
	require.Equal(t, s.ActiveBytes, snap.ActiveBytes, step)
	if s.HeldBlocks != held {
		for _, seg := range snap.Segments {
			t.Logf("seg %d size %d small %v", seg.ID, seg.Size, seg.Small)
			for _, b := range seg.Blocks {
				t.Logf("   %+v", b)
			}
		}
		t.Logf("stats %+v", countersOf(s))
		t.Logf("queues %+v", s.Queues)
	}
	require.Equal(t, s.HeldBlocks, held, step+": snapshot's held blocks")
	require.Equal(t, s.HeldBytes, heldBytes, step+": snapshot's held bytes")
	require.Equal(t, int64(split), s.InactiveSplit.All.Current, step+": snapshot's inactive splits")
	require.Equal(t, splitBytes, s.InactiveSplitBytes.All.Current, step+": snapshot's inactive split bytes")
	require.Equal(t, int64(len(snap.Segments)), s.Segment.All.Current, step)
	require.Equal(t, s.ManagedBytes, s.AllocatedBytes.All.Current+s.HeldBytes, step+": managed = allocated + held")
	c := count.Stats()
	require.Equal(t, int64(c.Live), s.Segment.All.Current, step+": live device buffers")
	require.Equal(t, c.Allocs, s.DeviceAllocs, step)
	require.Equal(t, c.Frees, s.DeviceFrees, step)
	require.Equal(t, s.InactiveSplitBytes.All.Current, m["inactive_split_bytes.all.current"], step)
	require.Equal(t, s.ReservedBytes.All.Current, m["reserved_bytes.all.current"], step)
	require.Equal(t, s.AllocatedBytes.All.Peak, m["allocated_bytes.all.peak"], step)
	require.Equal(t, s.OOMs, m["num_ooms"], step)
	for _, g := range []struct {
		name string
		g    mempool.StatGroup
	}{{"allocation", s.Allocation}, {"allocated", s.AllocatedBytes}, {"requested", s.RequestedBytes},
		{"split", s.InactiveSplit}, {"split bytes", s.InactiveSplitBytes}, {"segment", s.Segment}, {"reserved", s.ReservedBytes}} {
		for _, st := range []mempool.Stat{g.g.All, g.g.Small, g.g.Large} {
			require.GreaterOrEqual(t, st.Current, int64(0), step+": "+g.name)
			require.GreaterOrEqual(t, st.Peak, st.Current, step+": "+g.name+" peak")
			require.Equal(t, st.Allocated-st.Freed, st.Current, step+": "+g.name+" allocated - freed")
		}
		require.Equal(t, g.g.All.Current, g.g.Small.Current+g.g.Large.Current, step+": "+g.name)
	}
}

// PROBE: a random single-goroutine run over several queues (in order, out
// of order, none), with limits, FreeHeld, StopHolding, RecordQueue,
// sub-buffers and dropped buffers; every view of the pool agrees after
// every step, and everything is freed at the end, sub-buffers included.
func TestProbeRandomRunViewsAgree(t *testing.T) {
	for _, arena := range []bool{false, true} {
		for seed := range uint64(6) {
			t.Run(fmt.Sprintf("arena=%v/seed=%d", arena, seed), func(t *testing.T) { randomRun(t, arena, seed) })
		}
	}
}

func randomRun(t *testing.T, arena bool, seed uint64) {
	q := cltest.Queue(t)
	qs := []*cl.CommandQueue{q, cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, cl.QueueOutOfOrder)}
	opts := policyOptions(arena)
	dropSafety := seed%3 != 1
	if !dropSafety {
		opts = append(opts, mempool.WithDropSafety(false))
	}
	p, count := pooltest.NewOver(t, q, nil, opts...)
	rng := rand.New(rand.NewPCG(7, seed))
	sizes := []int64{0, 1, 100, 1000, 4096, 5000, 65536, 1 << 20, 1<<20 + 1, 3 << 20}
	open := map[*mempool.PooledBuffer]int64{}
	var subs []*cl.Buffer
	var list []*mempool.PooledBuffer
	remove := func(i int) *mempool.PooledBuffer {
		b := list[i]
		list = append(list[:i], list[i+1:]...)
		delete(open, b)
		return b
	}
	reclaimed := int64(0)
	for step := range cltest.Size(q, 150, 600) {
		op := rng.IntN(20)
		name := fmt.Sprintf("step %d op %d", step, op)
		switch {
		case op < 8:
			size := sizes[rng.IntN(len(sizes))]
			var b *mempool.PooledBuffer
			var err error
			if k := rng.IntN(4); k == 3 {
				b, err = p.Allocate(size)
			} else {
				b, err = p.On(qs[k]).Allocate(size)
			}
			if err != nil {
				require.ErrorIs(t, err, mempool.ErrOutOfMemory, name)
				// A refusal at once leaves the held counts stale
				// (TestHostileNeverServableLeavesHeldCountsStale): a
				// Close brings them up to date.
				if b, err := p.Allocate(4096); err == nil {
					require.NoError(t, b.Close())
				}
				break
			}
			open[b] = size
			list = append(list, b)
			if rng.IntN(2) == 0 {
				if buf := b.Buffer(); buf != nil {
					if parent, _ := buf.Parent(); parent != nil {
						subs = append(subs, buf)
					}
				}
			}
		case op < 14:
			if len(list) > 0 {
				b := remove(rng.IntN(len(list)))
				require.NoError(t, b.Close(), name)
			}
		case op == 14:
			require.NoError(t, p.FreeHeld(), name)
		case op == 15:
			require.NoError(t, p.On(qs[rng.IntN(len(qs))]).FreeHeld(), name)
		case op == 16:
			require.NoError(t, p.SetLimit([]int64{0, 0, 4 << 20, 8 << 20, 1}[rng.IntN(5)]), name)
		case op == 17:
			if len(list) > 0 {
				require.NoError(t, list[rng.IntN(len(list))].RecordQueue(qs[rng.IntN(len(qs))]), name)
			}
		case op == 18 && seed%3 == 2 && rng.IntN(8) == 0:
			require.NoError(t, p.StopHolding(), name)
		case op == 18:
			if len(list) > 0 {
				b := remove(rng.IntN(len(list)))
				require.NoError(t, b.Close())
				require.ErrorIs(t, b.Close(), mempool.ErrClosed, name)
				assert.Nil(t, b.Buffer())
			}
		case op == 19 && dropSafety:
			if _, err := p.On(qs[rng.IntN(len(qs))]).Allocate(4096); err == nil {
				// dropped at once: the collector gives it back
				reclaimed++
				waitReclaimed(p, reclaimed)
				require.Equal(t, reclaimed, p.Stats().Reclaimed, name)
			}
		}
		checkViews(t, name, p, count, open)
	}
	for _, b := range list {
		require.NoError(t, b.Close())
	}
	retries := p.Stats().OOMRetries
	require.NoError(t, p.Close())
	for i, sub := range subs {
		if retries == 0 { // else TestHostileLadderLeaksStaleSubBuffers
			assert.True(t, sub.Released(), "sub-buffer %d of %d left unreleased", i, len(subs))
		}
		_ = sub.Release()
	}
}
