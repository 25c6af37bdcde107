package mempool_test

// Hostile review s33a: the arena policy (WithArena) and the out-of-memory
// ladder, end to end. Every test in this file PASSES on the code reviewed:
// they are explorations that found no defect, each pinning a promise of
// the package doc (quoted in its comment) with the device's own count of
// allocations and frees (allocator.Counting) beside the pool's figures.

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"sync"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/internal/policy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s33aDevice checks that the pool's figures are what the device holds:
// ManagedBytes is the bytes of live device buffers, DeviceAllocs less
// DeviceFrees their number, and Held+Active within Managed.
func s33aDevice(t *testing.T, f *fixture, what string) mempool.Stats {
	t.Helper()
	s, c := f.pool.Stats(), f.count.Stats()
	assert.Equal(t, c.LiveBytes, s.ManagedBytes, "%s: ManagedBytes vs bytes live on the device", what)
	assert.Equal(t, int64(c.Live), s.DeviceAllocs-s.DeviceFrees, "%s: DeviceAllocs-DeviceFrees vs buffers live", what)
	assert.Equal(t, c.Allocs, s.DeviceAllocs, "%s: DeviceAllocs", what)
	assert.Equal(t, c.Frees, s.DeviceFrees, "%s: DeviceFrees", what)
	assert.LessOrEqual(t, s.ActiveBytes+s.HeldBytes, s.ManagedBytes, "%s: active+held within managed", what)
	return s
}

// s33aFits reports whether the device's largest buffer holds n bytes
// (Oclgrind's is 128 MiB).
func s33aFits(f *fixture, n int64) bool {
	m := f.q.Device().MaxMemAllocSize
	return m <= 0 || n <= m
}

// s33aSizes are sizes at and just over the boundaries of the arena.
func s33aSizes() []int64 {
	var out []int64
	for _, b := range []int64{1, 512, policy.TinySegment, policy.GrowthUnit, policy.FirstSegment,
		policy.SmallRequest, 2 * policy.SmallRequest, 128 << 20} {
		out = append(out, b-1, b, b+1)
	}
	return out
}

// PASSES: FreeHeld after blocks of every boundary size, closed on a queue
// (its cache) and on none (the quick lists), leaves the pool empty, and
// the figures match the device at each step.
func TestHostileS33AFreeHeldEmptiesArenaAtBoundaries(t *testing.T) {
	f := newFixture(t, nil, mempool.WithArena())
	on := f.pool.On(f.q)
	for _, n := range s33aSizes() {
		if n <= 0 || !s33aFits(f, n) {
			continue
		}
		a, err := on.Allocate(n)
		require.NoError(t, err, n)
		b, err := f.pool.Allocate(n)
		require.NoError(t, err, n)
		s33aDevice(t, f, fmt.Sprintf("two of %d open", n))
		require.NoError(t, a.Close())
		require.NoError(t, b.Close())
		s33aDevice(t, f, fmt.Sprintf("two of %d closed", n))
	}
	require.NoError(t, f.pool.FreeHeld())
	s := s33aDevice(t, f, "after FreeHeld")
	assert.Zero(t, s.ManagedBytes, "FreeHeld frees what the pool holds")
	assert.Zero(t, s.HeldBlocks)
	assert.Zero(t, s.HeldBytes)
}

// SetLimit below what an arena manages, with every block given back but
// waiting in queue caches and the quick lists: "lowering it below what the
// pool manages frees held segments, largest first, until the pool is
// within it".
func TestHostileS33ASetLimitFreesCachedArena(t *testing.T) {
	f := newFixture(t, nil, mempool.WithArena())
	q2 := cltest.SecondQueue(t, f.q, 0)
	on1, on2 := f.pool.On(f.q), f.pool.On(q2)
	var bs []*mempool.PooledBuffer
	for i := range 40 {
		n := int64(1000 + 512*(i%5))
		on := on1
		if i%2 == 1 {
			on = on2
		}
		b, err := on.Allocate(n)
		require.NoError(t, err)
		bs = append(bs, b)
	}
	for _, b := range bs {
		require.NoError(t, b.Close())
	}
	require.Positive(t, f.pool.Stats().ManagedBytes)
	require.NoError(t, f.pool.SetLimit(1))
	s := s33aDevice(t, f, "after SetLimit(1)")
	assert.LessOrEqual(t, s.ManagedBytes, int64(1), "SetLimit frees held segments until within the limit")
	require.NoError(t, f.pool.SetLimit(0))
}

// Sizes near math.MaxInt64 and the device's largest buffer, on an arena
// with a limit, a Budget, and neither: refused with ErrOutOfMemory or an
// error, no panic, and nothing changed but the OOM count.
func TestHostileS33AHugeSizesChangeNothing(t *testing.T) {
	for _, by := range []string{"none", "limit", "budget"} {
		t.Run(by, func(t *testing.T) {
			f := newCappedFixture(t, by, 8<<20, nil, mempool.WithArena())
			if by == "none" {
				f = newFixture(t, nil, mempool.WithArena())
			}
			keep, err := f.pool.Allocate(1000)
			require.NoError(t, err)
			dev := f.q.Device()
			maxAlloc := dev.MaxMemAllocSize
			sizes := []int64{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 - 4095, 1 << 62, 1 << 60, (1 << 60) + 1,
				maxAlloc + 1, dev.GlobalMemSize + 1, math.MinInt64, -1}
			for _, n := range sizes {
				before := countersOf(f.pool.Stats())
				oomsBefore := f.pool.Stats().OOMs
				var b *mempool.PooledBuffer
				require.NotPanics(t, func() { b, err = f.pool.Allocate(n) }, n)
				if !assert.Error(t, err, "Allocate(%d)", n) {
					require.NoError(t, b.Close())
					continue
				}
				if n > 0 {
					assert.ErrorIs(t, err, mempool.ErrOutOfMemory, "Allocate(%d)", n)
					assert.Equal(t, oomsBefore+1, f.pool.Stats().OOMs, "Allocate(%d) counts one OOM", n)
				}
				assert.Equal(t, before, countersOf(f.pool.Stats()), "Allocate(%d) changed the pool", n)
				s33aDevice(t, f, fmt.Sprintf("after Allocate(%d)", n))
			}
			require.NoError(t, keep.Close())
		})
	}
}

// A request exactly the size of the limit, in an empty arena, must be
// served (its own block fits an empty pool); one byte more must not, and
// must fail at once, keeping what the pool holds.
func TestHostileS33ARequestOfTheWholeLimit(t *testing.T) {
	for _, limit := range []int64{4 << 10, policy.GrowthUnit, policy.FirstSegment, policy.SmallRequest, policy.SmallRequest + 4096, 3 << 20} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			f := newFixture(t, nil, mempool.WithArena(), mempool.WithLimit(limit))
			b, err := f.pool.Allocate(limit)
			require.NoError(t, err, "a request of the whole limit fits an empty pool")
			s33aDevice(t, f, "whole limit")
			require.NoError(t, b.Close())
			before := f.pool.Stats().ManagedBytes
			_, err = f.pool.Allocate(limit + 1)
			require.ErrorIs(t, err, mempool.ErrOutOfMemory)
			s := s33aDevice(t, f, "limit+1")
			assert.Equal(t, before, s.ManagedBytes, "fails at once, keeping what the pool holds")
			// And again, after a small block took part of it: the ladder
			// must free the held segment to serve the whole limit.
			small, err := f.pool.Allocate(100)
			require.NoError(t, err)
			require.NoError(t, small.Close())
			b, err = f.pool.Allocate(limit)
			require.NoError(t, err, "the ladder frees the held small block's segment")
			require.NoError(t, b.Close())
			s33aDevice(t, f, "end")
		})
	}
}

// A tight Budget under the arena: allocate until refused, then free all
// and allocate again; the figures follow the device throughout, and an
// out-of-memory's figures are the pool's at that moment.
func TestHostileS33ATightBudgetFillAndRefill(t *testing.T) {
	for _, budget := range []int64{600 << 10, 1 << 20, 5<<20 + 4096} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			f := newCappedFixture(t, "budget", budget, nil, mempool.WithArena())
			rng := rand.New(rand.NewSource(budget))
			for round := range 3 {
				var bs []*mempool.PooledBuffer
				for i := 0; ; i++ {
					require.Less(t, i, 10000, "a tight budget never refused")
					n := int64(1 + rng.Intn(200<<10))
					b, err := f.pool.Allocate(n)
					if err != nil {
						require.ErrorIs(t, err, mempool.ErrOutOfMemory)
						require.ErrorIs(t, err, cl.ErrMemObjectAllocationFailure, "the device's refusal wrapped")
						var oom *mempool.OutOfMemoryError
						require.ErrorAs(t, err, &oom)
						s := s33aDevice(t, f, fmt.Sprintf("round %d refused %d", round, n))
						assert.Equal(t, s.ManagedBytes, oom.ManagedBytes)
						assert.Equal(t, s.ActiveBytes, oom.ActiveBytes)
						assert.Equal(t, s.HeldBytes, oom.HeldBytes)
						assert.Equal(t, s.ActiveBlocks, oom.ActiveBlocks)
						// The ladder freed all it could and tried the
						// request's own size: it truly does not fit.
						assert.Greater(t, f.count.Stats().LiveBytes+n, budget, "refused %d with room on the device", n)
						break
					}
					bs = append(bs, b)
					if i%7 == 3 {
						require.NoError(t, bs[0].Close())
						bs = bs[1:]
					}
				}
				for _, b := range bs {
					require.NoError(t, b.Close())
				}
				s33aDevice(t, f, fmt.Sprintf("round %d closed", round))
			}
		})
	}
}

// PASSES unless it hangs or races: goroutines on several queues under a
// limit (or a Budget) that forces the ladder on most misses, with
// FreeHeld and SetLimit racing them. Every error is an out-of-memory,
// nothing hangs, and the figures match the device at the end.
func TestHostileS33AConcurrentLadderUnderPressure(t *testing.T) {
	for _, by := range []string{"limit", "budget"} {
		t.Run(by, func(t *testing.T) {
			const total = 3 << 20
			f := newCappedFixture(t, by, total, nil, mempool.WithArena())
			qs := []*cl.CommandQueue{f.q, cltest.SecondQueue(t, f.q, 0), cltest.SecondQueue(t, f.q, cl.QueueOutOfOrder)}
			var (
				wg   sync.WaitGroup
				mu   sync.Mutex
				bad  []error
				ooms int
			)
			ok := withinWork(t, "goroutines under pressure", func() {
				for g := range 6 {
					on := f.pool.On(qs[g%len(qs)])
					wg.Go(func() {
						rng := rand.New(rand.NewSource(int64(g)))
						var mine []*mempool.PooledBuffer
						for i := range 150 {
							var n int64
							switch rng.Intn(4) {
							case 0:
								n = int64(1 + rng.Intn(512))
							case 1:
								n = int64(1 + rng.Intn(64<<10))
							case 2:
								n = policy.SmallRequest + int64(rng.Intn(3)-1)
							default:
								n = int64(1 + rng.Intn(900<<10))
							}
							var b *mempool.PooledBuffer
							var err error
							if g == 5 {
								b, err = f.pool.Allocate(n)
							} else {
								b, err = on.Allocate(n)
							}
							if err != nil {
								mu.Lock()
								if errors.Is(err, mempool.ErrOutOfMemory) {
									ooms++
								} else {
									bad = append(bad, err)
								}
								mu.Unlock()
							} else {
								mine = append(mine, b)
							}
							if len(mine) > 2 || (err != nil && len(mine) > 0) {
								k := rng.Intn(len(mine))
								if e := mine[k].Close(); e != nil {
									mu.Lock()
									bad = append(bad, e)
									mu.Unlock()
								}
								mine = append(mine[:k], mine[k+1:]...)
							}
							if g == 0 && i%40 == 0 {
								_ = f.pool.FreeHeld()
							}
						}
						for _, b := range mine {
							_ = b.Close()
						}
					})
				}
				wg.Wait()
			})
			if !ok {
				return
			}
			assert.Empty(t, bad)
			t.Logf("%d out-of-memory refusals", ooms)
			require.Zero(t, f.pool.ActiveBlocks())
			s33aDevice(t, f, "after the goroutines")
			// With nothing open, the whole of it serves one request.
			b, err := f.pool.Allocate(total - 4096)
			require.NoError(t, err, "nothing is open: the ladder frees everything held")
			require.NoError(t, b.Close())
			require.NoError(t, f.pool.FreeHeld())
			s := s33aDevice(t, f, "after FreeHeld")
			assert.Zero(t, s.ManagedBytes)
			assert.LessOrEqual(t, s.PeakManagedBytes, int64(total), "never past the limit or the budget")
		})
	}
}

var _ allocator.Allocator = (*injector)(nil)

// Tiny requests fill the whole limit with a tiny segment; a larger request
// that fits in that segment's free blocks must be served once the limit
// refuses it a segment: "No other request takes a tiny segment's blocks
// until the device or the limit refuses it a segment".
func TestHostileS33ATinySegmentGivesWayUnderLimit(t *testing.T) {
	for _, by := range []string{"limit", "budget"} {
		t.Run(by, func(t *testing.T) {
			f := newCappedFixture(t, by, policy.TinySegment, nil, mempool.WithArena())
			tiny, err := f.pool.Allocate(8)
			require.NoError(t, err)
			s := s33aDevice(t, f, "one tiny block")
			require.Equal(t, int64(policy.TinySegment), s.ManagedBytes, "a tiny segment")
			b, err := f.pool.Allocate(1024)
			require.NoError(t, err, "the tiny segment's free blocks serve it once refused a segment")
			require.NoError(t, b.Close())
			require.NoError(t, tiny.Close())
			s33aDevice(t, f, "end")
		})
	}
}

// Blocks waiting unmerged (the quick lists, the queue caches) "never make
// the pool grow": under a limit of one segment, four quarter blocks given
// back then serve a request of nearly the whole segment.
func TestHostileS33AUnmergedBlocksNeverMakeThePoolGrow(t *testing.T) {
	for _, by := range []string{"none", "limit", "budget"} {
		t.Run(by, func(t *testing.T) {
			f := newCappedFixture(t, by, policy.FirstSegment, nil, mempool.WithArena())
			if by == "none" {
				f = newFixture(t, nil, mempool.WithArena())
			}
			on := f.pool.On(f.q)
			var bs []*mempool.PooledBuffer
			for i := range 4 {
				var b *mempool.PooledBuffer
				var err error
				if i%2 == 0 {
					b, err = on.Allocate(100 << 10)
				} else {
					b, err = f.pool.Allocate(100 << 10)
				}
				require.NoError(t, err)
				bs = append(bs, b)
			}
			s := s33aDevice(t, f, "four blocks")
			require.Equal(t, int64(1), s.DeviceAllocs)
			for _, b := range bs {
				require.NoError(t, b.Close())
			}
			b, err := on.Allocate(policy.FirstSegment - 4096)
			require.NoError(t, err)
			s = s33aDevice(t, f, "one large block")
			assert.Equal(t, int64(1), s.DeviceAllocs, "the blocks waiting merged: the pool did not grow")
			assert.Zero(t, s.OOMRetries, "and needed no retry")
			require.NoError(t, b.Close())
		})
	}
}

// Close of an arena with blocks open (two of one segment, one of another,
// and blocks waiting in caches): the held ones are freed at once, the open
// ones stay valid and free their segment when the last is closed.
func TestHostileS33ACloseWithBlocksOpen(t *testing.T) {
	f := newFixture(t, nil, mempool.WithArena(), mempool.WithLimit(8<<20))
	on := f.pool.On(f.q)
	a, err := on.Allocate(1000)
	require.NoError(t, err)
	b, err := on.Allocate(2000)
	require.NoError(t, err)
	big, err := on.Allocate(3 << 20)
	require.NoError(t, err)
	c, err := on.Allocate(1000)
	require.NoError(t, err)
	require.NoError(t, c.Close()) // waits in the queue's cache
	require.NoError(t, f.pool.Close())
	s := s33aDevice(t, f, "closed with three open")
	assert.Equal(t, 3, s.ActiveBlocks)
	assert.False(t, s.Holding)
	_, err = on.Allocate(1000)
	assert.ErrorIs(t, err, mempool.ErrPoolClosed)
	_, err = f.pool.Allocate(1 << 40)
	assert.ErrorIs(t, err, mempool.ErrPoolClosed, "a closed pool refuses every request alike")
	assert.Zero(t, f.pool.Stats().OOMs, "a closed pool's refusals are not out-of-memory")
	assert.NotNil(t, big.Buffer(), "an open block stays valid")
	require.NoError(t, big.Close())
	s = s33aDevice(t, f, "big closed")
	require.NoError(t, a.Close())
	s33aDevice(t, f, "a closed")
	require.NoError(t, b.Close())
	s = s33aDevice(t, f, "all closed")
	assert.Zero(t, s.ManagedBytes, "each open block's segment is freed when it is closed")
	assert.ErrorIs(t, b.Close(), mempool.ErrClosed)
	assert.NoError(t, f.pool.Close(), "a second Close returns nil")
}

// A segment of its own size, rounded to 4 KiB, for a request past the
// growth step (and over 128 MiB always), as the package doc says.
func TestHostileS33AOwnSegmentSizes(t *testing.T) {
	for _, n := range []int64{policy.FirstSegment + 1, policy.SmallRequest + 1, 3<<20 + 1, 128<<20 + 1} {
		f := newFixture(t, nil, mempool.WithArena())
		if !s33aFits(f, n) {
			continue
		}
		b, err := f.pool.Allocate(n)
		require.NoError(t, err)
		s := s33aDevice(t, f, fmt.Sprint(n))
		assert.Equal(t, (n+4095)&^4095, s.ManagedBytes, "request %d: a segment of its own size, rounded to 4 KiB", n)
		require.NoError(t, b.Close())
	}
}

// s33aHook keeps the managed bytes as the alloc_after and segment_free
// events tell them, and counts the mallocs and their failures.
type s33aHook struct {
	mu                      sync.Mutex
	managed                 int64
	segs                    map[*cl.Buffer]int64
	mallocs, fails, befores int
	bad                     []string
}

func (h *s33aHook) Handle(e mempool.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch e.Kind {
	case mempool.AllocAfter:
		if e.Err == nil {
			if _, dup := h.segs[e.Buffer]; dup {
				h.bad = append(h.bad, "alloc_after of a live segment")
			}
			h.segs[e.Buffer] = e.AllocSize
			h.managed += e.AllocSize
		}
	case mempool.SegmentFree:
		n, ok := h.segs[e.Buffer]
		if !ok {
			h.bad = append(h.bad, fmt.Sprintf("segment_free of an unknown segment of %d", e.Size))
		} else if n != e.Size {
			h.bad = append(h.bad, fmt.Sprintf("segment_free of %d for a segment of %d", e.Size, n))
		}
		delete(h.segs, e.Buffer)
		h.managed -= e.Size
	case mempool.MallocBefore:
		h.befores++
	case mempool.MallocAfter:
		h.mallocs++
		if e.Err != nil {
			h.fails++
		}
	}
}

// The hooks' view of the managed bytes (alloc_after less segment_free) is
// the pool's and the device's through the ladder, shrunk segments, huge
// refusals, SetLimit, StopHolding and Close with blocks open; and every
// refused request reaches the hooks as a malloc that failed.
func TestHostileS33AHooksFollowTheLadder(t *testing.T) {
	for _, by := range []string{"limit", "budget"} {
		t.Run(by, func(t *testing.T) {
			f := newCappedFixture(t, by, 2<<20+8192, nil, mempool.WithArena())
			h := &s33aHook{segs: map[*cl.Buffer]int64{}}
			remove := f.pool.AddHook(h)
			check := func(what string) {
				t.Helper()
				s := s33aDevice(t, f, what)
				h.mu.Lock()
				defer h.mu.Unlock()
				assert.Equal(t, s.ManagedBytes, h.managed, "%s: hooks' managed bytes", what)
				assert.Equal(t, int(s.OOMs), h.fails, "%s: every refusal is a failed malloc", what)
				assert.Equal(t, h.befores, h.mallocs, "%s: malloc_before and malloc_after pair", what)
				assert.Empty(t, h.bad, what)
			}
			rng := rand.New(rand.NewSource(7))
			var open []*mempool.PooledBuffer
			for i := range 300 {
				n := int64(1 + rng.Intn(700<<10))
				if i%50 == 49 {
					n = math.MaxInt64 - int64(i)
				}
				b, err := f.pool.Allocate(n)
				if err == nil {
					open = append(open, b)
				} else {
					require.ErrorIs(t, err, mempool.ErrOutOfMemory)
					for len(open) > 1 {
						k := rng.Intn(len(open))
						require.NoError(t, open[k].Close())
						open = append(open[:k], open[k+1:]...)
						if rng.Intn(2) == 0 {
							break
						}
					}
				}
				if i == 150 {
					require.NoError(t, f.pool.SetLimit(1<<20))
					check("SetLimit lowered")
					require.NoError(t, f.pool.SetLimit(0))
				}
			}
			check("after the loop")
			require.NoError(t, f.pool.StopHolding())
			check("after StopHolding")
			b, err := f.pool.Allocate(1000)
			require.NoError(t, err)
			open = append(open, b)
			require.NoError(t, f.pool.Close())
			check("after Close with blocks open")
			for _, b := range open {
				require.NoError(t, b.Close())
			}
			check("all closed")
			remove()
		})
	}
}

// An oversize segment (WithMaxSplitSize) held whole is freed by the ladder
// for a request it may not serve, when the limit leaves no room.
func TestHostileS33AOversizeHeldGivesWayUnderLimit(t *testing.T) {
	for _, by := range []string{"limit", "budget"} {
		t.Run(by, func(t *testing.T) {
			f := newCappedFixture(t, by, 4<<20, nil, mempool.WithArena(), mempool.WithMaxSplitSize(2<<20))
			big, err := f.pool.Allocate(3 << 20)
			require.NoError(t, err)
			require.NoError(t, big.Close())
			b, err := f.pool.Allocate(1536 << 10)
			require.NoError(t, err, "the held oversize segment goes")
			s := s33aDevice(t, f, "after")
			assert.Equal(t, int64(1), s.DeviceFrees)
			require.NoError(t, b.Close())
			z, err := f.pool.Allocate(0)
			require.NoError(t, err, "a 0-byte request")
			require.NoError(t, z.Close())
			s33aDevice(t, f, "end")
		})
	}
}

// A request within 4 KiB of the device's largest buffer: its own segment
// (rounded to 4 KiB) must not pass MaxMemAllocSize, and the pool must not
// ask the device for more than it can hold.
func TestHostileS33ANearMaxAlloc(t *testing.T) {
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator {
		return allocator.NewBudget(a, 1<<20) // refuses anything large before the device sees it
	}, mempool.WithArena())
	max := f.q.Device().MaxMemAllocSize
	var asked []int64
	var mu sync.Mutex
	h := hookFunc(func(e mempool.Event) {
		if e.Kind == mempool.AllocBefore {
			mu.Lock()
			asked = append(asked, e.Size)
			mu.Unlock()
		}
	})
	remove := f.pool.AddHook(h)
	defer remove()
	for _, n := range []int64{max, max - 1, max - 100, max - 4095, max - 4096, max - 4097} {
		asked = asked[:0]
		_, err := f.pool.Allocate(n)
		require.ErrorIs(t, err, mempool.ErrOutOfMemory, n)
		for _, a := range asked {
			assert.LessOrEqual(t, a, max, "request %d asked the device for %d, past its largest buffer", n, a)
			assert.GreaterOrEqual(t, a, n)
		}
	}
	s33aDevice(t, f, "end")
}

type hookFunc func(mempool.Event)

func (h hookFunc) Handle(e mempool.Event) { h(e) }

// "A request whose own block could not fit even in an empty pool fails at
// once and keeps what the pool holds": held segments, blocks in a queue
// cache and open blocks all stay, and no retry is counted.
func TestHostileS33AOverLimitKeepsWhatThePoolHolds(t *testing.T) {
	const limit = 6 << 20
	f := newFixture(t, nil, mempool.WithArena(), mempool.WithLimit(limit))
	on := f.pool.On(f.q)
	var bs []*mempool.PooledBuffer
	for _, n := range []int64{100, 5000, 300 << 10, 2 << 20, 1000} {
		b, err := on.Allocate(n)
		require.NoError(t, err)
		bs = append(bs, b)
	}
	for _, b := range bs[1:] {
		require.NoError(t, b.Close())
	}
	before := f.pool.Stats()
	_, err := on.Allocate(limit + 1)
	require.ErrorIs(t, err, mempool.ErrOutOfMemory)
	var oom *mempool.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.Nil(t, oom.Err, "the limit's refusal wraps no allocator error")
	after := s33aDevice(t, f, "after")
	assert.Equal(t, before.ManagedBytes, after.ManagedBytes, "keeps what the pool holds")
	assert.Equal(t, before.DeviceFrees, after.DeviceFrees)
	assert.Equal(t, before.OOMRetries, after.OOMRetries, "fails at once")
	assert.Equal(t, before.OOMs+1, after.OOMs)
	require.NoError(t, bs[0].Close())
}
