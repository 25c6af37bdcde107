package mempool_test

// Session s45h ports of torch's and CuPy's statistics tests that keep
// guarding invariants no earlier port checks together (no finding: every
// port below passes on the current code; see the session's report).
//
//   - torch test/test_cuda.py, test_memory_stats (_check_memory_stat_consistency
//     and the update_stat bookkeeping it relies on) with CuPy
//     tests/cupy_tests/cuda_tests/test_memory.py test_total_bytes /
//     test_used_bytes / test_free_bytes (total == used + free): after
//     every step of a random mix of requests on two queues, closes,
//     per-queue and pool FreeHeld, SetLimit, ResetPeak and hooks turned
//     on and off (the queue caches with them), under a device budget that
//     sends requests down the out-of-memory ladder. clpool docs: Stats
//     ("consistent at one moment"), MemoryStats (torch's keys), Snapshot,
//     the package doc's "Counters and statistics" and "Many goroutines"
//     (exact counts for one goroutine).
//   - torch test_memory_snapshot (the block of a tensor is found with its
//     stream, size and requested size): Snapshot's BlockSnapshot.Queue is
//     1 + the queue's index in Stats.Queues, its ID the PooledBuffer's.

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var s45hGroups = []string{"allocation", "allocated_bytes", "requested_bytes", "active", "active_bytes",
	"inactive_split", "inactive_split_bytes", "segment", "reserved_bytes"}

// s45hCheckLedger checks, for one goroutine's pool with no
// ResetAccumulated, what torch's memory_stats keep by construction
// (update_stat adds to current and to allocated or freed): current ==
// allocated - freed, peak >= current, all = small + large; and that the
// device counts and the pool's counters agree with the segment stats.
func s45hCheckLedger(t *testing.T, p *mempool.Pool, count *allocator.Counting, when string) {
	t.Helper()
	m := p.MemoryStats()
	s := p.Stats()
	for _, g := range s45hGroups {
		for _, pl := range []string{"all", "small_pool", "large_pool"} {
			k := g + "." + pl + "."
			assert.Equal(t, m[k+"current"], m[k+"allocated"]-m[k+"freed"], "%s: %scurrent == allocated - freed", when, k)
			assert.GreaterOrEqual(t, m[k+"peak"], m[k+"current"], "%s: %speak >= current", when, k)
		}
		for _, f := range []string{"current", "allocated", "freed"} {
			assert.Equal(t, m[g+".all."+f], m[g+".small_pool."+f]+m[g+".large_pool."+f], "%s: %s.all.%s", when, g, f)
		}
		assert.GreaterOrEqual(t, m[g+".all.peak"], max(m[g+".small_pool.peak"], m[g+".large_pool.peak"]), "%s: %s.all.peak", when, g)
		assert.LessOrEqual(t, m[g+".all.peak"], m[g+".small_pool.peak"]+m[g+".large_pool.peak"], "%s: %s.all.peak", when, g)
	}
	for _, g := range []string{"oversize_allocations", "oversize_segments"} {
		assert.Equal(t, m[g+".current"], m[g+".allocated"]-m[g+".freed"], "%s: %s", when, g)
		assert.GreaterOrEqual(t, m[g+".peak"], m[g+".current"], "%s: %s", when, g)
	}
	assert.Equal(t, m["num_device_alloc"], m["segment.all.allocated"], "%s: num_device_alloc", when)
	assert.Equal(t, m["num_device_free"], m["segment.all.freed"], "%s: num_device_free", when)
	assert.Equal(t, s.ManagedBytes, m["reserved_bytes.all.current"], "%s", when)
	assert.Equal(t, int64(s.ActiveBlocks), m["allocation.all.current"], "%s", when)
	assert.Equal(t, s.ActiveBytes, m["requested_bytes.all.current"], "%s", when)
	assert.Equal(t, m["allocation.all.current"], m["active.all.current"], "%s", when)
	assert.Equal(t, m["allocated_bytes.all.current"], m["active_bytes.all.current"], "%s", when)
	// CuPy: total_bytes == used_bytes + free_bytes (block sizes).
	assert.Equal(t, s.ManagedBytes, m["allocated_bytes.all.current"]+s.HeldBytes, "%s: total == used + free", when)
	if count != nil {
		cs := count.Stats()
		assert.Equal(t, cs.Allocs, m["num_device_alloc"], "%s: device allocs", when)
		assert.Equal(t, cs.Frees, m["num_device_free"], "%s: device frees", when)
		assert.Equal(t, cs.LiveBytes, s.ManagedBytes, "%s: live bytes", when)
		assert.Equal(t, int64(cs.Live), m["segment.all.current"], "%s: live segments", when)
	}
	var qreq, qhit, qcached int64
	for _, qs := range s.Queues {
		qreq += qs.Requests
		qhit += qs.Hits
		qcached += qs.Cached
	}
	assert.Equal(t, s.Hits, qhit, "%s: queue hits sum", when)
	assert.Equal(t, s.Hits+s.Misses, qreq, "%s: queue requests sum = hits+misses (OOMs %d)", when, s.OOMs)
	assert.LessOrEqual(t, qcached, int64(s.HeldBlocks), "%s: cached", when)
	snap := p.Snapshot()
	var nheld int
	var hb, largest int64
	for _, seg := range snap.Segments {
		for _, b := range seg.Blocks {
			if b.State != mempool.StateActive {
				nheld++
				hb += b.Size
				largest = max(largest, b.Size)
			}
		}
	}
	assert.Equal(t, s.HeldBlocks, nheld, "%s: snapshot held blocks", when)
	assert.Equal(t, s.HeldBytes, hb, "%s: snapshot held bytes", when)
	bin, ok := p.LargestHeldBin()
	assert.Equal(t, nheld > 0, ok, "%s: LargestHeldBin ok", when)
	if ok && s.Policy == "bins" {
		assert.Equal(t, mempool.BinNumber(largest, s.LeadingBits), bin, "%s: LargestHeldBin", when)
	}
	for k := range m {
		if strings.HasSuffix(k, ".peak") {
			assert.GreaterOrEqual(t, m[k], m[strings.TrimSuffix(k, ".peak")+".current"], "%s: %s", when, k)
		}
	}
}

// torch test_cuda.py test_memory_stats (_check_memory_stat_consistency),
// CuPy test_memory.py test_total_bytes/test_used_bytes/test_free_bytes.
func TestHostileS45hTorchStatsLedgerRandomOps(t *testing.T) {
	for _, pp := range []peerPolicy{peerPolicies[0], peerPolicies[1],
		{name: "oversize", arena: true, opts: []mempool.Option{mempool.WithArena(), mempool.WithMaxSplitSize(256 << 10)}}} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s/%d", pp.name, seed), func(t *testing.T) {
				p, q, count := peerPool(t, pp, func(a allocator.Allocator) allocator.Allocator { return allocator.NewBudget(a, 6<<20) })
				ons := []*mempool.QueueAllocator{p.On(q), p.On(cltest.SecondQueue(t, q, 0))}
				r := rand.New(rand.NewPCG(seed, 7))
				var live []*mempool.PooledBuffer
				var hooks []func()
				defer func() {
					for _, h := range hooks {
						h()
					}
				}()
				defer func() { mustClose(t, live...) }()
				defer func() {
					s := p.Stats()
					t.Logf("ooms %d retries %d device allocs %d frees %d", s.OOMs, s.OOMRetries, s.DeviceAllocs, s.DeviceFrees)
				}()
				for step := range 400 {
					when := fmt.Sprintf("step %d", step)
					switch op := r.IntN(20); {
					case op < 9:
						sz := int64(r.IntN(64 << 10))
						if r.IntN(6) == 0 {
							sz = int64(r.IntN(3 << 20))
						}
						b, err := ons[r.IntN(2)].Allocate(sz)
						if err != nil {
							require.ErrorIs(t, err, mempool.ErrOutOfMemory)
							when += fmt.Sprintf(" oom(%d)", sz)
						} else {
							live = append(live, b)
							when += fmt.Sprintf(" alloc(%d)", sz)
						}
					case op < 16 && len(live) > 0:
						i := r.IntN(len(live))
						require.NoError(t, live[i].Close())
						live = append(live[:i], live[i+1:]...)
						when += " close"
					case op == 16:
						require.NoError(t, ons[r.IntN(2)].FreeHeld())
						when += " queue FreeHeld"
					case op == 17:
						require.NoError(t, p.FreeHeld())
						when += " FreeHeld"
					case op == 18:
						lim := int64(0)
						if r.IntN(2) == 0 {
							lim = p.ManagedBytes()/2 + int64(r.IntN(4<<20))
						}
						require.NoError(t, p.SetLimit(lim))
						when += fmt.Sprintf(" SetLimit(%d)", lim)
					case op == 19 && r.IntN(3) == 0:
						rm := p.AddHook(mempool.HookFunc(func(mempool.Event) {}))
						hooks = append(hooks, rm)
						when += " hook"
					case op == 19 && len(hooks) > 0 && r.IntN(2) == 0:
						hooks[0]()
						hooks = hooks[1:]
						when += " unhook"
					case op == 19:
						p.ResetPeak()
						when += " ResetPeak"
					}
					s45hCheckLedger(t, p, count, when)
					if t.Failed() {
						return
					}
				}
			})
		}
	}
}

// torch test_cuda.py test_memory_snapshot: each live block is in the
// snapshot with its queue (as Stats.Queues numbers it), offset, requested
// size and ID; the snapshot names the pool's limit and policy.
func TestHostileS45hTorchSnapshotBlocksAndQueues(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, q, _ := peerPool(t, pp, nil)
		q2 := cltest.SecondQueue(t, q, 0)
		on2 := p.On(q2, mempool.QueueName("two"))
		a := mustAlloc(t, on2, 3000)
		b := mustAlloc(t, p, 5000)
		c := mustAlloc(t, p.On(q), 700000)
		defer mustClose(t, a, b, c)
		require.NoError(t, p.SetLimit(64<<20))
		s := p.Stats()
		snap := p.Snapshot()
		assert.Equal(t, int64(64<<20), snap.Limit)
		assert.Equal(t, pp.name, snap.Policy)
		assert.NotEmpty(t, snap.Device)
		found := map[uint64]mempool.BlockSnapshot{}
		for _, seg := range snap.Segments {
			for _, bl := range seg.Blocks {
				if bl.State == mempool.StateActive {
					found[bl.ID] = bl
				}
			}
		}
		for _, x := range []struct {
			b *mempool.PooledBuffer
			q *cl.CommandQueue
		}{{a, q2}, {b, q}, {c, q}} {
			bl, ok := found[x.b.ID()]
			if !assert.True(t, ok, "block %d in snapshot", x.b.ID()) {
				continue
			}
			assert.Equal(t, x.b.Size(), bl.Requested)
			assert.Equal(t, x.b.Offset(), bl.Offset)
			if assert.True(t, bl.Queue >= 1 && bl.Queue <= len(s.Queues), "queue %d", bl.Queue) {
				assert.Equal(t, x.q, s.Queues[bl.Queue-1].Queue)
			}
		}
	})
}
