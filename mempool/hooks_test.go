package mempool_test

import (
	"sync"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder keeps the events a hook was told of.
type recorder struct {
	mu     sync.Mutex
	events []mempool.Event
}

func (r *recorder) Handle(e mempool.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

func (r *recorder) take() []mempool.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.events
	r.events = nil
	return out
}

func kinds(events []mempool.Event) []mempool.EventKind {
	var ks []mempool.EventKind
	for _, e := range events {
		ks = append(ks, e.Kind)
	}
	return ks
}

func TestHookEventOrder(t *testing.T) {
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator { return allocator.NewBudget(a, 10000) })
	rec := &recorder{}
	remove := f.pool.AddHook(rec)

	// A miss: malloc around a device allocation.
	b, err := f.pool.Allocate(4000)
	require.NoError(t, err)
	ev := rec.take()
	require.Equal(t, []mempool.EventKind{mempool.MallocBefore, mempool.AllocBefore, mempool.AllocAfter, mempool.MallocAfter}, kinds(ev))
	assert.Equal(t, int64(4000), ev[0].Size)
	assert.Equal(t, int64(4095), ev[0].AllocSize)
	assert.Nil(t, ev[0].Buffer)
	assert.Equal(t, int64(4095), ev[1].Size, "the device is asked for the bin's size")
	assert.Same(t, b.Buffer(), ev[2].Buffer)
	assert.Same(t, b.Buffer(), ev[3].Buffer)
	assert.Equal(t, b.ID(), ev[3].BlockID)
	for _, e := range ev {
		assert.Same(t, f.q.Device(), e.Device, "the pool found its device through the wrappers")
		assert.NoError(t, e.Err)
	}

	// A free: the block goes back.
	id, buf := b.ID(), b.Buffer()
	require.NoError(t, b.Close())
	ev = rec.take()
	require.Equal(t, []mempool.EventKind{mempool.FreeBefore, mempool.FreeAfter}, kinds(ev))
	for _, e := range ev {
		assert.Equal(t, id, e.BlockID)
		assert.Same(t, buf, e.Buffer)
		assert.Equal(t, int64(4000), e.Size)
	}
	assert.ErrorIs(t, b.Close(), mempool.ErrClosed)
	assert.Empty(t, rec.take(), "a refused second Close tells no hook")

	// A hit: malloc only.
	b, err = f.pool.Allocate(4095)
	require.NoError(t, err)
	ev = rec.take()
	require.Equal(t, []mempool.EventKind{mempool.MallocBefore, mempool.MallocAfter}, kinds(ev))
	assert.Same(t, buf, ev[1].Buffer)

	// An out-of-memory that freeing the held block cures: a failed device
	// allocation, then a good one.
	held, err := f.pool.Allocate(3000)
	require.NoError(t, err)
	heldBuf := held.Buffer()
	require.NoError(t, held.Close())
	rec.take()
	c, err := f.pool.Allocate(5000) // 4095 + 3071 held + 5119 > 10000
	require.NoError(t, err)
	ev = rec.take()
	require.Equal(t, []mempool.EventKind{mempool.MallocBefore, mempool.AllocBefore, mempool.AllocAfter,
		mempool.SegmentFree, mempool.AllocBefore, mempool.AllocAfter, mempool.MallocAfter}, kinds(ev))
	assert.ErrorIs(t, ev[2].Err, cl.ErrMemObjectAllocationFailure)
	assert.Nil(t, ev[2].Buffer)
	// The held block's segment is given back, and the hooks are told.
	assert.Same(t, heldBuf, ev[3].Buffer, "the segment_free names the buffer its alloc_after named")
	assert.Equal(t, int64(3071), ev[3].Size)
	assert.Equal(t, int64(3071), ev[3].AllocSize)
	assert.NoError(t, ev[3].Err)
	assert.NoError(t, ev[5].Err)

	// One nothing cures: the malloc fails with the pool's error.
	_, err = f.pool.Allocate(9000)
	require.ErrorIs(t, err, mempool.ErrOutOfMemory)
	ev = rec.take()
	require.Equal(t, []mempool.EventKind{mempool.MallocBefore, mempool.AllocBefore, mempool.AllocAfter, mempool.MallocAfter}, kinds(ev))
	assert.ErrorIs(t, ev[3].Err, mempool.ErrOutOfMemory)
	assert.Zero(t, ev[3].BlockID)

	remove()
	remove() // idempotent
	require.NoError(t, b.Close())
	require.NoError(t, c.Close())
	assert.Empty(t, rec.take(), "a removed hook hears nothing")
}

func TestHooksRunInOrderAndRemoveIndependently(t *testing.T) {
	p, err := mempool.New(noDevice{})
	require.NoError(t, err)
	var got []string
	say := func(s string) mempool.Hook {
		return mempool.HookFunc(func(e mempool.Event) {
			if e.Kind == mempool.MallocBefore {
				got = append(got, s)
			}
		})
	}
	removeA := p.AddHook(say("a"))
	p.AddHook(say("b"))
	removeA2 := p.AddHook(say("a")) // the same hook twice is two registrations
	b, err := p.Allocate(1)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "b", "a"}, got)
	removeA()
	got = nil
	require.NoError(t, b.Close())
	_, err = p.Allocate(1)
	require.NoError(t, err)
	assert.Equal(t, []string{"b", "a"}, got)
	removeA2()
	got = nil
	_, err = p.Allocate(1)
	require.NoError(t, err)
	assert.Equal(t, []string{"b"}, got)
	assert.Nil(t, p.Device(), "an allocator that does not say gives no device")
}

func TestStatsAgainstAHandComputedSequence(t *testing.T) {
	p, err := mempool.New(noDevice{})
	require.NoError(t, err)
	small := mempool.AllocSize(mempool.BinNumber(100, 4), 4)
	large := mempool.AllocSize(mempool.BinNumber(2<<20, 4), 4)
	require.Equal(t, int64(103), small)
	require.Equal(t, int64(2228223), large)

	a, _ := p.Allocate(100)
	b, _ := p.Allocate(2 << 20)
	require.NoError(t, a.Close())
	c, _ := p.Allocate(101) // a hit on a's block

	s := p.Stats()
	st := func(cur, peak, alloc, freed int64) mempool.Stat {
		return mempool.Stat{Current: cur, Peak: peak, Allocated: alloc, Freed: freed}
	}
	assert.Equal(t, mempool.StatGroup{All: st(2, 2, 3, 1), Small: st(1, 1, 2, 1), Large: st(1, 1, 1, 0)}, s.Allocation)
	assert.Equal(t, mempool.StatGroup{All: st(small+large, small+large, 2*small+large, small), Small: st(small, small, 2*small, small), Large: st(large, large, large, 0)}, s.AllocatedBytes)
	assert.Equal(t, mempool.StatGroup{All: st(2, 2, 2, 0), Small: st(1, 1, 1, 0), Large: st(1, 1, 1, 0)}, s.Segment)
	assert.Equal(t, mempool.StatGroup{All: st(small+large, small+large, small+large, 0), Small: st(small, small, small, 0), Large: st(large, large, large, 0)}, s.ReservedBytes)
	assert.Equal(t, int64(2<<20+101), s.ActiveBytes)
	assert.Equal(t, int64(2<<20+101), s.PeakActiveBytes, "reached after the hit")

	require.NoError(t, b.Close())
	p.FreeHeld() // b's block leaves
	p.ResetPeak()
	s = p.Stats()
	assert.Equal(t, st(1, 1, 3, 2), s.Allocation.All)
	assert.Equal(t, st(small, small, small+large, large), s.ReservedBytes.All)
	assert.Equal(t, int64(1), s.DeviceFrees)

	p.ResetAccumulated()
	s = p.Stats()
	assert.Equal(t, st(1, 1, 0, 0), s.Allocation.All)
	assert.Equal(t, st(0, 0, 0, 0), s.Allocation.Large, "ResetPeak came after the large block left")
	assert.Zero(t, s.Hits+s.Misses+s.DeviceAllocs+s.DeviceFrees)

	m := p.MemoryStats()
	assert.Len(t, m, 9*3*4+2*4+1+5, "9 groups, 2 oversize stats, max_split_size and 5 counts")
	assert.Equal(t, int64(-1), m["max_split_size"], "no limit, as torch reports it")
	assert.Equal(t, small, m["allocated_bytes.all.current"])
	assert.Equal(t, small, m["active_bytes.small_pool.current"])
	assert.Equal(t, int64(1), m["allocation.all.current"])
	assert.Equal(t, int64(1), m["active.all.peak"])
	assert.Equal(t, int64(1), m["segment.all.current"])
	assert.Equal(t, small, m["reserved_bytes.all.current"])
	assert.Zero(t, m["segment.large_pool.peak"])
	assert.Equal(t, int64(1), m["segment.small_pool.peak"])
	assert.Zero(t, m["reserved_bytes.large_pool.current"])
	for _, k := range []string{"num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free", "num_sync_all_streams"} {
		v, ok := m[k]
		assert.True(t, ok, k)
		assert.Zero(t, v, k)
	}
	require.NoError(t, c.Close())
}

func TestStatsStayConsistentUnderConcurrency(t *testing.T) {
	f := newFixture(t, nil)
	stopReading := pooltest.ReadStats(t, f.pool, nil)
	var workers sync.WaitGroup
	for w := range 4 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for i := range 300 {
				b, err := f.pool.Allocate(int64(64 << ((w + i) % 15)))
				if assert.NoError(t, err) {
					assert.NoError(t, b.Close())
				}
			}
		}()
	}
	workers.Wait()
	stopReading()
}

func TestOutOfMemoryErrorSummary(t *testing.T) {
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator { return allocator.NewBudget(a, 1000) })
	a, err := f.pool.Allocate(900)
	require.NoError(t, err)
	_, err = f.pool.Allocate(900)
	var oom *mempool.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, f.q.Device().GlobalMemSize, oom.DeviceTotal)
	assert.Contains(t, err.Error(), "device total")
	assert.Zero(t, oom.LargestHeldSize)
	require.NoError(t, a.Close())
}

// In an arena, a block given back merges with its free neighbours: the
// free_after event still names the block as it was handed out (its
// segment's buffer, offset and size), not what it merged into.
func TestArenaFreeEventsNameTheBlockGivenBack(t *testing.T) {
	f := newFixture(t, nil, mempool.WithArena())
	rec := &recorder{}
	remove := f.pool.AddHook(rec)
	defer remove()
	var bs []*mempool.PooledBuffer
	for range 8 {
		b, err := f.pool.Allocate(1000)
		require.NoError(t, err)
		bs = append(bs, b)
	}
	rec.take()
	for _, b := range bs {
		base, off, size := b.Base(), b.Offset(), b.Size()
		require.NoError(t, b.Close())
		ev := rec.take()
		require.Equal(t, []mempool.EventKind{mempool.FreeBefore, mempool.FreeAfter}, kinds(ev))
		for _, e := range ev {
			assert.Same(t, base, e.Buffer)
			assert.Equal(t, off, e.Offset)
			assert.Equal(t, size, e.Size)
			assert.Equal(t, b.ID(), e.BlockID)
		}
	}
}

// Issue 24: events name the queue of their block (the allocator's for
// Allocate, On's queue for its allocator's, none for a pool without a
// queue), and segment_free tells of every segment the pool gives back,
// with the buffer its alloc_after named, so that a hook can follow the
// pool's managed bytes.
func TestHookEventsNameTheQueueAndTheSegmentsFreed(t *testing.T) {
	f := newFixture(t, nil)
	q2 := cltest.SecondQueue(t, f.q, 0)
	rec := &recorder{}
	f.pool.AddHook(rec)

	a, err := f.pool.Allocate(4000)
	require.NoError(t, err)
	b, err := f.pool.On(q2).Allocate(4000)
	require.NoError(t, err)
	ev := rec.take()
	require.Equal(t, []mempool.EventKind{mempool.MallocBefore, mempool.AllocBefore, mempool.AllocAfter, mempool.MallocAfter,
		mempool.MallocBefore, mempool.AllocBefore, mempool.AllocAfter, mempool.MallocAfter}, kinds(ev))
	for i, e := range ev {
		want := f.q
		if i >= 4 {
			want = q2
		}
		assert.Same(t, want, e.Queue, "event %d, %s", i, e.Kind)
	}
	bufA, bufB := a.Buffer(), b.Buffer()
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	ev = rec.take()
	require.Len(t, ev, 4)
	assert.Same(t, f.q, ev[0].Queue)
	assert.Same(t, q2, ev[2].Queue)

	require.NoError(t, f.pool.FreeHeld())
	ev = rec.take()
	require.Equal(t, []mempool.EventKind{mempool.SegmentFree, mempool.SegmentFree}, kinds(ev))
	freed := []*cl.Buffer{ev[0].Buffer, ev[1].Buffer}
	assert.ElementsMatch(t, []*cl.Buffer{bufA, bufB}, freed)
	for _, e := range ev {
		assert.Equal(t, int64(4095), e.Size)
		assert.Equal(t, int64(4095), e.AllocSize)
		assert.Nil(t, e.Queue)
		assert.Zero(t, e.BlockID)
		assert.NoError(t, e.Err)
		assert.Same(t, f.q.Device(), e.Device)
	}

	// The pool's Close gives back the segments it holds, and says so.
	c, err := f.pool.Allocate(100)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	rec.take()
	require.NoError(t, f.pool.Close())
	assert.Equal(t, []mempool.EventKind{mempool.SegmentFree}, kinds(rec.take()))
}

// A block of a pool without a queue (over allocator.Deferred) has none.
func TestHookEventsOfAPoolWithoutAQueue(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	p, err := mempool.New(d)
	require.NoError(t, err)
	defer p.Close()
	rec := &recorder{}
	p.AddHook(rec)
	b, err := p.Allocate(100)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	ev := rec.take()
	require.Len(t, ev, 6)
	for _, e := range ev {
		assert.Nil(t, e.Queue, "%s", e.Kind)
	}
}

// A segment_free hook that panics: the segment is freed all the same, and
// the call that freed it fails with the panic.
func TestPanickingSegmentFreeHook(t *testing.T) {
	f := newFixture(t, nil)
	b, err := f.pool.Allocate(1000)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	h := &panicOnce{kind: mempool.SegmentFree}
	remove := f.pool.AddHook(h)
	defer remove()
	err = f.pool.FreeHeld()
	require.ErrorIs(t, err, mempool.ErrPanicked)
	assert.Contains(t, err.Error(), "segment_free hook panicked: hook bug")
	s := f.pool.Stats()
	assert.Zero(t, s.ManagedBytes)
	assert.Equal(t, int64(1), s.DeviceFrees, "freed all the same")
}
