package mempool_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
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

// s39aTally is a hook that keeps, from the events alone, what the pool's
// statistics say: the managed bytes (alloc_after minus segment_free, as
// the doc of SegmentFree says a hook can), the device allocations and
// frees, the blocks open, and the refusals.
type s39aTally struct {
	mu                   sync.Mutex
	managed              int64
	allocs, segFrees     int64
	open                 map[uint64]int64 // block id -> size requested
	mallocBefore, after  int64
	freeBefore, freeAfer int64
	ooms                 int64
	bad                  []string
}

func newS39aTally() *s39aTally { return &s39aTally{open: map[uint64]int64{}} }

func (h *s39aTally) Handle(e mempool.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch e.Kind {
	case mempool.AllocAfter:
		if e.Err == nil {
			h.managed += e.AllocSize
			h.allocs++
		}
	case mempool.SegmentFree:
		h.managed -= e.Size
		h.segFrees++
	case mempool.MallocBefore:
		h.mallocBefore++
	case mempool.MallocAfter:
		h.after++
		if e.Err != nil {
			if errors.Is(e.Err, mempool.ErrOutOfMemory) {
				h.ooms++
			}
			break
		}
		if _, dup := h.open[e.BlockID]; dup {
			h.bad = append(h.bad, fmt.Sprintf("malloc_after of block %x already open", e.BlockID))
		}
		h.open[e.BlockID] = e.Size
	case mempool.FreeBefore:
		h.freeBefore++
	case mempool.FreeAfter:
		h.freeAfer++
		n, ok := h.open[e.BlockID]
		switch {
		case !ok:
			h.bad = append(h.bad, fmt.Sprintf("free_after of block %x never allocated", e.BlockID))
		case n != e.Size:
			h.bad = append(h.bad, fmt.Sprintf("free_after of block %x: size %d, allocated with %d", e.BlockID, e.Size, n))
		}
		delete(h.open, e.BlockID)
	}
}

// s39aRandomRun is a random single-goroutine run that adds to
// randomRun's (hostile_test.go) a device budget (allocator.Budget: the
// device refuses), WithMaxSplitSize, WithLeadingBits, ResetPeak and
// ResetAccumulated, and a hook that counts every event; after every step
// it checks what randomRun does not: the budget's live bytes and the
// hook's managed bytes are the pool's, the hook's open blocks, device
// allocations, frees and refusals are the pool's, the peaks never fall
// between resets, the totals since a reset are the currents' moves, and
// a request that grew the pool kept it under its limit.
func s39aRandomRun(t *testing.T, kind string, arena, hooked bool, seed uint64) {
	q := cltest.Queue(t)
	if kind == "svm" {
		q = cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
	}
	qs := []*cl.CommandQueue{q, cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, cl.QueueOutOfOrder)}
	rng := rand.New(rand.NewPCG(39, seed))
	var opts []mempool.Option
	if arena {
		opts = append(opts, mempool.WithArena())
		if rng.IntN(2) == 0 {
			opts = append(opts, mempool.WithMaxSplitSize([]int64{1 << 20, 2 << 20, 64 << 10}[rng.IntN(3)]))
		}
	}
	lb := []int{0, 2, 4, 8}[rng.IntN(4)]
	opts = append(opts, mempool.WithLeadingBits(lb))
	dropSafety := seed%3 != 1
	opts = append(opts, mempool.WithDropSafety(dropSafety))
	budgetBytes := int64([]int{6, 10, 24}[rng.IntN(3)]) << 20
	if kind == "sanitized" {
		opts = append(opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil))
		dropSafety = true // the sanitizer keeps it on
	}
	var p *mempool.Pool
	var live func() (int64, int64) // the device's live bytes: the budget's, and the counting allocator's
	switch kind {
	case "svm":
		imm, err := allocator.NewImmediateSVM(q, false)
		require.NoError(t, err)
		budget := allocator.NewSVMBudget(imm, budgetBytes)
		p, err = mempool.NewSVM(budget, opts...)
		require.NoError(t, err)
		live = func() (int64, int64) { return budget.Live(), budget.Live() }
	default:
		var a allocator.Allocator
		var err error
		if kind == "pinned" {
			a, err = allocator.NewPinned(q)
		} else {
			a, err = allocator.NewImmediate(q, cl.MemReadWrite)
		}
		require.NoError(t, err)
		count := allocator.NewCounting(a)
		budget := allocator.NewBudget(count, budgetBytes)
		p, err = mempool.New(budget, opts...)
		require.NoError(t, err)
		live = func() (int64, int64) { return budget.Live(), count.Stats().LiveBytes }
		t.Cleanup(func() {
			if t.Failed() {
				return
			}
			c := count.Stats()
			require.Zero(t, c.Live, "device buffers never freed")
			require.Zero(t, c.BadFrees)
		})
	}
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		require.NoError(t, p.Close())
		b, c := live()
		require.Zero(t, b)
		require.Zero(t, c)
	})
	var tally *s39aTally
	if hooked {
		tally = newS39aTally()
		remove := p.AddHook(tally)
		t.Cleanup(remove)
	}
	t.Logf("%s: arena %v hooked %v leading bits %d drop safety %v budget %d", kind, arena, hooked, lb, dropSafety, budgetBytes)

	sizes := []int64{0, 1, 100, 1000, 4096, 5000, 65536, 1 << 20, 1<<20 + 1, 3 << 20, 5 << 20}
	open := map[*mempool.PooledBuffer]int64{}
	var list []*mempool.PooledBuffer
	remove := func(i int) *mempool.PooledBuffer {
		b := list[i]
		list = append(list[:i], list[i+1:]...)
		delete(open, b)
		return b
	}
	// Baselines: the stats at the last reset.
	base := p.Stats()
	var allocsBase, freesBase int64 // the hook's counts at the last ResetAccumulated
	var oomsBase int64
	var reqs int64 // requests since the last ResetAccumulated
	prev := base
	reclaimed := int64(0)
	stopped := false
	for step := range cltest.Size(q, 60, 500) {
		op := rng.IntN(22)
		name := fmt.Sprintf("seed %d step %d op %d", seed, step, op)
		before := p.Stats()
		grew := false
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
			reqs++
			if err != nil {
				require.ErrorIs(t, err, mempool.ErrOutOfMemory, name)
				var oom *mempool.OutOfMemoryError
				require.ErrorAs(t, err, &oom, name)
				require.Equal(t, size, oom.Requested, name)
				break
			}
			grew = p.Stats().DeviceAllocs > before.DeviceAllocs
			open[b] = size
			list = append(list, b)
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
			require.NoError(t, p.SetLimit([]int64{0, 0, 4 << 20, 8 << 20, 1, 3 << 20}[rng.IntN(6)]), name)
		case op == 17:
			if len(list) > 0 {
				require.NoError(t, list[rng.IntN(len(list))].RecordQueue(qs[rng.IntN(len(qs))]), name)
			}
		case op == 18 && !stopped && seed%4 == 3 && rng.IntN(10) == 0:
			require.NoError(t, p.StopHolding(), name)
			stopped = true
		case op == 19 && dropSafety:
			if _, err := p.On(qs[rng.IntN(len(qs))]).Allocate(4096); err == nil {
				reqs++
				reclaimed++
				waitReclaimed(p, reclaimed)
				require.Equal(t, reclaimed, p.Stats().Reclaimed, name)
				// Reclaimed counts the buffer before the finalizer gives
				// it back (a sanitized pool's check takes a while on
				// Oclgrind): wait for that too.
				for deadline := time.Now().Add(10 * time.Second); p.Stats().ActiveBlocks > len(open) && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
			} else {
				reqs++
			}
		case op == 20:
			p.ResetPeak()
			s := p.Stats()
			for _, g := range []mempool.StatGroup{s.Allocation, s.AllocatedBytes, s.RequestedBytes, s.InactiveSplit, s.InactiveSplitBytes, s.Segment, s.ReservedBytes} {
				for _, st := range []mempool.Stat{g.All, g.Small, g.Large} {
					require.Equal(t, st.Current, st.Peak, name+": ResetPeak sets every peak to its current value")
				}
			}
			require.Equal(t, s.ManagedBytes, s.PeakManagedBytes, name)
			require.Equal(t, s.ActiveBytes, s.PeakActiveBytes, name)
			prev = s
		case op == 21:
			p.ResetAccumulated()
			base = p.Stats()
			reqs, reclaimed = 0, 0
			if tally != nil {
				tally.mu.Lock()
				allocsBase, freesBase, oomsBase = tally.allocs, tally.segFrees, tally.ooms
				tally.mu.Unlock()
			}
			require.Zero(t, base.Hits, name)
			require.Zero(t, base.Misses, name)
			require.Zero(t, base.DeviceAllocs, name)
			require.Zero(t, base.DeviceFrees, name)
			require.Zero(t, base.OOMs, name)
			for _, g := range []mempool.StatGroup{base.Allocation, base.AllocatedBytes, base.RequestedBytes, base.InactiveSplit, base.InactiveSplitBytes, base.Segment, base.ReservedBytes} {
				for _, st := range []mempool.Stat{g.All, g.Small, g.Large} {
					require.Zero(t, st.Allocated, name)
					require.Zero(t, st.Freed, name)
				}
			}
		}
		s := p.Stats()
		// The device's view.
		bl, cb := live()
		require.Equal(t, cb, s.ManagedBytes, name+": the counting allocator's live bytes are the managed bytes")
		require.Equal(t, bl, s.ManagedBytes, name+": the budget's live bytes are the managed bytes")
		require.LessOrEqual(t, s.ManagedBytes, budgetBytes, name)
		if grew && s.Limit > 0 {
			require.LessOrEqual(t, s.ManagedBytes, s.Limit, name+": a request that grew the pool kept it within its limit")
		}
		// Active blocks.
		var activeBytes int64
		for _, n := range open {
			activeBytes += n
		}
		require.Equal(t, len(open), s.ActiveBlocks, name)
		require.Equal(t, activeBytes, s.ActiveBytes, name)
		require.Equal(t, s.ManagedBytes, s.AllocatedBytes.All.Current+s.HeldBytes, name+": managed = allocated + held")
		// Snapshot.
		snap := p.Snapshot()
		var segBytes, held int64
		var heldN, activeN int
		for _, seg := range snap.Segments {
			segBytes += seg.Size
			for _, b := range seg.Blocks {
				if b.State == mempool.StateActive {
					activeN++
				} else {
					heldN++
					held += b.Size
				}
			}
		}
		require.Equal(t, s.ManagedBytes, segBytes, name)
		require.Equal(t, s.HeldBytes, held, name)
		require.Equal(t, s.HeldBlocks, heldN, name)
		require.Equal(t, s.ActiveBlocks, activeN, name)
		require.Equal(t, s.PeakManagedBytes, snap.PeakManagedBytes, name)
		// Peaks never fall between resets, and hold the current values.
		require.GreaterOrEqual(t, s.PeakManagedBytes, prev.PeakManagedBytes, name)
		require.GreaterOrEqual(t, s.PeakActiveBytes, prev.PeakActiveBytes, name)
		require.GreaterOrEqual(t, s.PeakManagedBytes, s.ManagedBytes, name)
		require.GreaterOrEqual(t, s.PeakActiveBytes, s.ActiveBytes, name)
		pg := []mempool.StatGroup{prev.Allocation, prev.AllocatedBytes, prev.RequestedBytes, prev.InactiveSplit, prev.InactiveSplitBytes, prev.Segment, prev.ReservedBytes}
		bg := []mempool.StatGroup{base.Allocation, base.AllocatedBytes, base.RequestedBytes, base.InactiveSplit, base.InactiveSplitBytes, base.Segment, base.ReservedBytes}
		for i, g := range []mempool.StatGroup{s.Allocation, s.AllocatedBytes, s.RequestedBytes, s.InactiveSplit, s.InactiveSplitBytes, s.Segment, s.ReservedBytes} {
			for j, st := range []mempool.Stat{g.All, g.Small, g.Large} {
				pst := []mempool.Stat{pg[i].All, pg[i].Small, pg[i].Large}[j]
				bst := []mempool.Stat{bg[i].All, bg[i].Small, bg[i].Large}[j]
				what := fmt.Sprintf("%s: group %d part %d", name, i, j)
				require.GreaterOrEqual(t, st.Peak, pst.Peak, what+": peak fell")
				require.GreaterOrEqual(t, st.Peak, st.Current, what)
				require.Equal(t, st.Current-bst.Current, st.Allocated-st.Freed, what+": allocated - freed since the reset")
			}
		}
		prev = s
		// Requests: each is a hit or a miss, counted on its queue.
		require.Equal(t, reqs, s.Hits+s.Misses, name+": hits + misses are the requests")
		var qreq, qhits int64
		for _, qs := range s.Queues {
			qreq += qs.Requests
			qhits += qs.Hits
		}
		require.Equal(t, s.Hits+s.Misses, qreq, name+": the queues' requests")
		require.Equal(t, s.Hits, qhits, name+": the queues' hits")
		// The hook's view.
		if tally != nil {
			tally.mu.Lock()
			require.Empty(t, tally.bad, name)
			require.Equal(t, s.ManagedBytes, tally.managed, name+": alloc_after - segment_free sizes are the managed bytes")
			require.Equal(t, s.DeviceAllocs, tally.allocs-allocsBase, name+": alloc_after events are the device allocations")
			require.Equal(t, s.DeviceFrees, tally.segFrees-freesBase, name+": segment_free events are the device frees")
			require.Equal(t, s.OOMs, tally.ooms-oomsBase, name+": failed malloc_after events are the refusals")
			require.Equal(t, s.ActiveBlocks, len(tally.open), name+": the hook's open blocks")
			require.Equal(t, tally.mallocBefore, tally.after, name)
			require.Equal(t, tally.freeBefore, tally.freeAfer, name)
			tally.mu.Unlock()
		}
	}
	for _, b := range list {
		require.NoError(t, b.Close())
	}
}

// s39aRandomRun over each kind of pool, policy and hook, over seeds.
func TestHostileS39aRandomBudgetHooksResets(t *testing.T) {
	seeds := uint64(3) // 8 in the review; 3 keep make test's time
	if testing.Short() {
		seeds = 1
	}
	for _, kind := range []string{"buffers", "svm", "pinned", "sanitized"} {
		for _, arena := range []bool{false, true} {
			for _, hooked := range []bool{false, true} {
				for seed := range seeds {
					t.Run(fmt.Sprintf("%s/arena=%v/hooked=%v/seed=%d", kind, arena, hooked, seed), func(t *testing.T) {
						s39aRandomRun(t, kind, arena, hooked, seed)
					})
				}
			}
		}
	}
}

// Goroutines on three queues (one out of order) allocate
// and close under a device budget while others lower and raise the limit,
// free what is held (the pool's and a queue's), reset the peaks and read
// Stats and Snapshot; a hook counts every event. Once they are done, the
// hook's managed bytes, device allocations and frees, refusals and open
// blocks are the pool's, and the budget's live bytes the managed bytes.
func TestHostileS39aConcurrentBudgetHookTally(t *testing.T) {
	cltest.Watchdog(t, 240*time.Second)
	for _, arena := range []bool{false, true} {
		for _, hooked := range []bool{false, true} {
			t.Run(fmt.Sprintf("arena=%v/hooked=%v", arena, hooked), func(t *testing.T) {
				q := cltest.Queue(t)
				qs := []*cl.CommandQueue{q, cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, cl.QueueOutOfOrder)}
				imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
				require.NoError(t, err)
				count := allocator.NewCounting(imm)
				budget := allocator.NewBudget(count, 12<<20)
				opts := policyOptions(arena)
				p, err := mempool.New(budget, opts...)
				require.NoError(t, err)
				tally := newS39aTally()
				if hooked {
					defer p.AddHook(tally)()
				}
				var wg sync.WaitGroup
				var sink errSink
				stop := make(chan struct{})
				sizes := []int64{1, 100, 1000, 4096, 5000, 65536, 1 << 20, 1<<20 + 1, 3 << 20}
				var requests atomic.Int64
				for g := range 6 {
					wg.Go(func() {
						rng := rand.New(rand.NewPCG(uint64(g), 39))
						on := p.On(qs[g%len(qs)])
						var mine []*mempool.PooledBuffer
						for i := range cltest.Size(q, 60, 400) {
							if len(mine) > 0 && (len(mine) > 6 || rng.IntN(2) == 0) {
								k := rng.IntN(len(mine))
								sink.add(mine[k].Close())
								mine = append(mine[:k], mine[k+1:]...)
								continue
							}
							var b *mempool.PooledBuffer
							var err error
							if i%5 == 0 {
								b, err = p.Allocate(sizes[rng.IntN(len(sizes))])
							} else {
								b, err = on.Allocate(sizes[rng.IntN(len(sizes))])
							}
							requests.Add(1)
							if err != nil {
								if !errors.Is(err, mempool.ErrOutOfMemory) {
									sink.add(err)
								}
								continue
							}
							mine = append(mine, b)
						}
						for _, b := range mine {
							sink.add(b.Close())
						}
					})
				}
				var side sync.WaitGroup
				side.Go(func() {
					rng := rand.New(rand.NewPCG(7, 7))
					for {
						select {
						case <-stop:
							return
						default:
						}
						switch rng.IntN(6) {
						case 0:
							sink.add(p.SetLimit([]int64{0, 4 << 20, 8 << 20, 2 << 20}[rng.IntN(4)]))
						case 1:
							sink.add(p.FreeHeld())
						case 2:
							sink.add(p.On(qs[rng.IntN(len(qs))]).FreeHeld())
						case 3:
							p.ResetPeak()
						case 4:
							pooltest.CheckStats(t, p.Stats())
						case 5:
							_ = p.Snapshot()
						}
						time.Sleep(time.Millisecond)
					}
				})
				wg.Wait()
				close(stop)
				side.Wait()
				require.NoError(t, sink.err())
				require.NoError(t, p.SetLimit(0))
				s := p.Stats()
				require.Zero(t, s.ActiveBlocks)
				require.Equal(t, budget.Live(), s.ManagedBytes, "the budget's live bytes are the managed bytes")
				require.Equal(t, count.Stats().LiveBytes, s.ManagedBytes)
				require.Equal(t, count.Stats().Allocs, s.DeviceAllocs)
				require.Equal(t, count.Stats().Frees, s.DeviceFrees)
				require.Equal(t, requests.Load(), s.Hits+s.Misses, "hits + misses are the requests")
				if hooked {
					tally.mu.Lock()
					assert.Empty(t, tally.bad)
					assert.Equal(t, s.ManagedBytes, tally.managed, "alloc_after - segment_free sizes are the managed bytes")
					assert.Equal(t, s.DeviceAllocs, tally.allocs)
					assert.Equal(t, s.DeviceFrees, tally.segFrees)
					assert.Equal(t, s.OOMs, tally.ooms)
					assert.Empty(t, tally.open)
					tally.mu.Unlock()
				}
				require.NoError(t, p.Close())
				assert.Zero(t, count.Stats().Live)
				assert.Zero(t, count.Stats().BadFrees)
				assert.Zero(t, budget.Live())
			})
		}
	}
}
