package mempool_test

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Ported from PyOpenCL's test_mempool: a sliding window of 10 live blocks
// over 100 allocations each of 64 and 128 bytes, then stop_holding.
func TestMempool(t *testing.T) {
	f := newFixture(t, nil)
	var window []*mempool.PooledBuffer
	for _, size := range []int64{64, 128} {
		for range 100 {
			b, err := f.pool.Allocate(size)
			require.NoError(t, err)
			window = append(window, b)
			if len(window) > 10 {
				require.NoError(t, window[0].Close())
				window = window[1:]
			}
		}
	}
	s := f.pool.Stats()
	// Each size needs 11 blocks at the peak (the 11th is allocated before
	// the oldest is closed); every other request is a hit.
	assert.Equal(t, int64(22), s.Misses)
	assert.Equal(t, int64(178), s.Hits)
	assert.Equal(t, int64(22), s.DeviceAllocs)
	assert.Equal(t, 10, s.ActiveBlocks)
	assert.Equal(t, 12, s.HeldBlocks, "11 of 64 bytes and 1 of 128")
	for _, b := range window {
		require.NoError(t, b.Close())
	}
	f.pool.StopHolding()
	assert.Zero(t, f.pool.HeldBlocks())
	assert.Equal(t, int64(22), f.pool.Stats().DeviceFrees)
}

func TestCountersFollowPyOpenCL(t *testing.T) {
	f := newFixture(t, nil)
	p := f.pool
	a100 := mempool.AllocSize(mempool.BinNumber(100, 4), 4)
	require.Equal(t, mempool.BinNumber(100, 4), mempool.BinNumber(101, 4), "100 and 101 share a bin")

	a, err := p.Allocate(100) // a miss: a new block
	require.NoError(t, err)
	assert.Equal(t, counters{Active: 1, Managed: a100, ActiveBytes: 100}, countersOf(p.Stats()))

	require.NoError(t, a.Close()) // held
	assert.Equal(t, counters{Held: 1, Managed: a100, HeldBytes: a100}, countersOf(p.Stats()))

	b, err := p.Allocate(101) // a hit
	require.NoError(t, err)
	assert.Equal(t, counters{Active: 1, Managed: a100, ActiveBytes: 101}, countersOf(p.Stats()))

	c, err := p.Allocate(0) // a real 1-byte block from bin 0
	require.NoError(t, err)
	require.NotNil(t, c.Buffer())
	assert.Equal(t, int64(1), c.Buffer().Size())
	assert.Equal(t, counters{Active: 2, Managed: a100 + 1, ActiveBytes: 101}, countersOf(p.Stats()))

	p.StopHolding()
	require.NoError(t, b.Close()) // freed at once
	assert.Equal(t, counters{Active: 1, Managed: 1}, countersOf(p.Stats()))

	d, err := p.Allocate(100) // allocation still works after StopHolding
	require.NoError(t, err)
	assert.Equal(t, counters{Active: 2, Managed: a100 + 1, ActiveBytes: 100}, countersOf(p.Stats()))
	require.NoError(t, d.Close())
	require.NoError(t, c.Close())
	assert.Equal(t, counters{}, countersOf(p.Stats()))

	s := p.Stats()
	assert.Equal(t, int64(1), s.Hits)
	assert.Equal(t, int64(3), s.Misses)
	assert.Equal(t, int64(3), s.DeviceAllocs)
	assert.Equal(t, int64(3), s.DeviceFrees)
	assert.False(t, s.Holding)
	assert.Equal(t, 4, s.LeadingBits)
}

func TestFreeHeld(t *testing.T) {
	f := newFixture(t, nil)
	var bufs []*mempool.PooledBuffer
	for _, size := range []int64{10, 1000, 100000, 1000} {
		b, err := f.pool.Allocate(size)
		require.NoError(t, err)
		bufs = append(bufs, b)
	}
	for _, b := range bufs[1:] {
		require.NoError(t, b.Close())
	}
	assert.Equal(t, 3, f.pool.HeldBlocks())
	f.pool.FreeHeld()
	assert.Equal(t, counters{Active: 1, Managed: mempool.AllocSize(mempool.BinNumber(10, 4), 4), ActiveBytes: 10}, countersOf(f.pool.Stats()))
	assert.Equal(t, int64(3), f.pool.Stats().DeviceFrees)
	assert.True(t, f.pool.Stats().Holding, "FreeHeld does not stop holding")
	require.NoError(t, bufs[0].Close())
	assert.Equal(t, 1, f.pool.HeldBlocks())
}

func TestHitTakesTheMostRecentlyFreedBlock(t *testing.T) {
	f := newFixture(t, nil)
	x, err := f.pool.Allocate(4096)
	require.NoError(t, err)
	y, err := f.pool.Allocate(4100)
	require.NoError(t, err)
	require.Equal(t, mempool.BinNumber(4096, 4), mempool.BinNumber(4100, 4))
	require.Equal(t, mempool.BinNumber(4096, 4), mempool.BinNumber(4200, 4))
	bx, by := x.Buffer(), y.Buffer()
	require.NoError(t, x.Close())
	require.NoError(t, y.Close())
	first, err := f.pool.Allocate(4200)
	require.NoError(t, err)
	second, err := f.pool.Allocate(4096)
	require.NoError(t, err)
	assert.Same(t, by, first.Buffer(), "LIFO: the last block given back comes first")
	assert.Same(t, bx, second.Buffer())
	require.NoError(t, first.Close())
	require.NoError(t, second.Close())
}

func TestNegativeSizeChangesNothing(t *testing.T) {
	f := newFixture(t, nil)
	before := f.pool.Stats()
	b, err := f.pool.Allocate(-1)
	assert.Nil(t, b)
	assert.ErrorIs(t, err, cl.ErrInvalidBufferSize)
	assert.Contains(t, err.Error(), "negative size")
	assert.Equal(t, before, f.pool.Stats())
}

// A request over the device's largest buffer can never succeed: it fails
// at once, freeing nothing, with an error that matches ErrOutOfMemory (as
// torch and CuPy raise theirs there) and names the device's largest buffer.
func TestSizeOverTheDeviceLimitIsReturnedAtOnce(t *testing.T) {
	f := newFixture(t, nil)
	held, err := f.pool.Allocate(100)
	require.NoError(t, err)
	require.NoError(t, held.Close())
	largest := f.q.Device().MaxMemAllocSize
	b, err := f.pool.Allocate(largest + 1)
	assert.Nil(t, b)
	require.ErrorIs(t, err, cl.ErrInvalidBufferSize)
	require.ErrorIs(t, err, mempool.ErrOutOfMemory)
	var oom *mempool.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, largest, oom.DeviceMaxAlloc)
	assert.Contains(t, err.Error(), fmt.Sprintf("largest buffer (%d bytes)", largest))
	assert.Equal(t, 1, f.pool.HeldBlocks(), "nothing freed for a hopeless request")
	require.NoError(t, f.pool.FreeHeld())
	s := f.pool.Stats()
	assert.Equal(t, counters{}, countersOf(s))
	assert.Zero(t, s.OOMRetries)
}

// Ported from PyOpenCL's test_buffer_release as clpool reads it: giving a
// buffer back is explicit, happens once, and ends the caller's use of it.
func TestBufferRelease(t *testing.T) {
	f := newFixture(t, nil)
	b, err := f.pool.Allocate(256)
	require.NoError(t, err)
	buf := b.Buffer()
	require.NoError(t, f.q.WriteBuffer(buf, 0, []byte{1, 2, 3}))
	assert.False(t, b.Closed())
	require.NoError(t, b.Close())
	assert.True(t, b.Closed())
	assert.Nil(t, b.Buffer(), "a closed PooledBuffer hands out no buffer")
	assert.Equal(t, int64(256), b.Size())

	before := f.pool.Stats()
	assert.ErrorIs(t, b.Close(), mempool.ErrClosed)
	assert.Equal(t, before, f.pool.Stats(), "a second Close changes nothing")

	// Once the pool stops holding, the device buffer is released for good:
	// a stale *cl.Buffer kept past Close is refused by the binding.
	f.pool.StopHolding()
	assert.ErrorIs(t, f.q.WriteBuffer(buf, 0, []byte{1}), cl.ErrInvalidMemObject)
}

// Ported from PyOpenCL's test_mempool_32bit_issues: sizes around 2^30..2^34
// through an allocator that hands out no device memory; every count must be
// exact in 64 bits.
func TestMempool32BitIssues(t *testing.T) {
	p, err := mempool.New(noDevice{})
	require.NoError(t, err)
	var bufs []*mempool.PooledBuffer
	var managed, active int64
	for i := 30; i <= 34; i++ {
		for k := int64(-5); k < 5; k++ {
			size := int64(1)<<i + k
			b, err := p.Allocate(size)
			require.NoError(t, err)
			bufs = append(bufs, b)
			alloc := mempool.AllocSize(mempool.BinNumber(size, 4), 4)
			require.GreaterOrEqual(t, alloc, size)
			managed += alloc
			active += size
		}
	}
	assert.Equal(t, managed, p.ManagedBytes())
	assert.Equal(t, active, p.ActiveBytes())
	assert.Greater(t, managed, int64(1)<<36, "far past 32 bits")
	for _, b := range bufs {
		require.NoError(t, b.Close())
	}
	assert.Equal(t, managed, p.HeldBytes())
	assert.Equal(t, len(bufs), p.HeldBlocks())
	p.FreeHeld()
	assert.Equal(t, counters{}, countersOf(p.Stats()))
}

func TestNewValidatesOptions(t *testing.T) {
	a := noDevice{}
	for _, lb := range []int{0, 1, 4, 10, mempool.MaxLeadingBits} {
		p, err := mempool.New(a, mempool.WithLeadingBits(lb))
		require.NoError(t, err, "leading bits %d", lb)
		assert.Equal(t, lb, p.Stats().LeadingBits)
	}
	for _, lb := range []int{-1, mempool.MaxLeadingBits + 1, 64} {
		_, err := mempool.New(a, mempool.WithLeadingBits(lb))
		assert.ErrorContains(t, err, "leading bits", "leading bits %d", lb)
	}
	_, err := mempool.New(a, mempool.WithLimit(-1))
	assert.ErrorContains(t, err, "negative limit")
	_, err = mempool.New(nil)
	assert.ErrorContains(t, err, "nil allocator")
}

func TestClosedPool(t *testing.T) {
	f := newFixture(t, nil)
	open, err := f.pool.Allocate(64)
	require.NoError(t, err)
	held, err := f.pool.Allocate(64)
	require.NoError(t, err)
	require.NoError(t, held.Close())

	require.NoError(t, f.pool.Close())
	assert.Zero(t, f.pool.HeldBlocks(), "Close frees held blocks")
	_, err = f.pool.Allocate(64)
	assert.ErrorIs(t, err, mempool.ErrPoolClosed)
	assert.NoError(t, f.pool.Close(), "Close is idempotent")

	require.NoError(t, f.q.WriteBuffer(open.Buffer(), 0, []byte{1}), "open buffers stay valid")
	require.NoError(t, open.Close())
	assert.Equal(t, counters{}, countersOf(f.pool.Stats()), "and are freed when closed")
}

func TestDroppedBuffersComeBackAfterGC(t *testing.T) {
	f := newFixture(t, nil)
	func() {
		for _, size := range []int64{64, 4096, 1 << 20} {
			_, err := f.pool.Allocate(size)
			require.NoError(t, err)
		}
	}()
	require.Equal(t, 3, f.pool.ActiveBlocks())
	require.Eventually(t, func() bool {
		runtime.GC()
		return f.pool.ActiveBlocks() == 0
	}, 5*time.Second, 10*time.Millisecond)
	s := f.pool.Stats()
	assert.Equal(t, 3, s.HeldBlocks)
	assert.Equal(t, int64(3), s.Reclaimed)
	assert.Zero(t, s.ActiveBytes)
}

func TestClosedBuffersAreNotReclaimedAgain(t *testing.T) {
	f := newFixture(t, nil)
	func() {
		b, err := f.pool.Allocate(64)
		require.NoError(t, err)
		require.NoError(t, b.Close())
	}()
	for range 3 {
		runtime.GC()
	}
	time.Sleep(10 * time.Millisecond)
	s := f.pool.Stats()
	assert.Zero(t, s.Reclaimed)
	assert.Equal(t, 1, s.HeldBlocks)
}

func TestWithoutDropSafetyADroppedBufferIsLost(t *testing.T) {
	q := newFixture(t, nil).q
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	count := allocator.NewCounting(imm)
	p, err := mempool.New(count, mempool.WithDropSafety(false))
	require.NoError(t, err)
	var buf *cl.Buffer
	func() {
		b, err := p.Allocate(64)
		require.NoError(t, err)
		buf = b.Buffer()
	}()
	for range 3 {
		runtime.GC()
	}
	time.Sleep(10 * time.Millisecond)
	assert.Equal(t, 1, p.ActiveBlocks(), "nothing brings it back")
	assert.Zero(t, p.Stats().Reclaimed)
	p.StopHolding()
	assert.Equal(t, 1, count.Stats().Live, "the leak the docs warn of")
	require.NoError(t, count.Free(buf)) // clean up by hand

	// Closed buffers work as with drop safety on.
	b, err := p.Allocate(64)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	assert.ErrorIs(t, b.Close(), mempool.ErrClosed)
}

// Without drop safety, the pool hands out PooledBuffers from slabs it
// allocates a few dozen at a time; each is still used once, so a stale
// pointer, kept past Close and past many later Allocates, sees only its own
// Close.
func TestWithoutDropSafetyEveryBufferIsItsOwn(t *testing.T) {
	f := newFixture(t, nil, mempool.WithDropSafety(false))
	const n = 200 // several slabs
	var closed []*mempool.PooledBuffer
	ids := map[uint64]bool{}
	for i := range n {
		b, err := f.pool.Allocate(int64(100 + i%3))
		require.NoError(t, err)
		assert.False(t, ids[b.ID()], "a live id is never handed out again")
		ids[b.ID()] = true
		assert.Equal(t, int64(100+i%3), b.Size())
		require.NoError(t, b.Close())
		closed = append(closed, b)
	}
	before := f.pool.Stats()
	assert.Equal(t, int64(n-1), before.Hits, "one block served every request")
	for i, b := range closed {
		assert.True(t, b.Closed())
		assert.Nil(t, b.Buffer())
		assert.Equal(t, int64(100+i%3), b.Size(), "Size still says what was asked")
		assert.ErrorIs(t, b.Close(), mempool.ErrClosed)
	}
	assert.Equal(t, before, f.pool.Stats(), "stale Closes change nothing")
}

func TestOutOfMemoryFreesHeldBlocksLargestFirst(t *testing.T) {
	var rec *freeRecorder
	size := func(n int64) int64 { return mempool.AllocSize(mempool.BinNumber(n, 4), 4) }
	require.Equal(t, []int64{1023, 511, 207, 1343, 1919}, []int64{size(1000), size(500), size(200), size(1300), size(1900)})
	const budget = 1023 + 511 + 207 + 400
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator {
		rec = &freeRecorder{Allocator: allocator.NewBudget(a, budget)}
		return rec
	})
	for _, n := range []int64{500, 1000, 200} {
		b, err := f.pool.Allocate(n)
		require.NoError(t, err)
		require.NoError(t, b.Close())
	}
	require.Equal(t, 3, f.pool.HeldBlocks())

	// 1300 bytes (1343) fit once the 1000-byte block (1023) is freed:
	// 511 + 207 + 1343 <= 2141. The smaller ones stay held.
	b, err := f.pool.Allocate(1300)
	require.NoError(t, err)
	assert.Equal(t, []int64{1023}, rec.freed)
	s := f.pool.Stats()
	assert.Equal(t, int64(1), s.OOMRetries)
	assert.Equal(t, 2, s.HeldBlocks)
	assert.Equal(t, int64(511+207+1343), s.ManagedBytes)
	largest, ok := f.pool.LargestHeldBin()
	assert.True(t, ok)
	assert.Equal(t, mempool.BinNumber(500, 4), largest)

	// With the 1300-byte block held too, 1900 bytes (1919) need the two
	// largest held blocks freed, largest first: 207 + 1919 <= 2141.
	require.NoError(t, b.Close())
	c, err := f.pool.Allocate(1900)
	require.NoError(t, err)
	assert.Equal(t, []int64{1023, 1343, 511}, rec.freed)
	assert.Equal(t, 1, f.pool.HeldBlocks())
	largest, _ = f.pool.LargestHeldBin()
	assert.Equal(t, mempool.BinNumber(200, 4), largest)
	assert.Equal(t, int64(3), f.pool.Stats().OOMRetries)
	require.NoError(t, c.Close())
}

func TestOutOfMemoryWhenNothingIsLeftToFree(t *testing.T) {
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator { return allocator.NewBudget(a, 1000) })
	a, err := f.pool.Allocate(800)
	require.NoError(t, err)
	before := countersOf(f.pool.Stats())

	b, err := f.pool.Allocate(700)
	assert.Nil(t, b)
	require.ErrorIs(t, err, mempool.ErrOutOfMemory)
	require.ErrorIs(t, err, cl.ErrMemObjectAllocationFailure, "wraps the allocator's error")
	var oom *mempool.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.Equal(t, int64(700), oom.Requested)
	assert.Equal(t, mempool.AllocSize(mempool.BinNumber(700, 4), 4), oom.AllocSize)
	assert.Equal(t, 1, oom.ActiveBlocks)
	assert.Equal(t, int64(800), oom.ActiveBytes)
	assert.Zero(t, oom.HeldBlocks)
	assert.Contains(t, err.Error(), "requested 700 bytes")
	assert.Contains(t, err.Error(), "1 block active holding 800 bytes requested")
	assert.Contains(t, err.Error(), "0 blocks held")

	assert.Equal(t, before, countersOf(f.pool.Stats()), "a refusal changes no counter")
	s := f.pool.Stats()
	assert.Equal(t, int64(1), s.OOMs)
	require.NoError(t, a.Close())
}

func TestOtherAllocatorErrorsReturnAtOnce(t *testing.T) {
	f, inj := newFixtureHoldingOneBlock(t)
	inj.failNext(&cl.CallError{Call: "clCreateBuffer", Status: cl.ErrInvalidValue})
	calls := inj.calls
	_, err := f.pool.Allocate(4096)
	require.ErrorIs(t, err, cl.ErrInvalidValue)
	assert.NotErrorIs(t, err, mempool.ErrOutOfMemory)
	assert.Contains(t, err.Error(), "clCreateBuffer")
	assert.Equal(t, calls+1, inj.calls, "no retry")
	s := f.pool.Stats()
	assert.Equal(t, 1, s.HeldBlocks, "held blocks untouched")
	assert.Zero(t, s.OOMRetries)
	assert.Equal(t, counters{Held: 1, Managed: 64 + 3, HeldBytes: 64 + 3}, countersOf(s))
}

func TestEachOutOfMemoryStatusTriggersTheRetry(t *testing.T) {
	for _, st := range []cl.Status{cl.ErrMemObjectAllocationFailure, cl.ErrOutOfResources, cl.ErrOutOfHostMemory} {
		t.Run(st.Name(), func(t *testing.T) {
			f, inj := newFixtureHoldingOneBlock(t)
			inj.failNext(errors.Join(errors.New("wrapped"), &cl.CallError{Call: "clEnqueueWriteBuffer", Status: st}))
			b, err := f.pool.Allocate(4096)
			require.NoError(t, err, "the retry after freeing the held block succeeds")
			assert.Zero(t, f.pool.HeldBlocks())
			assert.Equal(t, int64(1), f.pool.Stats().OOMRetries)
			require.NoError(t, b.Close())
		})
	}
}

func TestOutOfMemoryCollectsDroppedBuffers(t *testing.T) {
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator { return allocator.NewBudget(a, 1000) })
	func() {
		_, err := f.pool.Allocate(800) // dropped, never closed
		require.NoError(t, err)
	}()
	b, err := f.pool.Allocate(900)
	require.NoError(t, err, "the GC pass brings the dropped block back, and it is freed")
	s := f.pool.Stats()
	assert.Equal(t, int64(1), s.Reclaimed)
	assert.Equal(t, int64(1), s.DeviceFrees)
	assert.Equal(t, 1, s.ActiveBlocks)
	require.NoError(t, b.Close())
}

func TestLimit(t *testing.T) {
	size := func(n int64) int64 { return mempool.AllocSize(mempool.BinNumber(n, 4), 4) }
	limit := size(4096) + size(1000)
	f := newFixture(t, nil, mempool.WithLimit(limit))
	assert.Equal(t, limit, f.pool.Stats().Limit)

	a, err := f.pool.Allocate(4096)
	require.NoError(t, err)
	b, err := f.pool.Allocate(1000)
	require.NoError(t, err)
	require.NoError(t, b.Close())

	// 2000 bytes pass the limit: the pool frees the held 1000-byte block,
	// still passes it, and refuses.
	_, err = f.pool.Allocate(2000)
	require.ErrorIs(t, err, mempool.ErrOutOfMemory)
	var oom *mempool.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.Nil(t, oom.Err, "the limit refused, not the device")
	assert.Equal(t, int64(2000), oom.Requested)
	assert.Equal(t, limit, oom.Limit)
	assert.Equal(t, int64(4096), oom.ActiveBytes)
	assert.Zero(t, oom.HeldBytes, "held blocks were freed before refusing")
	assert.Contains(t, err.Error(), "over the pool's limit")
	assert.Contains(t, err.Error(), "limit")
	assert.Equal(t, counters{Active: 1, Managed: size(4096), ActiveBytes: 4096}, countersOf(f.pool.Stats()))

	// Within the limit after the held block went: fine.
	c, err := f.pool.Allocate(900)
	require.NoError(t, err)
	assert.LessOrEqual(t, f.pool.ManagedBytes(), limit)
	require.NoError(t, a.Close())
	require.NoError(t, c.Close())
}

// A request up to the device's largest buffer must not fail because its
// bin's AllocSize is larger: it gets a block of exactly its size, freed on
// Close since it cannot serve the rest of its bin.
func TestRequestsUpToTheDeviceLimit(t *testing.T) {
	f := newFixture(t, nil)
	limit := f.q.Device().MaxMemAllocSize
	require.Greater(t, mempool.AllocSize(mempool.BinNumber(limit, 4), 4), limit, "the bin of the limit is larger than it")
	rec := &recorder{}
	f.pool.AddHook(rec)

	b, err := f.pool.Allocate(limit)
	require.NoError(t, err)
	assert.Equal(t, limit, b.Buffer().Size())
	s := f.pool.Stats()
	assert.Equal(t, limit, s.ManagedBytes)
	assert.Equal(t, limit, s.AllocatedBytes.Large.Current)
	for _, e := range rec.take() {
		assert.Equal(t, limit, e.AllocSize, "%v", e.Kind)
	}

	require.NoError(t, b.Close())
	s = f.pool.Stats()
	assert.Zero(t, s.HeldBlocks, "an exact-size block is not held")
	assert.Zero(t, s.ManagedBytes)
	assert.Equal(t, int64(1), s.DeviceFrees)

	// A request whose bin fits is binned and held as usual.
	half := limit/2 + 1
	require.LessOrEqual(t, mempool.AllocSize(mempool.BinNumber(half, 4), 4), limit)
	h, err := f.pool.Allocate(half)
	require.NoError(t, err)
	assert.Equal(t, mempool.AllocSize(mempool.BinNumber(half, 4), 4), h.Buffer().Size())
	require.NoError(t, h.Close())
	assert.Equal(t, 1, f.pool.HeldBlocks())

	_, err = f.pool.Allocate(limit + 1)
	assert.ErrorIs(t, err, cl.ErrInvalidBufferSize, "over the limit stays refused")
}
