package mempool_test

// Session s39 ports of RMM's resource-adaptor tests (tests/mr/device:
// logging_mr_tests.cpp, tracking_mr_tests.cpp, statistics_mr_tests.cpp,
// arena_mr_tests.cpp) that hostile_s34b_rmm_test.go and
// peers_s38_rmm_test.go do not cover: the logging adaptor's log replays
// the program's allocations (memhooks.TraceRecorder), the tracking
// adaptor's outstanding allocations with their stacks (Snapshot's sites
// from a memhooks.LineProfile), the statistics adaptor's counts through
// failures, and the arena's allocation of ninety percent of its memory.

import (
	"bytes"
	"strings"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// RMM logging_mr_tests.cpp (LoggingTest.Logging, ExpectedLog): every
// allocate and deallocate through the adaptor is a line of the log, with
// its size, in order, and the log replayed reproduces them (RMM's
// replay benchmark reads these logs). Run over both policies, on the pool
// and on a queue.
func TestPeersS39RmmLoggingAdaptor(t *testing.T) {
	for _, v := range s34bVariants() {
		t.Run(v.name, func(t *testing.T) {
			p, q, count := peerPool(t, v.pp, nil)
			var log bytes.Buffer
			rec := memhooks.NewTraceRecorder(&log)
			remove := p.AddHook(rec)
			alloc := s34bAllocFn(p, q, v.on)
			sizes := []int64{100, 4096, 1 << 20, 100, 7 << 20, 512, 0, 3000}
			var live []*mempool.PooledBuffer
			var expected []trace.Event // blocks only, numbered as handed out
			ids := map[*mempool.PooledBuffer]int64{}
			for i, n := range sizes {
				b, err := alloc(n)
				require.NoError(t, err)
				live = append(live, b)
				ids[b] = int64(len(ids) + 1)
				expected = append(expected, trace.Event{Op: trace.Alloc, ID: ids[b], Size: n})
				if i%3 == 2 {
					c := live[0]
					live = live[1:]
					require.NoError(t, c.Close())
					expected = append(expected, trace.Event{Op: trace.Free, ID: ids[c]})
				}
			}
			for _, b := range live {
				require.NoError(t, b.Close())
				expected = append(expected, trace.Event{Op: trace.Free, ID: ids[b]})
			}
			// A refused request is no allocation.
			_, err := alloc(1 << 50)
			require.Error(t, err)
			require.NoError(t, p.FreeHeld())
			remove()
			require.NoError(t, rec.Close())

			events, err := trace.ReadComplete(&log)
			require.NoError(t, err, "the log parses:\n%s", log.String())
			require.NoError(t, trace.Check(events))
			blocks := trace.Blocks(events)
			require.Len(t, blocks, len(expected), "one line per allocate and deallocate")
			for i := range blocks {
				blocks[i].Time = 0
			}
			assert.Equal(t, expected, blocks, "the log, in order")
			var segAllocs, segFrees int64
			for _, e := range events {
				switch e.Op {
				case trace.SegmentAlloc:
					segAllocs++
				case trace.SegmentFree:
					segFrees++
				}
			}
			s := p.Stats()
			assert.Equal(t, s.DeviceAllocs, segAllocs, "the pool's own device allocations are in the log")
			assert.Equal(t, s.DeviceFrees, segFrees, "and its frees")
			assert.Equal(t, count.Stats().Allocs, segAllocs)

			// Replayed through a fresh pool, the log asks for the same bytes.
			p2, _, _ := peerPool(t, v.pp, nil)
			require.NoError(t, trace.Replay(events, p2.Allocate, (*mempool.PooledBuffer).Close))
			s2 := p2.Stats()
			assert.Equal(t, s.RequestedBytes.All.Allocated, s2.RequestedBytes.All.Allocated)
			assert.Equal(t, s.RequestedBytes.All.Peak, s2.RequestedBytes.All.Peak)
			assert.Equal(t, s.Allocation.All.Allocated, s2.Allocation.All.Allocated)
		})
	}
}

// RMM tracking_mr_tests.cpp (TrackingTest.AllocationsLeftWithStacks,
// MultiTracking, LogOutstandingAllocations): the tracking adaptor lists
// every outstanding allocation with its size and, asked to, the stack
// that made it; freed ones leave the list. clpool's Snapshot lists the
// active blocks, and names their sites from a SiteNamer hook
// (memhooks.LineProfile): each outstanding block's site is the line of
// this test that allocated it.
func TestPeersS39RmmTrackingWithStacks(t *testing.T) {
	for _, v := range s34bVariants() {
		t.Run(v.name, func(t *testing.T) {
			p, q, _ := peerPool(t, v.pp, nil)
			lp := memhooks.NewLineProfile()
			remove := p.AddHook(lp)
			defer remove()
			alloc := s34bAllocFn(p, q, v.on)
			var bufs []*mempool.PooledBuffer
			for i := range 10 {
				b, err := alloc(int64(i+1) * 1000)
				require.NoError(t, err)
				bufs = append(bufs, b)
			}
			big, err := alloc(3 << 20)
			require.NoError(t, err)
			check := func(live []*mempool.PooledBuffer, when string) {
				t.Helper()
				want := map[uint64]int64{}
				for _, b := range live {
					want[b.ID()] = b.Size()
				}
				got := map[uint64]int64{}
				for _, seg := range p.Snapshot().Segments {
					for _, blk := range seg.Blocks {
						if blk.State != mempool.StateActive {
							continue
						}
						got[blk.ID] = blk.Requested
						assert.Contains(t, blk.Site, "peers_s39_rmm_test.go", "%s: block %d's site", when, blk.ID)
						assert.Contains(t, blk.Site, "TestPeersS39RmmTrackingWithStacks", "%s: block %d's site", when, blk.ID)
					}
				}
				assert.Equal(t, want, got, "%s: the outstanding allocations", when)
			}
			check(append(bufs[:len(bufs):len(bufs)], big), "all live")
			for i := 0; i < len(bufs); i += 2 {
				require.NoError(t, bufs[i].Close())
			}
			var rest []*mempool.PooledBuffer
			for i := 1; i < len(bufs); i += 2 {
				rest = append(rest, bufs[i])
			}
			check(append(rest, big), "half freed")
			mustClose(t, rest...)
			mustClose(t, big)
			check(nil, "all freed")
		})
	}
}

// RMM statistics_mr_tests.cpp (StatisticsTest.NegativeInnerTracking,
// PeakAllocations with a failure in between): a request the upstream
// refuses changes no count but the failures; the peaks and totals after it
// are those of the requests that succeeded. The upstream (a Budget) sits
// under the pool and refuses the third large request; the pool frees what
// it holds and still fails, and its statistics must show only the two.
func TestPeersS39RmmStatisticsThroughFailure(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		const mib = 1 << 20
		budget := 2*s34bBlockSize(pp.arena, 4*mib) + mib
		p, _, _ := peerPool(t, pp, func(a allocator.Allocator) allocator.Allocator { return allocator.NewBudget(a, budget) })
		a := mustAlloc(t, p, 4*mib)
		b := mustAlloc(t, p, 4*mib)
		before := p.Stats()
		_, err := p.Allocate(4 * mib)
		require.Error(t, err)
		assert.ErrorIs(t, err, mempool.ErrOutOfMemory)
		assert.ErrorIs(t, err, cl.ErrMemObjectAllocationFailure)
		after := p.Stats()
		assert.Equal(t, before.Allocation.All, after.Allocation.All, "allocation counts")
		assert.Equal(t, before.RequestedBytes.All, after.RequestedBytes.All, "requested bytes")
		assert.Equal(t, before.AllocatedBytes.All, after.AllocatedBytes.All, "allocated bytes")
		assert.Equal(t, before.OOMs+1, after.OOMs)
		assert.Equal(t, before.ReservedBytes.All.Peak, after.ReservedBytes.All.Peak, "a refused segment never counts as reserved")
		mustClose(t, a, b)
		s := p.Stats()
		assert.Equal(t, mempool.Stat{Current: 0, Peak: 2, Allocated: 2, Freed: 2}, s.Allocation.All)
		assert.Equal(t, mempool.Stat{Current: 0, Peak: 8 * mib, Allocated: 8 * mib, Freed: 8 * mib}, s.RequestedBytes.All)
	})
}

// RMM arena_mr_tests.cpp (ArenaTest.AllocateNinetyPercent,
// SmallMediumLarge): an arena of a given size serves one allocation of
// ninety percent of it; then, that freed, a small, a medium and a large
// one together. clpool's arena under a limit of that size (its segments
// shrink to the room the limit leaves) must do the same, and hold no more
// than the limit.
func TestPeersS39RmmArenaNinetyPercent(t *testing.T) {
	for _, limit := range []int64{8 << 20, 10<<20 + 12345} {
		t.Run(itoa(limit), func(t *testing.T) {
			p, _, _ := peerPool(t, peerPolicies[1], nil, mempool.WithLimit(limit))
			b, err := p.Allocate(limit * 9 / 10)
			require.NoError(t, err, "ninety percent of the arena")
			require.NoError(t, b.Close())
			small, err := p.Allocate(256)
			require.NoError(t, err, "small")
			medium, err := p.Allocate(64 << 10)
			require.NoError(t, err, "medium")
			large, err := p.Allocate(limit / 2)
			require.NoError(t, err, "large: half the arena, beside a small and a medium one")
			mustClose(t, small, medium, large)
			assert.LessOrEqual(t, p.Stats().PeakManagedBytes, limit)
		})
	}
}

// RMM arena_mr_tests.cpp (ArenaTest.AllocateNinetyPercent) after a
// small allocation stays live: RMM's arena takes the small one from a
// superblock and still serves most of the rest in one piece. clpool's
// package doc: "A request whose own block could not fit even in an empty
// pool fails at once"; one that fits the room the limit leaves beside the
// live block is served (the ladder frees the wholly free segments, then
// tries a segment of the request's own size).
func TestPeersS39RmmArenaLargeBesideSmall(t *testing.T) {
	const limit = 8 << 20
	p, _, _ := peerPool(t, peerPolicies[1], nil, mempool.WithLimit(limit))
	small := mustAlloc(t, p, 1000) // a block of the first segment (512 KiB)
	managed := p.ManagedBytes()
	room := limit - managed
	b, err := p.Allocate(room * 9 / 10)
	require.NoError(t, err, "ninety percent of the room the live block's segment leaves (%d of %d managed)", room*9/10, managed)
	mustClose(t, b, small)
	assert.True(t, strings.Contains(p.Snapshot().Policy, "arena"))
	assert.LessOrEqual(t, p.Stats().PeakManagedBytes, int64(limit))
}
