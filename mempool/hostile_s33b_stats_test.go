package mempool_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s33bSnapCount counts the blocks of a snapshot by state.
func s33bSnapCount(s mempool.Snapshot) (blocks map[string]int, bytes map[string]int64, requested int64) {
	blocks, bytes = map[string]int{}, map[string]int64{}
	for _, seg := range s.Segments {
		for _, b := range seg.Blocks {
			blocks[b.State]++
			bytes[b.State] += b.Size
			requested += b.Requested
		}
	}
	return blocks, bytes, requested
}

// PASSES: every figure of Stats, its per-queue figures and a
// Snapshot agree with a count kept by the test, with queue caches in use
// on two queues, for both policies.
func TestHostileS33BCountsWithCaches(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprint("arena=", arena), func(t *testing.T) {
			q := cltest.Queue(t)
			q2 := cltest.SecondQueue(t, q, 0)
			p := pooltest.New(t, q, policyOptions(arena)...)
			on := []*mempool.QueueAllocator{p.On(q), p.On(q2, mempool.QueueName("two"))}
			sizes := []int64{100, 4096, 5000, 70000, 100, 4096, 2 << 20}
			requests := [2]int64{}
			var live []*mempool.PooledBuffer
			var liveBytes int64
			for round := range 3 {
				for i, n := range sizes {
					qi := (i + round) % 2
					b, err := on[qi].Allocate(n)
					require.NoError(t, err)
					requests[qi]++
					live = append(live, b)
					liveBytes += n
				}
				// close all but the last two
				for _, b := range live[:len(live)-2] {
					liveBytes -= b.Size()
					require.NoError(t, b.Close())
				}
				live = live[len(live)-2:]
			}
			st := p.Stats()
			pooltest.CheckStats(t, st)
			total := requests[0] + requests[1]
			assert.Equal(t, total, st.Hits+st.Misses, "hits+misses = requests")
			assert.Equal(t, total, st.Allocation.All.Allocated, "allocation.all.allocated = requests")
			assert.Equal(t, int64(len(live)), st.Allocation.All.Current)
			assert.Equal(t, len(live), st.ActiveBlocks)
			assert.Equal(t, liveBytes, st.ActiveBytes)
			var qreq, qhits, cached int64
			for _, qs := range st.Queues {
				qreq += qs.Requests
				qhits += qs.Hits
				cached += qs.Cached
			}
			require.Len(t, st.Queues, 2)
			assert.Equal(t, requests[0], st.Queues[0].Requests)
			assert.Equal(t, requests[1], st.Queues[1].Requests)
			assert.Equal(t, "two", st.Queues[1].Name)
			assert.Equal(t, st.Hits, qhits, "the queues' hits add up to the pool's")
			snap := p.Snapshot()
			blocks, bytes, req := s33bSnapCount(snap)
			assert.Equal(t, st.ActiveBlocks, blocks[mempool.StateActive])
			assert.Equal(t, st.HeldBlocks, blocks[mempool.StateHeld]+blocks[mempool.StateInactiveSplit])
			assert.Equal(t, st.HeldBytes, bytes[mempool.StateHeld]+bytes[mempool.StateInactiveSplit])
			assert.Equal(t, st.AllocatedBytes.All.Current, bytes[mempool.StateActive])
			assert.Equal(t, st.ActiveBytes, req)
			assert.Equal(t, st.InactiveSplit.All.Current, int64(blocks[mempool.StateInactiveSplit]))
			assert.Equal(t, st.InactiveSplitBytes.All.Current, bytes[mempool.StateInactiveSplit])
			assert.Equal(t, snap.ManagedBytes, st.ManagedBytes)
			ids := map[uint64]int{}
			for _, seg := range snap.Segments {
				for _, b := range seg.Blocks {
					if b.State == mempool.StateActive {
						ids[b.ID] = b.Queue
					}
				}
			}
			for _, b := range live {
				qn, ok := ids[b.ID()]
				assert.True(t, ok, "live block %#x in the snapshot", b.ID())
				assert.NotZero(t, qn)
			}
			for _, b := range live {
				require.NoError(t, b.Close())
			}
			st = p.Stats()
			assert.Zero(t, st.ActiveBlocks)
			assert.Equal(t, st.Allocation.All.Allocated, st.Allocation.All.Freed)
			assert.Equal(t, st.RequestedBytes.All.Allocated, st.RequestedBytes.All.Freed)
			p.ResetPeak()
			st = p.Stats()
			assert.Equal(t, st.ReservedBytes.All.Current, st.ReservedBytes.All.Peak)
			assert.Equal(t, st.ManagedBytes, st.PeakManagedBytes)
			assert.Zero(t, st.PeakActiveBytes)
			require.NoError(t, p.FreeHeld())
			st = p.Stats()
			assert.Zero(t, st.ManagedBytes)
			assert.Zero(t, st.HeldBlocks)
			for _, qs := range st.Queues {
				assert.Zero(t, qs.Cached)
			}
		})
	}
}

// PASSES: Snapshot with a History (sites) and a LineProfile: every active block's
// site and queue are named as the History saw them.
func TestHostileS33BSnapshotHistoryQueues(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprint("arena=", arena), func(t *testing.T) {
			q := cltest.Queue(t)
			q2 := cltest.SecondQueue(t, q, 0)
			p := pooltest.New(t, q, policyOptions(arena)...)
			// q2 used first by the pool, before the hook.
			b0, err := p.On(q2).Allocate(64)
			require.NoError(t, err)
			require.NoError(t, b0.Close())
			h := memhooks.NewHistory(100, memhooks.WithSites())
			remove := p.AddHook(h)
			defer remove()
			// The History sees q first, then q2: its numbering differs.
			a, err := p.On(q).Allocate(1000)
			require.NoError(t, err)
			b, err := p.On(q2).Allocate(2000)
			require.NoError(t, err)
			snap := p.Snapshot()
			st := p.Stats()
			byID := map[uint64]mempool.BlockSnapshot{}
			for _, seg := range snap.Segments {
				for _, bl := range seg.Blocks {
					if bl.State == mempool.StateActive {
						byID[bl.ID] = bl
					}
				}
			}
			qnum := func(qq any) int {
				for i, qs := range st.Queues {
					if any(qs.Queue) == qq {
						return i + 1
					}
				}
				return -1
			}
			assert.Equal(t, qnum(q), byID[a.ID()].Queue)
			assert.Equal(t, qnum(q2), byID[b.ID()].Queue)
			assert.Contains(t, byID[a.ID()].Site, "hostile_s33b_stats_test.go")
			var allocs []int
			for _, ev := range snap.History {
				if ev.Op == trace.Alloc {
					allocs = append(allocs, ev.Queue)
				}
			}
			assert.Equal(t, []int{byID[a.ID()].Queue, byID[b.ID()].Queue}, allocs)
			require.NoError(t, a.Close())
			require.NoError(t, b.Close())
		})
	}
}
