package mempool_test

// Hostile review s41a: Sets of SVM and pinned pools (and plain ones), with
// hooks on every pool, limits changed at run time, FreeHeld (the Set's and
// a queue's), StopHolding, Stats readers, and the Set closed under them.
// What the hooks saw must agree with the pools' statistics and with what
// reached the allocators.

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s41aTally keeps, from a pool's events alone, its device allocations and
// frees and its managed bytes.
type s41aTally struct {
	mu               sync.Mutex
	managed          int64
	allocs, segFrees int64
	mallocs, frees   int64
	open             map[uint64]bool
	bad              []string
	lenient          bool // added while blocks were open: frees of blocks it never saw are no error
}

func newS41aTally() *s41aTally { return &s41aTally{open: map[uint64]bool{}} }

func (h *s41aTally) Handle(e mempool.Event) {
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
	case mempool.MallocAfter:
		if e.Err == nil {
			h.mallocs++
			if h.open[e.BlockID] {
				h.bad = append(h.bad, fmt.Sprintf("block %x handed out twice", e.BlockID))
			}
			h.open[e.BlockID] = true
		}
	case mempool.FreeAfter:
		h.frees++
		if !h.open[e.BlockID] && !h.lenient {
			h.bad = append(h.bad, fmt.Sprintf("free_after of block %x not open", e.BlockID))
		}
		delete(h.open, e.BlockID)
	}
}

// s41aCountedSet makes a Set whose pools' allocators, made by mk, are
// wrapped in allocator.Counting, and returns the sums of their counts.
func s41aCountedSet(mk func(*cl.CommandQueue) (allocator.Allocator, error), opts ...mempool.Option) (*mempool.Set, func() (allocs, frees, live int64)) {
	var mu sync.Mutex
	var counts []*allocator.Counting
	s := mempool.NewSet(func(q *cl.CommandQueue) (allocator.Allocator, error) {
		a, err := mk(q)
		if err != nil {
			return nil, err
		}
		c := allocator.NewCounting(a)
		mu.Lock()
		counts = append(counts, c)
		mu.Unlock()
		return c, nil
	}, opts...)
	return s, func() (a, f, l int64) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range counts {
			st := c.Stats()
			a, f, l = a+st.Allocs, f+st.Frees, l+int64(st.Live)
		}
		return
	}
}

// s41aSetKind makes a Set of one kind of pool, and says how to check what
// reached its allocators.
type s41aSetKind struct {
	name string
	make func(t *testing.T, q *cl.CommandQueue, opts ...mempool.Option) (*mempool.Set, func() (allocs, frees, live int64))
}

var s41aKinds = []s41aSetKind{
	{"buffers", func(t *testing.T, q *cl.CommandQueue, opts ...mempool.Option) (*mempool.Set, func() (int64, int64, int64)) {
		return s41aCountedSet(func(q *cl.CommandQueue) (allocator.Allocator, error) {
			return allocator.NewImmediate(q, cl.MemReadWrite)
		}, opts...)
	}},
	{"pinned", func(t *testing.T, q *cl.CommandQueue, opts ...mempool.Option) (*mempool.Set, func() (int64, int64, int64)) {
		return s41aCountedSet(func(q *cl.CommandQueue) (allocator.Allocator, error) {
			return allocator.NewPinned(q)
		}, opts...)
	}},
	{"svm", func(t *testing.T, q *cl.CommandQueue, opts ...mempool.Option) (*mempool.Set, func() (int64, int64, int64)) {
		if have := q.Context().SVMCapabilities(); have&cl.SVMCoarseGrainBuffer == 0 {
			t.Skip("no SVM")
		}
		var mu sync.Mutex
		var counts []*svmCounting
		s := mempool.NewSVMSet(func(q *cl.CommandQueue) (allocator.SVMAllocator, error) {
			imm, err := allocator.NewImmediateSVM(q, false)
			if err != nil {
				return nil, err
			}
			c := newSVMCounting(imm)
			mu.Lock()
			counts = append(counts, c)
			mu.Unlock()
			return c, nil
		}, opts...)
		return s, func() (a, f, l int64) {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range counts {
				c.mu.Lock()
				a, f, l = a+int64(c.allocs), f+int64(c.frees), l+int64(len(c.live))
				c.mu.Unlock()
			}
			return
		}
	}},
}

// PASSES (exploration, regression guard): for each kind of pool, arena
// and bins, with and without drop safety: task queues on three
// goroutines, a fourth calling FreeHeld, a queue's FreeHeld, SetLimit,
// Stats and StopHolding, then Close under them. Afterwards every
// allocation reached the allocator's Free once, the pool's counts are the
// allocator's, and the hook's tally of managed bytes is zero.
func TestS41aSetKindsHooksLimitsCloseUnderLoad(t *testing.T) {
	for _, kind := range s41aKinds {
		for _, arena := range []bool{false, true} {
			for _, drop := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/arena=%v/drop=%v", kind.name, arena, drop), func(t *testing.T) {
					s41aSetUnderLoad(t, kind, arena, drop)
				})
			}
		}
	}
}

func s41aSetUnderLoad(t *testing.T, kind s41aSetKind, arena, drop bool) {
	q := cltest.Queue(t)
	opts := []mempool.Option{mempool.WithLimit(2 << 20), mempool.WithDropSafety(drop)}
	if arena {
		opts = append(opts, mempool.WithArena())
	}
	set, counts := kind.make(t, q, opts...)
	p, err := set.Pool(q)
	require.NoError(t, err)
	tally := newS41aTally()
	remove := p.AddHook(tally)
	defer remove()

	var stop atomic.Bool
	var sink errSink
	var wg sync.WaitGroup
	var rounds atomic.Int64
	for g := range 3 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				tq, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
				if err != nil {
					sink.add(err)
					return
				}
				on := set.On(tq)
				var open []*mempool.PooledBuffer
				for j := range 4 {
					b, err := on.Allocate(int64(1000 + 70000*j + 4096*g))
					if err != nil {
						if !errors.Is(err, mempool.ErrPoolClosed) && !errors.Is(err, mempool.ErrOutOfMemory) {
							sink.add(fmt.Errorf("goroutine %d task %d: %w", g, i, err))
						}
						break
					}
					open = append(open, b)
				}
				if i%5 == 2 {
					if err := on.FreeHeld(); err != nil && !errors.Is(err, mempool.ErrPoolClosed) {
						sink.add(err)
					}
				}
				for _, b := range open {
					sink.add(b.Close())
				}
				if err := on.FreeHeld(); err != nil && !errors.Is(err, mempool.ErrPoolClosed) {
					sink.add(err)
				}
				sink.add(tq.Release())
				rounds.Add(1)
			}
		})
	}
	wg.Go(func() {
		for i := 0; !stop.Load(); i++ {
			switch i % 4 {
			case 0:
				sink.add(set.FreeHeld())
			case 1:
				if err := set.SetLimit(q.Context(), int64(1+i%3)<<20); err != nil && !errors.Is(err, mempool.ErrPoolClosed) {
					sink.add(err)
				}
			case 2:
				st := set.Stats()
				for _, d := range st.Devices {
					pooltest.CheckStats(t, d.Stats)
				}
			case 3:
				if i == 203 {
					sink.add(p.StopHolding())
				}
			}
			runtime.Gosched()
		}
	})
	if !withinWork(t, "tasks", func() {
		for rounds.Load() < 300 {
			runtime.Gosched()
		}
	}) {
		return
	}
	require.NoError(t, set.Close())
	stop.Store(true)
	if !withinWork(t, "goroutines", wg.Wait) {
		return
	}
	require.NoError(t, sink.err())
	st := set.Stats()
	require.Len(t, st.Devices, 1)
	ps := st.Devices[0].Stats
	a, f, l := counts()
	assert.Zero(t, l, "allocations never freed")
	assert.Equal(t, a, f)
	assert.Equal(t, a, ps.DeviceAllocs, "the pool counts what reached the allocator")
	assert.Equal(t, f, ps.DeviceFrees)
	assert.Zero(t, ps.ManagedBytes)
	assert.Zero(t, ps.HeldBlocks)
	assert.Zero(t, ps.HeldBytes)
	assert.Zero(t, ps.ActiveBlocks)
	assert.Zero(t, ps.ReservedBytes.All.Current)
	assert.Zero(t, ps.Segment.All.Current)
	tally.mu.Lock()
	defer tally.mu.Unlock()
	assert.Empty(t, tally.bad)
	assert.Zero(t, tally.managed, "alloc_after minus segment_free")
	assert.Equal(t, a, tally.allocs, "an alloc_after per device allocation")
	assert.Equal(t, f, tally.segFrees, "a segment_free per device free")
	assert.Equal(t, tally.mallocs, tally.frees)
	assert.Equal(t, ps.Allocation.All.Allocated, tally.mallocs)
	assert.Equal(t, ps.Allocation.All.Freed, tally.frees)
}
