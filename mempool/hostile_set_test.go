package mempool_test

import (
	"errors"
	"math"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hostileCountingSet is a Set whose pools are over allocator.Counting
// allocators; when the test ends (after closing the set) it checks that
// every device buffer was freed exactly once.
func hostileCountingSet(t *testing.T, opts ...mempool.Option) (*mempool.Set, func() []*allocator.Counting) {
	t.Helper()
	var mu sync.Mutex
	var counts []*allocator.Counting
	s := mempool.NewSet(func(q *cl.CommandQueue) (allocator.Allocator, error) {
		imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
		if err != nil {
			return nil, err
		}
		c := allocator.NewCounting(imm)
		mu.Lock()
		counts = append(counts, c)
		mu.Unlock()
		return c, nil
	}, opts...)
	get := func() []*allocator.Counting {
		mu.Lock()
		defer mu.Unlock()
		return append([]*allocator.Counting(nil), counts...)
	}
	t.Cleanup(func() {
		assert.NoError(t, s.Close())
		for _, c := range get() {
			st := c.Stats()
			assert.Zero(t, st.Live, "device buffers never freed")
			assert.Zero(t, st.BadFrees, "device buffers freed twice")
			assert.Equal(t, st.Allocs, st.Frees)
		}
	})
	return s, get
}

// A nil queue: a clear error matching ErrInvalidCommandQueue, naming the
// call, and no pool made.
func TestHostileSetNilQueue(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	s, _ := hostileCountingSet(t)
	_, err := s.On(nil).Allocate(64)
	require.ErrorIs(t, err, cl.ErrInvalidCommandQueue)
	assert.Contains(t, err.Error(), "Set.On")
	assert.ErrorIs(t, s.On(nil).FreeHeld(), cl.ErrInvalidCommandQueue)
	_, err = s.Pool(nil)
	require.ErrorIs(t, err, cl.ErrInvalidCommandQueue)
	assert.Contains(t, err.Error(), "Set.Pool")
	assert.Empty(t, s.Stats().Devices)
	assert.ErrorIs(t, s.SetLimit(nil, 10), cl.ErrInvalidContext)
}

// Bad sizes through a Set: an error, nothing allocated, nothing changed.
func TestHostileSetBadSizes(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.Queue(t)
	s, counts := hostileCountingSet(t)
	a := s.On(q)
	for _, n := range []int64{-1, math.MinInt64, math.MaxInt64, q.Context().MaxMemAllocSize() + 1} {
		b, err := a.Allocate(n)
		assert.Error(t, err, "size %d", n)
		assert.Nil(t, b)
	}
	st := s.Stats()
	assert.Zero(t, st.ActiveBlocks)
	assert.Zero(t, st.ManagedBytes)
	for _, c := range counts() {
		assert.Zero(t, c.Stats().Allocs)
	}
	// Still usable.
	b, err := a.Allocate(64)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	assert.ErrorIs(t, b.Close(), mempool.ErrClosed)
}

// Negative limits change nothing; MaxInt64 is a legal (huge) limit.
func TestHostileSetLimits(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.Queue(t)
	s, _ := hostileCountingSet(t)
	require.NoError(t, s.SetLimit(q.Context(), 1<<20))
	assert.Error(t, s.SetLimit(q.Context(), -1))
	assert.Error(t, s.SetLimit(q.Context(), math.MinInt64))
	p, err := s.Pool(q)
	require.NoError(t, err)
	assert.Equal(t, int64(1<<20), p.Stats().Limit, "a negative SetLimit must change nothing")
	require.NoError(t, s.SetLimit(q.Context(), math.MaxInt64))
	b, err := s.On(q).Allocate(64)
	require.NoError(t, err)
	require.NoError(t, b.Close())
}

// Queues of the same context share one pool; a queue of another context
// gets a pool of its own; the same queue twice is the same pool.
func TestHostileSetContexts(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	ctx, err := cl.CreateContext(q.Device())
	require.NoError(t, err)
	t.Cleanup(func() { ctx.Release() })
	q3, err := cl.NewCommandQueue(ctx, q.Device(), 0)
	require.NoError(t, err)
	t.Cleanup(func() { q3.Release() })

	s, _ := hostileCountingSet(t)
	p1, err := s.Pool(q)
	require.NoError(t, err)
	p1b, err := s.Pool(q)
	require.NoError(t, err)
	p2, err := s.Pool(q2)
	require.NoError(t, err)
	p3, err := s.Pool(q3)
	require.NoError(t, err)
	assert.Same(t, p1, p1b)
	assert.Same(t, p1, p2)
	assert.NotSame(t, p1, p3)
	assert.Len(t, s.Stats().Devices, 2)

	var bufs []*mempool.PooledBuffer
	for _, qq := range []*cl.CommandQueue{q, q2, q3} {
		b, err := s.On(qq).Allocate(256)
		require.NoError(t, err)
		bufs = append(bufs, b)
	}
	st := s.Stats()
	assert.Equal(t, 3, st.ActiveBlocks)
	for _, b := range bufs {
		require.NoError(t, b.Close())
	}
}

// An allocator made in another context than the queue's: ErrQueueMismatch,
// and no pool is kept.
func TestHostileSetAllocatorOfAnotherContext(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.Queue(t)
	ctx, err := cl.CreateContext(q.Device())
	require.NoError(t, err)
	t.Cleanup(func() { ctx.Release() })
	q3, err := cl.NewCommandQueue(ctx, q.Device(), 0)
	require.NoError(t, err)
	t.Cleanup(func() { q3.Release() })
	s := mempool.NewSet(func(*cl.CommandQueue) (allocator.Allocator, error) {
		return allocator.NewImmediate(q3, cl.MemReadWrite)
	})
	defer s.Close()
	_, err = s.On(q).Allocate(64)
	require.ErrorIs(t, err, mempool.ErrQueueMismatch)
	assert.Empty(t, s.Stats().Devices)
}

// newAlloc returning (nil, nil): a clear error, and the set is unchanged.
func TestHostileSetNilAllocator(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.Queue(t)
	calls := 0
	s := mempool.NewSet(func(q *cl.CommandQueue) (allocator.Allocator, error) {
		calls++
		if calls == 1 {
			return nil, nil
		}
		return allocator.NewImmediate(q, cl.MemReadWrite)
	})
	defer s.Close()
	_, err := s.On(q).Allocate(64)
	require.Error(t, err)
	assert.Empty(t, s.Stats().Devices)
	b, err := s.On(q).Allocate(64)
	require.NoError(t, err, "a failed first request must not poison the set")
	require.NoError(t, b.Close())
}

// A bad option fails the first request, and every later one, with the
// same clear error; it makes no pool.
func TestHostileSetBadOption(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.Queue(t)
	s, counts := hostileCountingSet(t, mempool.WithLimit(-5))
	for range 2 {
		_, err := s.On(q).Allocate(64)
		require.Error(t, err)
	}
	assert.Empty(t, s.Stats().Devices)
	for _, c := range counts() {
		assert.Zero(t, c.Stats().Allocs)
	}
}

// A panicking NewAllocFunc is a panicking callback: the charter says it
// gets a clear error (the pool turns a panicking allocator into an error
// matching ErrPanicked) and changes nothing.
func TestHostileSetPanickingNewAlloc(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.Queue(t)
	panics := true
	s := mempool.NewSet(func(q *cl.CommandQueue) (allocator.Allocator, error) {
		if panics {
			panic("boom")
		}
		return allocator.NewImmediate(q, cl.MemReadWrite)
	})
	defer s.Close()
	var err error
	var pv any
	func() {
		defer func() { pv = recover() }()
		_, err = s.On(q).Allocate(64)
	}()
	if pv != nil {
		t.Errorf("Set.On(q).Allocate panicked with %v; want an error matching mempool.ErrPanicked", pv)
	} else {
		assert.ErrorIs(t, err, mempool.ErrPanicked)
	}
	panics = false
	b, err := s.On(q).Allocate(64)
	require.NoError(t, err, "the set must stay usable after a panicking NewAllocFunc")
	require.NoError(t, b.Close())
}

// After Close: every request is refused with ErrPoolClosed, a second Close
// returns nil, and the statistics show nothing held.
func TestHostileSetAfterClose(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.Queue(t)
	s, _ := hostileCountingSet(t)
	b, err := s.On(q).Allocate(1000)
	require.NoError(t, err)
	b2, err := s.On(q).Allocate(1000)
	require.NoError(t, err)
	require.NoError(t, b2.Close()) // held
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())

	_, err = s.On(q).Allocate(64)
	assert.ErrorIs(t, err, mempool.ErrPoolClosed)
	_, err = s.Pool(q)
	assert.ErrorIs(t, err, mempool.ErrPoolClosed)
	assert.ErrorIs(t, s.SetLimit(q.Context(), 10), mempool.ErrPoolClosed)
	assert.NoError(t, s.FreeHeld())

	st := s.Stats()
	assert.Zero(t, st.HeldBlocks)
	assert.Equal(t, 1, st.ActiveBlocks)
	assert.NotEmpty(t, s.MemoryStats())

	// An active buffer stays valid after Close and is freed on Close.
	require.NotNil(t, b.Buffer())
	require.NoError(t, q.WriteBuffer(b.Buffer(), 0, make([]byte, 16)))
	require.NoError(t, b.Close())
	assert.ErrorIs(t, b.Close(), mempool.ErrClosed)
	st = s.Stats()
	assert.Zero(t, st.ActiveBlocks)
	assert.Zero(t, st.ManagedBytes)
	assert.Equal(t, st.DeviceAllocs, st.DeviceFrees)
}

// allocClose makes n requests, the i-th with alloc(i), closing each
// buffer it gets, while a pool's Close may race them: it sends to errs
// every error but the closed pool's.
func allocClose(n int, errs chan<- error, alloc func(i int) (*mempool.PooledBuffer, error)) {
	for i := range n {
		b, err := alloc(i)
		if err != nil {
			if !errors.Is(err, mempool.ErrPoolClosed) {
				errs <- err
			}
			continue
		}
		if err := b.Close(); err != nil {
			errs <- err
		}
	}
}

// Close races Allocate and buffer Closes: every Allocate either succeeds
// or fails with ErrPoolClosed, nothing leaks, nothing is freed twice.
func TestHostileSetCloseRacesAllocate(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	for round := range 5 {
		s, _ := hostileCountingSet(t)
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, 1000)
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				qq := q
				if g%2 == 1 {
					qq = q2
				}
				<-start
				allocClose(50, errs, func(i int) (*mempool.PooledBuffer, error) {
					return s.On(qq).Allocate(int64(64 * (1 + (i+g)%7)))
				})
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			runtime.Gosched()
			if err := s.Close(); err != nil {
				errs <- err
			}
		}()
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("round %d: %v", round, err)
		}
		st := s.Stats()
		assert.Zero(t, st.ActiveBlocks, "round %d", round)
		assert.Zero(t, st.HeldBlocks, "round %d: a closed set holds nothing", round)
		assert.Zero(t, st.ManagedBytes, "round %d", round)
		assert.Equal(t, st.DeviceAllocs, st.DeviceFrees, "round %d", round)
	}
}

// Concurrent Close of one Set: exactly one does the work, all return nil.
func TestHostileSetConcurrentClose(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.Queue(t)
	s, _ := hostileCountingSet(t)
	b, err := s.On(q).Allocate(64)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			assert.NoError(t, s.Close())
		}()
	}
	wg.Wait()
	assert.Zero(t, s.Stats().ManagedBytes)
}

// ---- SVM pools ----

// Bad sizes on an SVM pool: an error, nothing allocated.
func TestHostileSetSVMBadSizes(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	f := newSVMFixture(t, false, nil)
	for _, n := range []int64{-1, math.MinInt64, math.MaxInt64, f.q.Context().MaxMemAllocSize() + 1} {
		b, err := f.pool.Allocate(n)
		assert.Error(t, err, "size %d", n)
		assert.Nil(t, b)
	}
	assert.Zero(t, f.pool.Stats().ManagedBytes)
	f.count.mu.Lock()
	assert.Zero(t, f.count.allocs)
	f.count.mu.Unlock()
	// Size 0: whatever it does, it must not leak (checked at cleanup).
	if b, err := f.pool.Allocate(0); err == nil {
		require.NoError(t, b.Close())
	}
}

// Double Close of a pooled SVM block, and Close after the pool's Close.
func TestHostileSetSVMDoubleCloseAndAfterPoolClose(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	f := newSVMFixture(t, false, nil)
	b, err := f.pool.Allocate(256)
	require.NoError(t, err)
	require.NotNil(t, b.SVM())
	require.NoError(t, b.Close())
	assert.ErrorIs(t, b.Close(), mempool.ErrClosed)
	assert.Nil(t, b.SVM())
	assert.Zero(t, b.Offset())

	b2, err := f.pool.Allocate(256)
	require.NoError(t, err)
	require.NoError(t, f.pool.Close())
	require.NoError(t, f.pool.Close())
	_, err = f.pool.Allocate(64)
	assert.ErrorIs(t, err, mempool.ErrPoolClosed)
	require.False(t, b2.SVM().Freed(), "an active block stays valid after the pool's Close")
	require.NoError(t, b2.Close())
	assert.ErrorIs(t, b2.Close(), mempool.ErrClosed)
	st := f.pool.Stats()
	assert.Zero(t, st.ManagedBytes)
	assert.Equal(t, st.DeviceAllocs, st.DeviceFrees)
}

// Concurrent use of an SVM pool with a Close in the middle.
func TestHostileSetSVMConcurrent(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	f := newSVMFixture(t, false, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			allocClose(40, errs, func(i int) (*mempool.PooledBuffer, error) {
				return f.pool.Allocate(int64(128 * (1 + (i+g)%5)))
			})
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(time.Millisecond)
		if err := f.pool.Close(); err != nil {
			errs <- err
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// An SVM set: double Close, after-Close refusal, nothing leaks.
func TestHostileSetSVMSet(t *testing.T) {
	cltest.Watchdog(t, 15*time.Second)
	q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
	var count *svmCounting
	s := mempool.NewSVMSet(func(q *cl.CommandQueue) (allocator.SVMAllocator, error) {
		imm, err := allocator.NewImmediateSVM(q, false)
		if err != nil {
			return nil, err
		}
		count = newSVMCounting(imm)
		return count, nil
	})
	_, err := s.On(q).Allocate(-1)
	assert.Error(t, err)
	b, err := s.On(q).Allocate(512)
	require.NoError(t, err)
	require.NotNil(t, b.SVM())
	assert.Nil(t, b.Buffer(), "an SVM block has no cl.Buffer")
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	_, err = s.On(q).Allocate(64)
	assert.ErrorIs(t, err, mempool.ErrPoolClosed)
	require.NoError(t, b.Close())
	assert.ErrorIs(t, b.Close(), mempool.ErrClosed)
	count.mu.Lock()
	defer count.mu.Unlock()
	assert.Empty(t, count.live)
	assert.Zero(t, count.badFrees)
	assert.Equal(t, count.allocs, count.frees)
}
