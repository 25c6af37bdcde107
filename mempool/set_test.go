package mempool_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// twoDevices stands in for a host with two devices: q1 on the test
// device's own context, q2 on a second context made for the same device.
// Each context is a pool of its own to a Set, as each device would be.
func twoDevices(t *testing.T) (q1, q2 *cl.CommandQueue) {
	t.Helper()
	q1 = cltest.Queue(t)
	ctx2, err := cl.CreateContext(q1.Device())
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, ctx2.Release()) })
	q2, err = cl.NewCommandQueue(ctx2, q1.Device(), cl.QueueProfiling)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, q2.Release()) })
	require.NotSame(t, q1.Context(), q2.Context())
	return q1, q2
}

// setFixture is a Set whose pools allocate through a Counting allocator
// each, so that the test can prove every device allocation freed once.
type setFixture struct {
	set *mempool.Set

	mu     sync.Mutex
	counts map[*cl.Context]*allocator.Counting
}

// newSetFixture returns a Set over counted Immediate allocators. When the
// test ends, it closes the Set and checks that each context's device
// buffers were freed exactly once and that the Set's counts agree. Make
// it after the queues, so that it closes the Set before they go.
func newSetFixture(t *testing.T, opts ...mempool.Option) *setFixture {
	t.Helper()
	f := &setFixture{counts: make(map[*cl.Context]*allocator.Counting)}
	f.set = mempool.NewSet(func(q *cl.CommandQueue) (allocator.Allocator, error) {
		imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
		if err != nil {
			return nil, err
		}
		c := allocator.NewCounting(imm)
		f.mu.Lock()
		defer f.mu.Unlock()
		f.counts[q.Context()] = c
		return c, nil
	}, opts...)
	t.Cleanup(func() { f.requireNoLeaks(t) })
	return f
}

// count returns the Counting allocator of ctx's pool.
func (f *setFixture) count(t *testing.T, ctx *cl.Context) *allocator.Counting {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.counts[ctx]
	require.NotNil(t, c, "no pool was made for the context")
	return c
}

func (f *setFixture) requireNoLeaks(t *testing.T) {
	t.Helper()
	st := f.set.Stats()
	require.Zero(t, st.ActiveBlocks, "a test left buffers open")
	require.NoError(t, f.set.Close())
	st = f.set.Stats()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Len(t, st.Devices, len(f.counts), "a pool per context the allocator was made for")
	var allocs int64
	for _, d := range st.Devices {
		c := f.counts[d.Context].Stats()
		assert.Zero(t, c.Live, "device buffers never freed on %v", d.Device)
		assert.Zero(t, c.BadFrees, "device buffers freed twice")
		assert.Equal(t, c.Allocs, c.Frees)
		assert.Equal(t, c.Allocs, d.Stats.DeviceAllocs, "the pool counts what reached its device")
		assert.Equal(t, c.Frees, d.Stats.DeviceFrees)
		assert.Zero(t, d.Stats.ManagedBytes)
		allocs += c.Allocs
	}
	assert.Equal(t, allocs, st.DeviceAllocs, "the total sums the devices")
	assert.Equal(t, allocs, st.DeviceFrees)
}

func TestSetRoutesEachQueueToItsContextsPool(t *testing.T) {
	q1, q2 := twoDevices(t)
	q1b := cltest.SecondQueue(t, q1, 0) // a second queue on the first context
	f := newSetFixture(t)

	for _, q := range []*cl.CommandQueue{q1, q2, q1b} {
		b, err := f.set.On(q).Allocate(4000)
		require.NoError(t, err)
		assert.Same(t, q.Context(), b.Base().Context(), "the block is of the queue's context")
		assert.Same(t, q, b.Queue())
		require.NoError(t, b.Close())
	}

	p1, err := f.set.Pool(q1)
	require.NoError(t, err)
	p1b, err := f.set.Pool(q1b)
	require.NoError(t, err)
	p2, err := f.set.Pool(q2)
	require.NoError(t, err)
	assert.Same(t, p1, p1b, "queues of one context share its pool")
	assert.NotSame(t, p1, p2)
	assert.Same(t, q1.Device(), p1.Device())

	st := f.set.Stats()
	require.Len(t, st.Devices, 2)
	assert.Same(t, q1.Context(), st.Devices[0].Context, "in order of first use")
	assert.Same(t, q2.Context(), st.Devices[1].Context)
	// q1b reused the block q1 gave back: one device allocation per context.
	assert.Equal(t, int64(1), f.count(t, q1.Context()).Stats().Allocs)
	assert.Equal(t, int64(1), f.count(t, q2.Context()).Stats().Allocs)
	assert.Equal(t, int64(1), st.Devices[0].Stats.Hits)
	assert.Len(t, st.Devices[0].Stats.Queues, 2, "q1 and q1b")
}

func TestNewSetWithoutAllocatorMakesImmediateOnes(t *testing.T) {
	q1, q2 := twoDevices(t)
	set := mempool.NewSet(nil)
	defer func() { require.NoError(t, set.Close()) }()
	for _, q := range []*cl.CommandQueue{q1, q2} {
		b, err := set.On(q).Allocate(100)
		require.NoError(t, err)
		assert.Same(t, q.Context(), b.Base().Context())
		require.NoError(t, b.Close())
	}
	st := set.Stats()
	assert.Equal(t, int64(2), st.DeviceAllocs)
	assert.Equal(t, 2, st.HeldBlocks)
}

func TestSetLimitIsPerDevice(t *testing.T) {
	q1, q2 := twoDevices(t)
	f := newSetFixture(t)
	const limit = 1 << 20
	const size = 600_000 // two blocks of it pass the limit
	require.NoError(t, f.set.SetLimit(q1.Context(), limit), "before the pool is made")

	var open []*mempool.PooledBuffer
	defer func() {
		for _, b := range open {
			require.NoError(t, b.Close())
		}
	}()
	allocate := func(q *cl.CommandQueue) error {
		b, err := f.set.On(q).Allocate(size)
		if err == nil {
			open = append(open, b)
		}
		return err
	}

	require.NoError(t, allocate(q1))
	err := allocate(q1)
	require.ErrorIs(t, err, mempool.ErrOutOfMemory, "the first device's limit refuses")
	var oom *mempool.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, int64(limit), oom.Limit)

	require.NoError(t, allocate(q2))
	require.NoError(t, allocate(q2), "the second device has no limit")

	// A limit set once the pool exists applies at once.
	require.NoError(t, f.set.SetLimit(q2.Context(), limit))
	p2, err := f.set.Pool(q2)
	require.NoError(t, err)
	assert.Equal(t, int64(limit), p2.Limit())
	require.ErrorIs(t, allocate(q2), mempool.ErrOutOfMemory)

	// 0 removes it.
	require.NoError(t, f.set.SetLimit(q1.Context(), 0))
	require.NoError(t, allocate(q1))

	st := f.set.Stats()
	assert.Equal(t, int64(1), st.Devices[0].Stats.OOMs)
	assert.Equal(t, int64(1), st.Devices[1].Stats.OOMs)
	assert.Equal(t, int64(2), st.OOMs)
	assert.Equal(t, int64(0), st.Devices[0].Stats.Limit)
	assert.Equal(t, int64(limit), st.Devices[1].Stats.Limit)
}

func TestSetLimitOverridesTheSetsOptionForItsDevice(t *testing.T) {
	q1, q2 := twoDevices(t)
	f := newSetFixture(t, mempool.WithLimit(1<<20))
	require.NoError(t, f.set.SetLimit(q2.Context(), 4<<20))
	p1, err := f.set.Pool(q1)
	require.NoError(t, err)
	p2, err := f.set.Pool(q2)
	require.NoError(t, err)
	assert.Equal(t, int64(1<<20), p1.Limit())
	assert.Equal(t, int64(4<<20), p2.Limit())
}

func TestSetStatsPerDeviceAndTotals(t *testing.T) {
	q1, q2 := twoDevices(t)
	f := newSetFixture(t)

	a1, err := f.set.On(q1).Allocate(4000)
	require.NoError(t, err)
	b1, err := f.set.On(q1).Allocate(4000)
	require.NoError(t, err)
	a2, err := f.set.On(q2).Allocate(100_000)
	require.NoError(t, err)
	require.NoError(t, b1.Close())
	defer func() { require.NoError(t, a1.Close()) }()
	defer func() { require.NoError(t, a2.Close()) }()

	st := f.set.Stats()
	require.Len(t, st.Devices, 2)
	d1, d2 := st.Devices[0].Stats, st.Devices[1].Stats
	assert.Equal(t, counters{Active: 1, Held: 1, Managed: 2 * 4095, ActiveBytes: 4000, HeldBytes: 4095}, countersOf(d1))
	assert.Equal(t, 1, d2.ActiveBlocks)
	assert.Equal(t, 0, d2.HeldBlocks)
	assert.Equal(t, int64(100_000), d2.ActiveBytes)

	assert.Equal(t, d1.ActiveBlocks+d2.ActiveBlocks, st.ActiveBlocks)
	assert.Equal(t, d1.HeldBlocks+d2.HeldBlocks, st.HeldBlocks)
	assert.Equal(t, d1.ActiveBytes+d2.ActiveBytes, st.ActiveBytes)
	assert.Equal(t, d1.HeldBytes+d2.HeldBytes, st.HeldBytes)
	assert.Equal(t, d1.ManagedBytes+d2.ManagedBytes, st.ManagedBytes)
	assert.Equal(t, int64(3), st.Misses)
	assert.Equal(t, int64(0), st.Hits)
	assert.Equal(t, int64(3), st.DeviceAllocs)
	assert.Equal(t, f.count(t, q1.Context()).Stats().LiveBytes+f.count(t, q2.Context()).Stats().LiveBytes, st.ManagedBytes,
		"managed bytes are what the devices hold")

	m := f.set.MemoryStats()
	assert.Equal(t, d1.AllocatedBytes.All.Current, m["device.0.allocated_bytes.all.current"])
	assert.Equal(t, d2.AllocatedBytes.All.Current, m["device.1.allocated_bytes.all.current"])
	assert.Equal(t, int64(2), m["device.0.num_device_alloc"])
	assert.Equal(t, int64(1), m["device.1.segment.all.current"])
	p1, err := f.set.Pool(q1)
	require.NoError(t, err)
	assert.Len(t, m, 2*len(p1.MemoryStats()), "every key of every pool")
}

func TestSetFreeHeldFreesEveryPool(t *testing.T) {
	q1, q2 := twoDevices(t)
	f := newSetFixture(t)
	for _, q := range []*cl.CommandQueue{q1, q2} {
		for _, size := range []int64{100, 5000, 70_000} {
			b, err := f.set.On(q).Allocate(size)
			require.NoError(t, err)
			require.NoError(t, b.Close())
		}
	}
	keep, err := f.set.On(q2).Allocate(300)
	require.NoError(t, err)
	defer func() { require.NoError(t, keep.Close()) }()
	require.Equal(t, 6, f.set.Stats().HeldBlocks)

	require.NoError(t, f.set.FreeHeld())
	st := f.set.Stats()
	assert.Zero(t, st.HeldBlocks)
	assert.Equal(t, 1, st.ActiveBlocks, "memory in use stays")
	assert.Zero(t, f.count(t, q1.Context()).Stats().Live)
	assert.Equal(t, 1, f.count(t, q2.Context()).Stats().Live)
	assert.Equal(t, int64(3), st.Devices[0].Stats.DeviceFrees)
	assert.Equal(t, int64(3), st.Devices[1].Stats.DeviceFrees)
}

func TestSetCloseRefusesRequestsAndKeepsBuffersInUse(t *testing.T) {
	q1, q2 := twoDevices(t)
	f := newSetFixture(t)
	before := f.set.On(q1) // an allocator taken before Close
	open, err := before.Allocate(4000)
	require.NoError(t, err)
	held, err := f.set.On(q2).Allocate(4000)
	require.NoError(t, err)
	require.NoError(t, held.Close())

	require.NoError(t, f.set.Close())
	assert.Zero(t, f.count(t, q2.Context()).Stats().Live, "Close frees what the pools hold")
	assert.NotNil(t, open.Buffer(), "a buffer in use stays valid")
	assert.Equal(t, 1, f.count(t, q1.Context()).Stats().Live)

	_, err = f.set.On(q1).Allocate(10)
	assert.ErrorIs(t, err, mempool.ErrPoolClosed)
	_, err = before.Allocate(10)
	assert.ErrorIs(t, err, mempool.ErrPoolClosed)
	_, err = f.set.Pool(q2)
	assert.ErrorIs(t, err, mempool.ErrPoolClosed)
	assert.ErrorIs(t, f.set.SetLimit(q1.Context(), 1<<20), mempool.ErrPoolClosed)
	assert.NoError(t, f.set.FreeHeld(), "nothing left to free")
	assert.NoError(t, f.set.Close(), "a second Close does nothing")

	require.NoError(t, open.Close())
	assert.Zero(t, f.count(t, q1.Context()).Stats().Live, "a buffer closed after the Set is freed")
}

func TestSetBadInput(t *testing.T) {
	q1, _ := twoDevices(t)
	f := newSetFixture(t)

	_, err := f.set.On(nil).Allocate(10)
	assert.ErrorIs(t, err, cl.ErrInvalidCommandQueue)
	assert.ErrorContains(t, err, "Set.On(nil)")
	assert.ErrorIs(t, f.set.On(nil).FreeHeld(), cl.ErrInvalidCommandQueue)
	assert.Nil(t, f.set.On(nil).Queue())
	_, err = f.set.Pool(nil)
	assert.ErrorIs(t, err, cl.ErrInvalidCommandQueue)
	assert.ErrorIs(t, f.set.SetLimit(nil, 10), cl.ErrInvalidContext)
	assert.ErrorContains(t, f.set.SetLimit(q1.Context(), -1), "negative limit")

	p, err := f.set.Pool(q1)
	require.NoError(t, err)
	assert.Zero(t, p.Limit(), "a refused limit changes nothing")
	assert.Len(t, f.set.Stats().Devices, 1, "no pool for bad input")
}

func TestSetAllocatorOrOptionErrorsFailTheRequestAndAreRetried(t *testing.T) {
	q1, q2 := twoDevices(t)
	boom := errors.New("no allocator today")
	fail := true
	set := mempool.NewSet(func(q *cl.CommandQueue) (allocator.Allocator, error) {
		if fail {
			return nil, boom
		}
		return allocator.NewImmediate(q, cl.MemReadWrite)
	})
	defer func() { require.NoError(t, set.Close()) }()

	_, err := set.On(q1).Allocate(10)
	assert.ErrorIs(t, err, boom)
	assert.ErrorContains(t, err, "mempool: Set.On: making the allocator")
	assert.Empty(t, set.Stats().Devices, "a failure makes no pool")

	fail = false
	b, err := set.On(q1).Allocate(10)
	require.NoError(t, err, "the next request tries again")
	require.NoError(t, b.Close())

	bad := mempool.NewSet(nil, mempool.WithLeadingBits(mempool.MaxLeadingBits+1))
	defer func() { require.NoError(t, bad.Close()) }()
	_, err = bad.Pool(q1)
	assert.ErrorContains(t, err, "leading bits")

	// An allocator of another context would hand out buffers q cannot use.
	wrong := mempool.NewSet(func(*cl.CommandQueue) (allocator.Allocator, error) {
		return allocator.NewImmediate(q2, cl.MemReadWrite)
	})
	defer func() { require.NoError(t, wrong.Close()) }()
	_, err = wrong.On(q1).Allocate(10)
	assert.ErrorIs(t, err, mempool.ErrQueueMismatch)
}

func TestSetConcurrentUseOnBothDevices(t *testing.T) {
	q1, q2 := twoDevices(t)
	queues := []*cl.CommandQueue{q1, q2, cltest.SecondQueue(t, q1, 0), cltest.SecondQueue(t, q2, 0)}
	f := newSetFixture(t, mempool.WithDropSafety(false))
	iters := cltest.Size(q1, 50, 300)

	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 8 {
		wg.Go(func() {
			q := queues[g%len(queues)]
			var open []*mempool.PooledBuffer
			for i := range iters {
				b, err := f.set.On(q).Allocate(int64(64 << (i % 12)))
				if err != nil {
					errs <- fmt.Errorf("goroutine %d: %w", g, err)
					return
				}
				if b.Base().Context() != q.Context() {
					errs <- fmt.Errorf("goroutine %d: a block of another context", g)
				}
				open = append(open, b)
				if len(open) > 3 {
					if err := open[0].Close(); err != nil {
						errs <- err
					}
					open = open[1:]
				}
			}
			for _, b := range open {
				if err := b.Close(); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Go(func() { // a reader and a trimmer beside them
		for i := range iters {
			_ = f.set.Stats()
			_ = f.set.MemoryStats()
			if err := f.set.FreeHeld(); err != nil {
				errs <- err
			}
			if err := f.set.SetLimit(queues[i%2].Context(), 0); err != nil {
				errs <- err
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	st := f.set.Stats()
	require.Len(t, st.Devices, 2, "one pool per context, however the first requests raced")
	assert.Zero(t, st.ActiveBlocks)
	for _, d := range st.Devices {
		assert.Equal(t, int64(4*iters), d.Stats.Hits+d.Stats.Misses, "every request of the context's four goroutines")
	}
}
