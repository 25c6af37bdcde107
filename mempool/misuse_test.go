package mempool_test

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// panicOnce is a hook that panics the first time it is told of kind.
type panicOnce struct {
	kind mempool.EventKind
	done atomic.Bool
}

func (h *panicOnce) Handle(e mempool.Event) {
	if e.Kind == h.kind && h.done.CompareAndSwap(false, true) {
		panic("hook bug")
	}
}

// binSize is the bytes of the exact bin of a request of n.
func binSize(n int64) int64 { return mempool.AllocSize(mempool.BinNumber(n, 4), 4) }

// A hook that panics makes the pool's method fail with ErrPanicked, and
// leaves the pool as if the hook had not panicked: no reservation stuck
// under the limit, no block lost, every device buffer freed once (the
// fixture checks that at the end).
func TestPanickingHookLeavesThePoolConsistent(t *testing.T) {
	for _, kind := range []mempool.EventKind{mempool.MallocBefore, mempool.AllocBefore, mempool.AllocAfter, mempool.MallocAfter} {
		t.Run(kind.String(), func(t *testing.T) {
			limit := binSize(4096)
			f := newFixture(t, nil, mempool.WithLimit(limit))
			h := &panicOnce{kind: kind}
			remove := f.pool.AddHook(h)
			defer remove()

			b, err := f.pool.Allocate(1000)
			assert.Nil(t, b)
			require.ErrorIs(t, err, mempool.ErrPanicked)
			assert.Contains(t, err.Error(), kind.String()+" hook panicked: hook bug")
			require.True(t, h.done.Load())
			s := f.pool.Stats()
			assert.Zero(t, s.ActiveBlocks)
			assert.Equal(t, s.ManagedBytes, s.HeldBytes, "what the pool manages, it holds")

			// The whole limit is still there to be had.
			b, err = f.pool.Allocate(4096)
			require.NoError(t, err)
			require.NoError(t, b.Close())
		})
	}
	for _, kind := range []mempool.EventKind{mempool.FreeBefore, mempool.FreeAfter} {
		t.Run(kind.String(), func(t *testing.T) {
			f := newFixture(t, nil)
			b, err := f.pool.Allocate(1000)
			require.NoError(t, err)
			remove := f.pool.AddHook(&panicOnce{kind: kind})
			defer remove()

			err = b.Close()
			require.ErrorIs(t, err, mempool.ErrPanicked)
			var pe *mempool.PanicError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, "hook bug", pe.Value)
			assert.NotEmpty(t, pe.Stack)
			assert.True(t, b.Closed())
			assert.Equal(t, counters{Held: 1, Managed: binSize(1000), HeldBytes: binSize(1000)}, countersOf(f.pool.Stats()))
			assert.ErrorIs(t, b.Close(), mempool.ErrClosed)
		})
	}
}

// A hook that panics on a hit gives the block back too.
func TestPanickingHookOnAHit(t *testing.T) {
	f := newFixture(t, nil)
	b, err := f.pool.Allocate(1000)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	remove := f.pool.AddHook(&panicOnce{kind: mempool.MallocAfter})
	defer remove()
	_, err = f.pool.Allocate(1000)
	require.ErrorIs(t, err, mempool.ErrPanicked)
	s := f.pool.Stats()
	assert.Equal(t, counters{Held: 1, Managed: binSize(1000), HeldBytes: binSize(1000)}, countersOf(s))
	assert.Equal(t, int64(1), s.DeviceAllocs)
}

// An Allocate whose malloc_after hook panics gives its block back as a
// Close does: every hook, the panicking one and those before and after
// it, is told of the block's free, with the block's ID, after its
// malloc_after.
func TestMallocAfterHookPanicTellsEveryHookTheFree(t *testing.T) {
	f := newFixture(t, nil)
	before, after := &recorder{}, &recorder{}
	f.pool.AddHook(before)
	f.pool.AddHook(&panicOnce{kind: mempool.MallocAfter})
	f.pool.AddHook(after)
	_, err := f.pool.Allocate(1000)
	require.ErrorIs(t, err, mempool.ErrPanicked)
	assert.Zero(t, f.pool.ActiveBlocks())
	for _, rec := range []*recorder{before, after} {
		ev := rec.take()
		require.Equal(t, []mempool.EventKind{mempool.MallocBefore, mempool.AllocBefore, mempool.AllocAfter, mempool.MallocAfter, mempool.FreeBefore, mempool.FreeAfter}, kinds(ev))
		assert.NotZero(t, ev[3].BlockID)
		assert.Equal(t, ev[3].BlockID, ev[4].BlockID, "the free names the block allocated")
		assert.Equal(t, ev[3].BlockID, ev[5].BlockID)
	}
}

// panicky panics in Allocate or Free (after freeing) when told to.
type panicky struct {
	allocator.Allocator
	allocPanics, freePanics atomic.Int32
}

func (a *panicky) Allocate(size int64) (*cl.Buffer, error) {
	if a.allocPanics.Add(-1) >= 0 {
		panic(errors.New("allocator bug"))
	}
	return a.Allocator.Allocate(size)
}

func (a *panicky) Free(buf *cl.Buffer) error {
	err := a.Allocator.Free(buf)
	if a.freePanics.Add(-1) >= 0 {
		panic("free bug")
	}
	return err
}

func TestPanickingAllocatorLosesNoLimit(t *testing.T) {
	var pa *panicky
	limit := binSize(4096)
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator {
		pa = &panicky{Allocator: a}
		return pa
	}, mempool.WithLimit(limit))
	pa.allocPanics.Store(1)
	_, err := f.pool.Allocate(4096)
	require.ErrorIs(t, err, mempool.ErrPanicked)
	assert.Contains(t, err.Error(), "allocator's Allocate panicked: allocator bug")
	assert.NotContains(t, err.Error(), "mempool: allocating", "one prefix")
	assert.Zero(t, f.pool.ManagedBytes())

	b, err := f.pool.Allocate(4096)
	require.NoError(t, err, "the limit's capacity is all there")
	require.NoError(t, b.Close())
}

// An allocator whose Free panics does not keep the other held blocks from
// being freed, and the panic comes back as FreeHeld's error.
func TestPanickingFreeOrphansNothing(t *testing.T) {
	var pa *panicky
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator {
		pa = &panicky{Allocator: a}
		return pa
	})
	for _, n := range []int64{100, 1000, 10000} {
		b, err := f.pool.Allocate(n)
		require.NoError(t, err)
		require.NoError(t, b.Close())
	}
	pa.freePanics.Store(1)
	err := f.pool.FreeHeld()
	require.ErrorIs(t, err, mempool.ErrPanicked)
	assert.Contains(t, err.Error(), "allocator's Free panicked: free bug")
	s := f.pool.Stats()
	assert.Zero(t, s.HeldBlocks)
	assert.Equal(t, int64(3), s.DeviceFrees)
	assert.Equal(t, int64(1), s.FreeErrors)
	assert.Zero(t, f.count.Stats().Live, "the other blocks were freed")
}

// failingFree fails every Free after freeing.
type failingFree struct{ allocator.Allocator }

var errFree = errors.New("free failed")

func (a failingFree) Free(buf *cl.Buffer) error {
	return errors.Join(a.Allocator.Free(buf), errFree)
}

// FreeHeld, StopHolding and Close return the allocator's errors, joined,
// and free every segment still.
func TestFreeErrorsAreReturned(t *testing.T) {
	for _, tc := range []struct {
		name string
		free func(*mempool.Pool) error
	}{
		{"FreeHeld", (*mempool.Pool).FreeHeld},
		{"StopHolding", (*mempool.Pool).StopHolding},
		{"Close", (*mempool.Pool).Close},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, func(a allocator.Allocator) allocator.Allocator { return failingFree{a} })
			for _, n := range []int64{100, 1000} {
				b, err := f.pool.Allocate(n)
				require.NoError(t, err)
				require.NoError(t, b.Close())
			}
			err := tc.free(f.pool)
			require.ErrorIs(t, err, errFree)
			s := f.pool.Stats()
			assert.Zero(t, s.HeldBlocks)
			assert.Equal(t, int64(2), s.DeviceFrees)
			assert.Equal(t, int64(2), s.FreeErrors)
			assert.Zero(t, f.count.Stats().Live)
		})
	}
}

// Requests that no block could ever serve fail at once, change nothing,
// and do not overflow the accounts.
func TestHopelessRequestsFailAtOnce(t *testing.T) {
	p, err := mempool.New(noDevice{}, mempool.WithLimit(1<<40))
	require.NoError(t, err)
	held, err := p.Allocate(1000)
	require.NoError(t, err)
	require.NoError(t, held.Close())
	before := p.Stats()

	for _, size := range []int64{math.MaxInt64, 1<<62 + 1, 1<<40 + 1} {
		b, err := p.Allocate(size)
		assert.Nil(t, b)
		assert.Error(t, err, "%d", size)
		s := p.Stats()
		assert.Equal(t, countersOf(before), countersOf(s), "%d: nothing changed, not even the held block", size)
		assert.Zero(t, s.DeviceFrees, "%d", size)
	}
	b, err := p.Allocate(1 << 39)
	require.NoError(t, err, "a block that fits the limit")
	assert.Equal(t, binSize(1<<39)+binSize(1000), p.ManagedBytes())
	require.NoError(t, b.Close())
	require.NoError(t, p.Close())
}

// A request over the limit keeps the cache: freeing could not make it fit.
func TestRequestOverTheLimitKeepsTheCache(t *testing.T) {
	limit := binSize(4096)
	f := newFixture(t, nil, mempool.WithLimit(limit))
	held, err := f.pool.Allocate(100)
	require.NoError(t, err)
	require.NoError(t, held.Close())
	_, err = f.pool.Allocate(limit + 1)
	require.ErrorIs(t, err, mempool.ErrOutOfMemory)
	assert.Equal(t, 1, f.pool.HeldBlocks())
	assert.Zero(t, f.pool.Stats().DeviceFrees)
}

func TestSetLimit(t *testing.T) {
	rec := &freeRecorder{}
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator { rec.Allocator = a; return rec })
	assert.Zero(t, f.pool.Limit())

	var bufs []*mempool.PooledBuffer
	for _, n := range []int64{1000, 4000, 16000, 64000} {
		b, err := f.pool.Allocate(n)
		require.NoError(t, err)
		bufs = append(bufs, b)
	}
	require.NoError(t, bufs[1].Close())
	require.NoError(t, bufs[2].Close())
	managed := f.pool.ManagedBytes()

	err := f.pool.SetLimit(-1)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "negative limit")
	assert.Zero(t, f.pool.Limit(), "a bad limit changes nothing")

	// Just under what is managed: the largest held segment goes, and only it.
	require.NoError(t, f.pool.SetLimit(managed-1))
	assert.Equal(t, managed-1, f.pool.Limit())
	assert.Equal(t, managed-1, f.pool.Stats().Limit)
	assert.Equal(t, []int64{binSize(16000)}, rec.freed)
	assert.Equal(t, 1, f.pool.HeldBlocks())

	// Below what is active: every held segment goes, the active stay.
	require.NoError(t, f.pool.SetLimit(1))
	assert.Zero(t, f.pool.HeldBlocks())
	assert.Equal(t, 2, f.pool.ActiveBlocks())
	_, err = f.pool.Allocate(10)
	require.ErrorIs(t, err, mempool.ErrOutOfMemory)

	require.NoError(t, f.pool.SetLimit(0), "0 removes the limit")
	b, err := f.pool.Allocate(10)
	require.NoError(t, err)
	bufs = append(bufs, b)
	for _, b := range []*mempool.PooledBuffer{bufs[0], bufs[3], bufs[4]} {
		require.NoError(t, b.Close())
	}
}

// SetLimit may race requests: the limit holds all along.
func TestSetLimitWhileAllocating(t *testing.T) {
	f := newFixture(t, nil)
	require.NoError(t, f.pool.SetLimit(binSize(4096)))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			assert.NoError(t, f.pool.SetLimit(int64(1+i%4)*binSize(4096)))
		}
	}()
	for range 2000 {
		b, err := f.pool.Allocate(4096)
		if err != nil {
			require.ErrorIs(t, err, mempool.ErrOutOfMemory)
			continue
		}
		require.NoError(t, b.Close())
	}
	close(stop)
	wg.Wait()
	assert.LessOrEqual(t, f.pool.ManagedBytes(), f.pool.Limit())
}

func TestWithLimitFraction(t *testing.T) {
	f := newFixture(t, nil, mempool.WithLimitFraction(0.5))
	assert.Equal(t, f.q.Device().GlobalMemSize/2, f.pool.Limit())
	assert.Equal(t, f.pool.Limit(), f.pool.Stats().Limit)

	imm, err := allocator.NewImmediate(f.q, cl.MemReadWrite)
	require.NoError(t, err)
	for _, bad := range []float64{0, -0.5, 1.5, math.NaN()} {
		_, err := mempool.New(imm, mempool.WithLimitFraction(bad))
		assert.ErrorContains(t, err, "limit fraction", "%v", bad)
	}
	_, err = mempool.New(noDevice{}, mempool.WithLimitFraction(0.5))
	assert.ErrorContains(t, err, "does not say its device")

	// The last of WithLimit and WithLimitFraction wins.
	p, err := mempool.New(imm, mempool.WithLimitFraction(0.5), mempool.WithLimit(1000))
	require.NoError(t, err)
	assert.Equal(t, int64(1000), p.Limit())
}

func TestLimitFromTheEnvironment(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	total := q.Device().GlobalMemSize
	for _, tc := range []struct {
		env  string
		want int64
	}{
		{"1073741824", 1 << 30},
		{"2GiB", 2 << 30},
		{"512MB", 512e6},
		{" 64 MiB ", 64 << 20},
		{"50%", total / 2},
		{"", 0},
	} {
		t.Setenv(mempool.LimitEnv, tc.env)
		p, err := mempool.New(imm)
		require.NoError(t, err, "%q", tc.env)
		assert.Equal(t, tc.want, p.Limit(), "%q", tc.env)
	}
	t.Setenv(mempool.LimitEnv, "2GiB")
	p, err := mempool.New(imm, mempool.WithLimit(1000))
	require.NoError(t, err)
	assert.Equal(t, int64(1000), p.Limit(), "an option overrides the environment")

	for _, bad := range []string{"lots", "-1", "0", "150%", "GiB", "1e30"} {
		t.Setenv(mempool.LimitEnv, bad)
		_, err := mempool.New(imm)
		require.Error(t, err, "%q", bad)
		assert.Contains(t, err.Error(), mempool.LimitEnv, "%q", bad)
	}
}
