package mempool_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
)

// hsGroups names every torch group of a Stats.
func hsGroups(s mempool.Stats) map[string]mempool.StatGroup {
	return map[string]mempool.StatGroup{
		"allocation": s.Allocation, "allocated_bytes": s.AllocatedBytes, "requested_bytes": s.RequestedBytes,
		"active": s.Active, "active_bytes": s.ActiveBlockBytes,
		"inactive_split": s.InactiveSplit, "inactive_split_bytes": s.InactiveSplitBytes,
		"segment": s.Segment, "reserved_bytes": s.ReservedBytes,
	}
}

// hsView is what a Snapshot shows, summed.
type hsView struct {
	splitBlocks, splitBytes     [2]int64 // small, large
	heldBlocks, activeBlocks    int
	heldBytes, activeBlockBytes int64
	managed                     int64
	segments                    [2]int64
}

func hsSnap(p *mempool.Pool) (v hsView, snap mempool.Snapshot) {
	snap = p.Snapshot()
	for _, seg := range snap.Segments {
		k := 0
		if !seg.Small {
			k = 1
		}
		v.segments[k]++
		v.managed += seg.Size
		for _, b := range seg.Blocks {
			switch b.State {
			case mempool.StateActive:
				v.activeBlocks++
				v.activeBlockBytes += b.Size
			case mempool.StateInactiveSplit:
				v.splitBlocks[k]++
				v.splitBytes[k] += b.Size
				v.heldBlocks++
				v.heldBytes += b.Size
			default:
				v.heldBlocks++
				v.heldBytes += b.Size
			}
		}
	}
	return v, snap
}

// hsWatch checks a pool's statistics step by step against what its
// snapshots showed.
type hsWatch struct {
	t       *testing.T
	p       *mempool.Pool
	last    mempool.Stats
	have    bool
	base    map[string][3]int64 // Current of All, Small, Large at the last ResetAccumulated
	maxSeen map[string][3]int64 // the most Current shown since the last ResetPeak
	strict  bool                // peak must equal the most shown (else only not exceed it)
}

func newHsWatch(t *testing.T, p *mempool.Pool) *hsWatch {
	return &hsWatch{t: t, p: p, base: map[string][3]int64{}, maxSeen: map[string][3]int64{}}
}

func trio(g mempool.StatGroup) [3]mempool.Stat { return [3]mempool.Stat{g.All, g.Small, g.Large} }

func (w *hsWatch) resetPeak() {
	w.p.ResetPeak()
	s := w.p.Stats()
	for name, g := range hsGroups(s) {
		for i, st := range trio(g) {
			require.Equal(w.t, st.Current, st.Peak, "after ResetPeak: %s[%d] Peak == Current", name, i)
		}
	}
	w.maxSeen = map[string][3]int64{}
	w.last = s
	w.have = true
	w.note(s)
}

func (w *hsWatch) resetAccumulated() {
	w.p.ResetAccumulated()
	s := w.p.Stats()
	for name, g := range hsGroups(s) {
		var b [3]int64
		for i, st := range trio(g) {
			require.Zero(w.t, st.Allocated, "after ResetAccumulated: %s[%d]", name, i)
			require.Zero(w.t, st.Freed, "after ResetAccumulated: %s[%d]", name, i)
			b[i] = st.Current
		}
		w.base[name] = b
	}
	w.last = s
	w.have = true
	w.note(s)
}

func (w *hsWatch) note(s mempool.Stats) {
	for name, g := range hsGroups(s) {
		m := w.maxSeen[name]
		for i, st := range trio(g) {
			m[i] = max(m[i], st.Current)
		}
		w.maxSeen[name] = m
	}
}

// check looks at the pool after a step; open is how many buffers are
// open.
func (w *hsWatch) check(step string, open int) mempool.Stats {
	t := w.t
	t.Helper()
	require.NoError(t, mempool.CheckBlockCounts(w.p), step)
	v, snap := hsSnap(w.p)
	s := w.p.Stats()
	// Stats against Snapshot (no operation between them: one goroutine).
	require.Equal(t, v.splitBlocks[0], s.InactiveSplit.Small.Current, "%s: small inactive split blocks, Stats vs Snapshot", step)
	require.Equal(t, v.splitBlocks[1], s.InactiveSplit.Large.Current, "%s: large inactive split blocks, Stats vs Snapshot", step)
	require.Equal(t, v.splitBytes[0], s.InactiveSplitBytes.Small.Current, "%s: small inactive split bytes", step)
	require.Equal(t, v.splitBytes[1], s.InactiveSplitBytes.Large.Current, "%s: large inactive split bytes", step)
	require.Equal(t, v.heldBlocks, s.HeldBlocks, "%s: HeldBlocks vs Snapshot", step)
	require.Equal(t, v.heldBytes, s.HeldBytes, "%s: HeldBytes vs Snapshot", step)
	require.Equal(t, v.activeBlocks, s.ActiveBlocks, "%s: ActiveBlocks vs Snapshot", step)
	require.Equal(t, v.activeBlockBytes, s.AllocatedBytes.All.Current, "%s: AllocatedBytes vs Snapshot", step)
	require.Equal(t, v.managed, s.ManagedBytes, "%s: ManagedBytes vs Snapshot's segments", step)
	require.Equal(t, snap.ManagedBytes, s.ManagedBytes, "%s: ManagedBytes vs Snapshot.ManagedBytes", step)
	require.Equal(t, snap.ActiveBytes, s.ActiveBytes, "%s: ActiveBytes vs Snapshot", step)
	require.Equal(t, snap.PeakManagedBytes, s.PeakManagedBytes, step)
	require.Equal(t, snap.PeakActiveBytes, s.PeakActiveBytes, step)
	require.Equal(t, v.segments[0], s.Segment.Small.Current, step)
	require.Equal(t, v.segments[1], s.Segment.Large.Current, step)
	require.Equal(t, s.ManagedBytes, s.HeldBytes+s.AllocatedBytes.All.Current, "%s: managed = held + allocated", step)
	require.Equal(t, open, s.ActiveBlocks, "%s: open buffers", step)
	if open == 0 {
		require.Zero(t, s.InactiveSplit.All.Current, "%s: an idle pool has no inactive split", step)
		require.Zero(t, s.InactiveSplitBytes.All.Current, "%s: an idle pool has no inactive split bytes", step)
	}
	w.note(s)
	prevGroups := hsGroups(w.last)
	for name, g := range hsGroups(s) {
		tr, prev := trio(g), trio(prevGroups[name])
		require.Equal(t, tr[0].Current, tr[1].Current+tr[2].Current, "%s: %s All = Small + Large", step, name)
		require.Equal(t, tr[0].Allocated, tr[1].Allocated+tr[2].Allocated, "%s: %s", step, name)
		require.Equal(t, tr[0].Freed, tr[1].Freed+tr[2].Freed, "%s: %s", step, name)
		b := w.base[name]
		m := w.maxSeen[name]
		for i, st := range tr {
			require.Equal(t, st.Current-b[i], st.Allocated-st.Freed, "%s: %s[%d] Current == Allocated - Freed (+ current at ResetAccumulated)", step, name, i)
			require.GreaterOrEqual(t, st.Peak, st.Current, "%s: %s[%d] Peak >= Current", step, name, i)
			require.LessOrEqual(t, st.Peak, m[i], "%s: %s[%d] Peak (%d) above the most ever shown (%d)", step, name, i, st.Peak, m[i])
			if w.strict {
				require.Equal(t, m[i], st.Peak, "%s: %s[%d] Peak is the most shown", step, name, i)
			}
			if w.have {
				require.GreaterOrEqual(t, st.Allocated, prev[i].Allocated, "%s: %s[%d] Allocated fell", step, name, i)
				require.GreaterOrEqual(t, st.Freed, prev[i].Freed, "%s: %s[%d] Freed fell", step, name, i)
			}
		}
	}
	w.last, w.have = s, true
	return s
}

// hsSizes draws a request size: mostly small, some at the 1 MiB edge,
// some large.
func hsSize(rng *rand.Rand) int64 {
	switch r := rng.IntN(20); {
	case r < 10:
		return int64(rng.IntN(16 << 10))
	case r < 13:
		return []int64{4096, 8192, 512, 1}[rng.IntN(4)]
	case r < 15:
		return int64(64<<10 + rng.IntN(448<<10))
	case r < 17:
		return []int64{1 << 20, 1<<20 - 512, 1<<20 + 1, 1<<20 + 4096}[rng.IntN(4)]
	default:
		return int64(1<<20 + rng.IntN(6<<20))
	}
}

// hsPool is a pool over an Immediate allocator on q, closed when the
// test ends (not pooltest's: ResetAccumulated resets the device counts
// it checks).
func hsPool(t *testing.T, q *cl.CommandQueue, opts ...mempool.Option) *mempool.Pool {
	t.Helper()
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	p, err := mempool.New(imm, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// hsSeeds is how many random runs each case of the random tests makes.
const hsSeeds = 5

type hsOpen struct {
	pb *mempool.PooledBuffer
	q  int
}

// hsRun runs a random sequence on p over the allocators allocs (index 0:
// the pool's own Allocate), checking after every step.
func hsRun(t *testing.T, p *mempool.Pool, allocs []func(int64) (*mempool.PooledBuffer, error), frees []func() error, seed uint64, steps int, strict bool, at func(step int) string) {
	rng := rand.New(rand.NewPCG(seed, 77))
	w := newHsWatch(t, p)
	w.strict = strict
	var open []hsOpen
	w.check("start", 0)
	for step := range steps {
		var what string
		switch r := rng.IntN(100); {
		case r < 45:
			k := rng.IntN(len(allocs))
			size := hsSize(rng)
			what = fmt.Sprintf("allocate %d on %d", size, k)
			pb, err := allocs[k](size)
			if err != nil {
				what += " (err " + err.Error() + ")"
			} else {
				open = append(open, hsOpen{pb, k})
			}
		case r < 90:
			if len(open) == 0 {
				continue
			}
			i := rng.IntN(len(open))
			if rng.IntN(3) == 0 {
				i = len(open) - 1
			}
			what = fmt.Sprintf("close %d (of %d)", i, open[i].q)
			require.NoError(t, open[i].pb.Close())
			open = append(open[:i], open[i+1:]...)
		case r < 93:
			what = "free held"
			k := rng.IntN(len(frees))
			require.NoError(t, frees[k]())
		case r < 96:
			what = "reset peak"
			w.resetPeak()
		default:
			what = "reset accumulated"
			w.resetAccumulated()
		}
		w.check(fmt.Sprintf("seed %d step %d (%s)", seed, step, what), len(open))
		if at != nil {
			if did := at(step); did != "" {
				w.check(fmt.Sprintf("seed %d step %d (%s)", seed, step, did), len(open))
			}
		}
	}
	for i, o := range open {
		require.NoError(t, o.pb.Close())
		w.check(fmt.Sprintf("seed %d final close %d", seed, i), len(open)-i-1)
	}
}

// TestHostileSplitsRandomQueues: random runs on the host and on several
// queues, in order and out of order, checking Stats against Snapshot
// after every step.
func TestHostileSplitsRandomQueues(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []mempool.Option
		svm  bool
	}{
		{"arena", []mempool.Option{mempool.WithArena()}, false},
		{"arena no drop safety", []mempool.Option{mempool.WithArena(), mempool.WithDropSafety(false)}, false},
		{"arena limit", []mempool.Option{mempool.WithArena(), mempool.WithLimit(24 << 20)}, false},
		{"arena tight limit", []mempool.Option{mempool.WithArena(), mempool.WithLimit(6 << 20)}, false},
		{"arena max split", []mempool.Option{mempool.WithArena(), mempool.WithMaxSplitSize(2 << 20)}, false},
		{"arena uncached", []mempool.Option{mempool.WithArena(), mempool.WithoutQueueCaches()}, false},
		{"arena sanitizer", []mempool.Option{mempool.WithArena(), mempool.WithSanitizer(), mempool.WithSanitizerOutput(io.Discard)}, false},
		{"arena svm", []mempool.Option{mempool.WithArena()}, true},
		{"bins", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := cltest.Queue(t)
			if tc.svm {
				q = cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
			}
			q2 := cltest.SecondQueue(t, q, 0)
			q3 := cltest.SecondQueue(t, q, cl.QueueOutOfOrder)
			for seed := range uint64(hsSeeds) {
				var p *mempool.Pool
				if tc.svm {
					imm, err := allocator.NewImmediateSVM(q, false)
					require.NoError(t, err)
					p, err = mempool.NewSVM(imm, tc.opts...)
					require.NoError(t, err)
					t.Cleanup(func() { _ = p.Close() })
				} else {
					p = hsPool(t, q, tc.opts...)
				}
				a2, a3, a1 := p.On(q2), p.On(q3), p.On(q)
				allocs := []func(int64) (*mempool.PooledBuffer, error){p.Allocate, a1.Allocate, a2.Allocate, a3.Allocate}
				frees := []func() error{p.FreeHeld, a2.FreeHeld, a3.FreeHeld}
				hsRun(t, p, allocs, frees, seed, 300, true, nil)
				require.NoError(t, p.Close())
			}
		})
	}
}

// hsAlloc allocates size bytes with a, failing the test on an error.
func hsAlloc(t *testing.T, a func(int64) (*mempool.PooledBuffer, error), size int64) *mempool.PooledBuffer {
	t.Helper()
	b, err := a(size)
	require.NoError(t, err)
	return b
}

// hsSplitShown returns the inactive splits a Snapshot shows, in blocks,
// for all blocks.
func hsSplitShown(p *mempool.Pool) int64 {
	v, _ := hsSnap(p)
	return v.splitBlocks[0] + v.splitBlocks[1]
}

// TestHostileSplitsAllPeakAboveAnyShown: one queue, one goroutine, Stats
// after every step. A request that merges a large segment's blocks
// waiting unmerged (the arena's quick lists: its Flush) and makes an idle
// small segment busy changes the small and the large inactive splits in
// one ledger.sync; sync moves the small group first (+2), and
// StatGroup.add raises All.Peak to the new small count plus the old large
// count, a sum no state ever had. InactiveSplit.All.Peak comes out 5,
// while InactiveSplit.All.Current was never above 3 (nor Small.Peak +
// Large.Peak's moments together: small was 0 whenever large was 3).
func TestHostileSplitsAllPeakAboveAnyShown(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q, mempool.WithArena())
	al := func(n int64) *mempool.PooledBuffer { return hsAlloc(t, p.Allocate, n) }
	var most int64
	look := func() {
		s := p.Stats()
		require.Equal(t, hsSplitShown(p), s.InactiveSplit.All.Current, "Stats and Snapshot agree")
		most = max(most, s.InactiveSplit.All.Current)
	}
	big := al(32 << 20)  // a large own segment: the growth step is large now
	a := al(1<<20 + 512) // a large segment L of the growth step: [a][tail]
	look()
	b1, b2, b3 := al(4096), al(4096), al(4096) // cut from L's tail
	look()
	segs := p.Snapshot().Segments
	require.Len(t, segs, 2)
	require.Len(t, segs[1].Blocks, 5, "L is [a][b1][b2][b3][tail]")
	f := al(segs[1].Blocks[4].Size) // fills L's tail
	s := al(4096)                   // a new small segment S: [s][tail]
	look()
	require.NoError(t, s.Close()) // into the queue's cache: S idle, 0 inactive splits
	look()
	for _, b := range []*mempool.PooledBuffer{b1, b2, b3} {
		require.NoError(t, b.Close()) // a large segment's small blocks wait unmerged
		look()
	}
	// Shown now: 3 large inactive splits (b1, b2, b3), 0 small.
	c := al(64 << 10) // Flush merges b1..b3 (large 3 -> 1); c is cut from S (small 0 -> 2)
	look()
	st := p.Stats()
	t.Logf("small %+v large %+v all %+v", st.InactiveSplit.Small, st.InactiveSplit.Large, st.InactiveSplit.All)
	assert.LessOrEqual(t, st.InactiveSplit.All.Peak, most,
		"InactiveSplit.All.Peak above any InactiveSplit.All.Current Stats could show (the most shown was %d)", most)
	for _, b := range []*mempool.PooledBuffer{c, a, f, big} {
		require.NoError(t, b.Close())
	}
}

// TestHostileSplitsCrossQueuePeakAboveAnyShown: two in-order queues, one
// goroutine. A block closed on queue A waits in A's cache, and the ledger
// learns of it only at A's next flush; meanwhile a request on the pool's
// own queue, served by the policy without a miss (so no cache is
// drained), adds an inactive split. The ledger counts it on top of the
// stale split of A's segment, which was idle already: the peak is 2, but
// Stats, called at any moment in between, shows at most 1. (splits.go
// says cross-queue peaks can be off by a cache's unflushed moves; the
// commit says no peak is above a value Stats could show.)
func TestHostileSplitsCrossQueuePeakAboveAnyShown(t *testing.T) {
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	p := pooltest.New(t, q, mempool.WithArena())
	onA := p.On(q2)
	a := hsAlloc(t, onA.Allocate, 4096) // small segment S (512 KiB): [a][tail]
	w := hsAlloc(t, p.Allocate, 2<<20)  // a segment W of its own: [w]
	require.NoError(t, w.Close())       // W wholly free: no inactive split
	require.Equal(t, int64(1), p.Stats().InactiveSplit.All.Current, "S's tail")
	require.NoError(t, a.Close()) // into A's cache: S idle, 0 inactive splits (not flushed)
	// What Stats would show here: 0 (not called, so that A's cache is
	// not flushed).
	c := hsAlloc(t, p.Allocate, 600<<10) // too large for S's tail: cut from W, [c][tail]: 1
	s := p.Stats()
	require.Equal(t, int64(1), s.InactiveSplit.All.Current, "W's tail")
	require.Equal(t, hsSplitShown(p), s.InactiveSplit.All.Current)
	assert.LessOrEqual(t, s.InactiveSplit.All.Peak, int64(1),
		"the most Stats could have shown at any moment is 1 (S's tail, then W's)")
	require.NoError(t, c.Close())
}

// hsReplay runs the same random sequence on p, over allocs; with look,
// it calls Stats after every step (which flushes every queue's cache),
// and returns the most each torch group's Current was then. It returns
// the final Stats.
func hsReplay(t *testing.T, p *mempool.Pool, allocs []func(int64) (*mempool.PooledBuffer, error), seed uint64, steps int, look bool) (mempool.Stats, map[string][3]int64) {
	rng := rand.New(rand.NewPCG(seed, 99))
	w := newHsWatch(t, p)
	var open []*mempool.PooledBuffer
	for range steps {
		if len(open) > 0 && rng.IntN(2) == 0 {
			i := len(open) - 1 - rng.IntN(min(len(open), 3))
			require.NoError(t, open[i].Close())
			open = append(open[:i], open[i+1:]...)
		} else {
			k := rng.IntN(len(allocs))
			b, err := allocs[k](hsSize(rng))
			require.NoError(t, err)
			open = append(open, b)
		}
		if look {
			w.note(p.Stats())
		}
	}
	for _, b := range open {
		require.NoError(t, b.Close())
		if look {
			w.note(p.Stats())
		}
	}
	return p.Stats(), w.maxSeen
}

// TestHostileSplitsBatchedAsStepwise: the same random sequence on two
// pools, one looked at (Stats) after every step, the other only at the
// end: the peaks of the one not looked at must not pass the most the
// other showed, and on one queue its totals must be the same.
func TestHostileSplitsBatchedAsStepwise(t *testing.T) {
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	q3 := cltest.SecondQueue(t, q, cl.QueueOutOfOrder)
	for _, tc := range []struct {
		name   string
		queues []*cl.CommandQueue // nil: the pool's own Allocate
		same   bool               // one queue: totals too must agree
	}{
		{"one queue", []*cl.CommandQueue{nil, q}, true},
		{"in order and out of order", []*cl.CommandQueue{nil, q3}, false},
		{"two in order", []*cl.CommandQueue{nil, q2}, false},
	} {
		for seed := range uint64(hsSeeds) {
			var res [2]mempool.Stats
			var most map[string][3]int64
			for i, look := range []bool{true, false} {
				p := hsPool(t, q, mempool.WithArena())
				var allocs []func(int64) (*mempool.PooledBuffer, error)
				for _, qq := range tc.queues {
					if qq == nil {
						allocs = append(allocs, p.Allocate)
					} else {
						allocs = append(allocs, p.On(qq).Allocate)
					}
				}
				s, m := hsReplay(t, p, allocs, seed, 400, look)
				res[i] = s
				if look {
					most = m
				}
				require.NoError(t, p.Close())
			}
			require.Equal(t, []int64{res[0].DeviceAllocs, res[0].Misses, res[0].Hits}, []int64{res[1].DeviceAllocs, res[1].Misses, res[1].Hits},
				"%s seed %d: the two pools made the same choices", tc.name, seed)
			want, got := hsGroups(res[0]), hsGroups(res[1])
			for name, g := range got {
				for i, st := range trio(g) {
					require.Equal(t, trio(want[name])[i].Current, st.Current, "%s seed %d: %s[%d]: the same state at the end", tc.name, seed, name, i)
				}
			}
			for name, g := range got {
				for i, st := range trio(g) {
					assert.LessOrEqual(t, st.Peak, most[name][i], "%s seed %d: %s[%d]: peak above the most shown", tc.name, seed, name, i)
					if tc.same {
						w := trio(want[name])[i]
						assert.Equal(t, w, st, "%s seed %d: %s[%d]: one queue, batched as one by one", tc.name, seed, name, i)
					}
				}
			}
		}
	}
}

// TestHostileSplitsCrossQueueAllocationPeak: the plainest form of the
// cross-queue batching. Never more than one buffer is open, but
// Allocation.All.Peak comes out 2: a's Close on queue A waits in A's
// cache unflushed, and b, served by the policy on the pool's own queue
// (no miss, so no drain), is counted on top of it.
func TestHostileSplitsCrossQueueAllocationPeak(t *testing.T) {
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	p := pooltest.New(t, q, mempool.WithArena())
	onA := p.On(q2)
	a := hsAlloc(t, onA.Allocate, 4096)
	require.NoError(t, a.Close()) // Stats here would show 0 active
	b := hsAlloc(t, p.Allocate, 4096)
	s := p.Stats()
	require.Equal(t, int64(1), s.Allocation.All.Current)
	assert.Equal(t, int64(1), s.Allocation.All.Peak, "one buffer open at most, at any moment")
	assert.Equal(t, int64(1), s.Allocation.Small.Peak)
	require.NoError(t, b.Close())
}

// TestHostileSplitsConcurrent: goroutines on several queues (and the
// pool's own), with FreeHeld and ResetPeak racing them, while a reader
// checks each Stats: Current == Allocated - Freed, All = Small + Large,
// Peak >= Current, no total falling; at the end, an idle pool with no
// inactive split, Stats agreeing with Snapshot.
func TestHostileSplitsConcurrent(t *testing.T) {
	q := cltest.Queue(t)
	queues := []*cl.CommandQueue{q, cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, cl.QueueOutOfOrder)}
	for _, opts := range [][]mempool.Option{
		{mempool.WithArena()},
		{mempool.WithArena(), mempool.WithDropSafety(false)},
	} {
		p := hsPool(t, q, opts...)
		var allocs []func(int64) (*mempool.PooledBuffer, error)
		allocs = append(allocs, p.Allocate)
		for _, qq := range queues {
			allocs = append(allocs, p.On(qq).Allocate)
		}
		done := make(chan struct{})
		var errs sync.Map
		fail := func(format string, args ...any) { errs.Store(fmt.Sprintf(format, args...), true) }
		var readers sync.WaitGroup
		readers.Go(func() {
			var last mempool.Stats
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				s := p.Stats()
				for name, g := range hsGroups(s) {
					tr, prev := trio(g), trio(hsGroups(last)[name])
					if tr[0].Current != tr[1].Current+tr[2].Current || tr[0].Allocated != tr[1].Allocated+tr[2].Allocated {
						fail("%s: All is not Small + Large: %+v", name, g)
					}
					for k, st := range tr {
						if st.Current != st.Allocated-st.Freed {
							fail("%s[%d]: Current %d != Allocated %d - Freed %d", name, k, st.Current, st.Allocated, st.Freed)
						}
						if st.Peak < st.Current {
							fail("%s[%d]: Peak %d < Current %d", name, k, st.Peak, st.Current)
						}
						if st.Current < 0 {
							fail("%s[%d]: Current %d < 0", name, k, st.Current)
						}
						if st.Allocated < prev[k].Allocated || st.Freed < prev[k].Freed {
							fail("%s[%d]: a total fell: %+v then %+v", name, k, prev[k], st)
						}
					}
				}
				last = s
				switch i % 50 {
				case 10:
					p.ResetPeak()
				case 30:
					_ = p.FreeHeld()
				}
			}
		})
		var workers sync.WaitGroup
		for g := range 4 {
			workers.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 5))
				var open []*mempool.PooledBuffer
				for range 1500 {
					if len(open) > 0 && (rng.IntN(2) == 0 || len(open) > 24) {
						i := len(open) - 1 - rng.IntN(min(len(open), 3))
						if err := open[i].Close(); err != nil {
							fail("close: %v", err)
						}
						open = append(open[:i], open[i+1:]...)
						continue
					}
					size := int64(rng.IntN(32 << 10))
					if rng.IntN(20) == 0 {
						size = int64(1<<20 + rng.IntN(2<<20))
					}
					b, err := allocs[(g+rng.IntN(2))%len(allocs)](size)
					if err != nil {
						fail("allocate: %v", err)
						continue
					}
					open = append(open, b)
				}
				for _, b := range open {
					_ = b.Close()
				}
			})
		}
		workers.Wait()
		close(done)
		readers.Wait()
		errs.Range(func(k, _ any) bool {
			t.Error(k)
			return true
		})
		s := p.Stats()
		v, _ := hsSnap(p)
		assert.Zero(t, s.ActiveBlocks)
		assert.Zero(t, s.InactiveSplit.All.Current, "an idle pool")
		assert.Zero(t, s.InactiveSplitBytes.All.Current, "an idle pool")
		assert.Equal(t, v.splitBlocks[0]+v.splitBlocks[1], s.InactiveSplit.All.Current)
		assert.Equal(t, v.heldBytes, s.HeldBytes)
		assert.Equal(t, v.managed, s.ManagedBytes)
		require.NoError(t, mempool.CheckBlockCounts(p))
		require.NoError(t, p.Close())
	}
}

// TestHostileSplitsLifecycle: random runs on several queues through
// StopHolding, then Close with buffers open, which are closed after; the
// checks of every step hold throughout.
func TestHostileSplitsLifecycle(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []mempool.Option
	}{
		{"arena", []mempool.Option{mempool.WithArena()}},
		{"arena no drop safety", []mempool.Option{mempool.WithArena(), mempool.WithDropSafety(false)}},
		{"arena sanitizer", []mempool.Option{mempool.WithArena(), mempool.WithSanitizer(), mempool.WithSanitizerOutput(io.Discard)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := cltest.Queue(t)
			q2 := cltest.SecondQueue(t, q, 0)
			q3 := cltest.SecondQueue(t, q, cl.QueueOutOfOrder)
			for seed := range uint64(hsSeeds) {
				p := hsPool(t, q, tc.opts...)
				a2, a3 := p.On(q2), p.On(q3)
				allocs := []func(int64) (*mempool.PooledBuffer, error){p.Allocate, a2.Allocate, a3.Allocate}
				frees := []func() error{p.FreeHeld, a2.FreeHeld}
				hsRun(t, p, allocs, frees, seed, 300, true, func(step int) string {
					switch step {
					case 100:
						require.NoError(t, p.StopHolding())
						return "StopHolding"
					case 200:
						_ = p.Close() // the sanitizer reports the open blocks as leaks
						return "Close"
					}
					return ""
				})
				require.NoError(t, p.Close())
			}
		})
	}
}

// TestHostileSplitsSanitizerClosedPeak: after Close, the sanitizer puts a
// block given back in the quarantine and takes it out at once, in two
// holds of the lock, each with its sync: the block counts as an inactive
// split in between. Closing c, which merges with the free tail, leaves
// the inactive splits at 1 (the tail), but their peak, reset to 1 just
// before, comes out 2. On one goroutine Stats never shows 2 (torch would
// not count it: it merges at once); a concurrent Stats could catch it.
func TestHostileSplitsSanitizerClosedPeak(t *testing.T) {
	q := cltest.Queue(t)
	p := hsPool(t, q, mempool.WithArena(), mempool.WithSanitizer(), mempool.WithSanitizerOutput(io.Discard))
	a := hsAlloc(t, p.Allocate, 4096)
	c := hsAlloc(t, p.Allocate, 4096) // [a][c][tail]
	_ = p.Close()                     // a and c reported leaked; they stay valid
	p.ResetPeak()
	s := p.Stats()
	require.Equal(t, int64(1), s.InactiveSplit.All.Current, "the tail")
	require.Equal(t, int64(1), s.InactiveSplit.All.Peak)
	require.NoError(t, c.Close()) // c merges with the tail: still 1
	s = p.Stats()
	require.Equal(t, int64(1), s.InactiveSplit.All.Current, "c merged with the tail")
	require.Equal(t, hsSplitShown(p), s.InactiveSplit.All.Current)
	assert.Equal(t, int64(1), s.InactiveSplit.All.Peak, "the most shown since ResetPeak")
	require.NoError(t, a.Close())
	s = p.Stats()
	assert.Zero(t, s.InactiveSplit.All.Current)
}

// TestHostileSplitsTorchBlockCount: three 4 KiB blocks a, b, c cut from
// one segment, a and b closed. Torch's CUDACachingAllocator merges a and
// b at once and reports inactive_split 2 (a+b, and the tail after c).
// The pool counts held blocks as they are cut, as Stats documents: a and
// b wait apart in the queue's cache (the arena's quick lists do the
// same), so 3. The bytes are torch's.
func TestHostileSplitsTorchBlockCount(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q, mempool.WithArena())
	a, b, c := hsAlloc(t, p.Allocate, 4096), hsAlloc(t, p.Allocate, 4096), hsAlloc(t, p.Allocate, 4096)
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	s := p.Stats()
	segs := p.Snapshot().Segments
	require.Len(t, segs, 1)
	assert.Equal(t, segs[0].Size-4096, s.InactiveSplitBytes.All.Current, "bytes: all but c")
	assert.Equal(t, int64(3), s.InactiveSplit.All.Current, "a and b apart, and the tail (torch: 2, a+b merged)")
	require.NoError(t, c.Close())
}
