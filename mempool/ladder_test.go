package mempool_test

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The out-of-memory ladder (allocate.go) against the defects of issue 21:
// each test here hung or failed before the core's rewrite.

const mib = 1 << 20

// errTripped is a tripwire's refusal: not an out-of-memory, so a pool
// returns it at once instead of retrying.
var errTripped = errors.New("tripwire: tripped")

// tripwire passes allocations through to the allocator it wraps (found
// through Unwrap, so the pool still knows its device), recording the sizes
// asked for, refused or not, until it is tripped: then it fails each
// with errTripped. A test trips it when an Allocate hung retrying the
// device forever, to get its goroutine back.
type tripwire struct {
	allocator.Allocator
	tripped atomic.Bool
	mu      sync.Mutex
	sizes   []int64 // the first maxRecorded sizes asked for since reset
}

const maxRecorded = 32

// over makes w wrap a and returns w: a fixture's wrap.
func (w *tripwire) over(a allocator.Allocator) allocator.Allocator {
	w.Allocator = a
	return w
}

func (w *tripwire) Allocate(size int64) (*cl.Buffer, error) {
	if w.tripped.Load() {
		return nil, errTripped
	}
	w.mu.Lock()
	if len(w.sizes) < maxRecorded {
		w.sizes = append(w.sizes, size)
	}
	w.mu.Unlock()
	return w.Allocator.Allocate(size)
}

func (w *tripwire) Unwrap() allocator.Allocator { return w.Allocator }

// asked returns the sizes asked for since the last call, and forgets them.
func (w *tripwire) asked() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.sizes
	w.sizes = nil
	return s
}

// allocateWithin is f.pool.Allocate(size) under hangLimit. If it hangs,
// it fails the test at once, after tripping w so that a pool retrying the
// device forever gets an error and returns (the pool's lock is free
// between its tries): the test's cleanup can then check the pool as
// usual.
func allocateWithin(t *testing.T, f *fixture, w *tripwire, size int64) (*mempool.PooledBuffer, error) {
	t.Helper()
	var b *mempool.PooledBuffer
	var err error
	done := make(chan struct{})
	if within(t, fmt.Sprintf("Allocate(%d)", size), func() {
		defer close(done)
		b, err = f.pool.Allocate(size)
	}) {
		return b, err
	}
	w.tripped.Store(true)
	select {
	case <-done:
		t.Logf("with its allocator tripped, Allocate(%d) returned %v", size, err)
		if b != nil {
			_ = b.Close()
		}
	case <-time.After(hangLimit):
		t.Logf("Allocate(%d) still hangs with its allocator tripped", size)
	}
	t.FailNow()
	return nil, nil
}

// arenaUnit returns the arena's block unit on q's device: its base
// address alignment, at least 512 bytes, a power of two (as the pool
// computes it).
func arenaUnit(q *cl.CommandQueue) int64 {
	u := int64(512)
	for u < q.Device().MemBaseAddrAlign {
		u *= 2
	}
	return u
}

// firstAsk returns, for an arena pool holding blocks of the held sizes
// on a device with room to spare, the bytes it manages and the segment
// its policy asks the device for first to serve a request of size (0 if
// a held segment serves it): the scenarios below size their budgets and
// limits from it, not from the policy's constants.
func firstAsk(t *testing.T, held []int64, size int64) (managed, ask int64) {
	t.Helper()
	w := &tripwire{}
	f := newFixture(t, w.over, mempool.WithArena())
	var open []*mempool.PooledBuffer
	for _, n := range held {
		b, err := f.pool.Allocate(n)
		require.NoError(t, err)
		open = append(open, b)
	}
	managed = f.pool.ManagedBytes()
	w.asked()
	b, err := f.pool.Allocate(size)
	require.NoError(t, err)
	if asked := w.asked(); len(asked) > 0 {
		ask = asked[0]
	}
	for _, o := range append(open, b) {
		require.NoError(t, o.Close())
	}
	return managed, ask
}

// roundTo returns size rounded up to a multiple of unit, at least unit.
func roundTo(size, unit int64) int64 {
	return max((size+unit-1)/unit*unit, unit)
}

// Issue 21: when the device refused the arena's segment for a 1,600,000
// byte request with less than 2 MiB left, the ladder halved it, rounding
// a large segment's halves up to 2 MiB: 2 MiB gave 2 MiB again, and
// Allocate retried it forever (from 2 MiB after a 1000-byte request under
// a 3,900 KiB budget; from 14 MiB, 8, 4, 2, 2, ... in a pool of 200 MiB).
// The ladder now tries a segment of the request's own size instead, which
// the room left holds. Each case leaves one byte less than the policy's
// segment (learned on a pool with room: firstAsk).
func TestLadderServesWhatTheBudgetHolds(t *testing.T) {
	for _, c := range []struct {
		name string
		held []int64 // allocated first and kept open
	}{
		{"24MiB", []int64{24 * mib}},
		{"200MiB", []int64{100 * mib, 100 * mib}},
	} {
		t.Run(c.name, func(t *testing.T) {
			managed, first := firstAsk(t, c.held, 1600000)
			c := struct {
				held          []int64
				budget, first int64
			}{c.held, managed + first - 1, first}
			w := &tripwire{}
			var budget *allocator.Budget
			f := newFixture(t, func(a allocator.Allocator) allocator.Allocator {
				budget = allocator.NewBudget(a, c.budget)
				w.Allocator = budget
				return w
			}, mempool.WithArena())
			require.Greater(t, c.first, roundTo(1600000, arenaUnit(f.q)), "the policy's segment is larger than the request")
			var held []*mempool.PooledBuffer
			for _, n := range c.held {
				b, err := f.pool.Allocate(n)
				require.NoError(t, err)
				held = append(held, b)
			}
			require.Less(t, c.budget-budget.Live(), c.first, "less than the policy's segment is left")
			w.asked()

			b, err := allocateWithin(t, f, w, 1600000)
			require.NoError(t, err, "the request's own 1,600,000 bytes fit in the %d bytes left", c.budget-budget.Live())
			assert.Equal(t, []int64{c.first, 1600000}, w.asked(), "the policy's segment, refused; then the request's own size")
			s := f.pool.Stats()
			assert.Equal(t, budget.Live(), s.ManagedBytes)
			assert.LessOrEqual(t, s.ManagedBytes, c.budget)
			assert.Equal(t, len(c.held)+1, s.ActiveBlocks)
			require.NoError(t, b.Close())
			for _, h := range held {
				require.NoError(t, h.Close())
			}
		})
	}
}

// Issue 21: under WithLimit(1900000), after a 1000-byte request took its
// segment, a 1,600,000-byte request's 2 MiB segment passed the limit and
// halving it gave 2 MiB again, forever, under the pool's lock: Stats and
// SetLimit of every other goroutine hung too. Now the request returns
// (the room the limit leaves is too small: an out-of-memory), and the
// pool answers while it runs.
func TestLadderLimitNeverSpinsHoldingTheLock(t *testing.T) {
	const limit = 1900000
	// A pool of its own, not newFixture's: if Allocate hangs holding the
	// pool's lock, nothing may call the pool again, a cleanup included.
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	count := allocator.NewCounting(imm)
	p, err := mempool.New(count, mempool.WithArena(), mempool.WithLimit(limit))
	require.NoError(t, err)
	a, err := p.Allocate(1000)
	require.NoError(t, err)

	var b *mempool.PooledBuffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		b, err = p.Allocate(1600000)
	}()
	deadline := time.After(hangLimit)
	calls := 0
	for running := true; running; calls++ {
		// Stats and SetLimit answer while the request runs, and after.
		if !within(t, "Stats, while Allocate(1600000) runs", func() { _ = p.Stats() }) ||
			!within(t, "SetLimit, while Allocate(1600000) runs", func() { _ = p.SetLimit(limit) }) {
			return
		}
		select {
		case <-done:
			running = false
		case <-deadline:
			t.Errorf("Allocate(1600000) under a limit of %d did not return within %v: it hangs", limit, hangLimit)
			return
		case <-time.After(time.Millisecond):
		}
	}
	t.Logf("Stats and SetLimit answered %d times each", calls)
	if err != nil {
		require.ErrorIs(t, err, mempool.ErrOutOfMemory)
	} else {
		require.NoError(t, b.Close())
	}
	s := p.Stats()
	assert.LessOrEqual(t, s.ManagedBytes, int64(limit))
	assert.Equal(t, int64(limit), s.Limit)
	require.NoError(t, a.Close())
	require.NoError(t, p.Close())
	s, c := p.Stats(), count.Stats()
	assert.Zero(t, s.ManagedBytes)
	assert.Zero(t, c.Live, "device buffers never freed")
	assert.Equal(t, c.Allocs, c.Frees)
	assert.Equal(t, c.Allocs, s.DeviceAllocs)
}

// Issue 21: under WithLimit, a request whose policy segment passes the
// room the limit leaves (though not the limit) failed, where a Budget of
// the same size, refusing the same segment, served it. Now the segment
// shrinks to the room, which a segment of the request's own size fits.
func TestLadderLimitServesWhatABudgetServes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		held    []int64 // allocated first and kept open
		request int64
	}{
		{"24MiB", []int64{24 * mib}, 1600000},
		{"40MiB", []int64{40 * mib}, 3 * mib},
	} {
		// One byte less room than the policy's segment (firstAsk).
		managed, policy := firstAsk(t, tc.held, tc.request)
		c := struct {
			name           string
			held           []int64
			total, request int64
			policy         int64
		}{tc.name, tc.held, managed + policy - 1, tc.request, policy}
		for _, by := range []string{"limit", "budget"} {
			t.Run(c.name+"/"+by, func(t *testing.T) {
				w := &tripwire{}
				f := newCappedFixture(t, by, c.total, w.over, mempool.WithArena())
				var held []*mempool.PooledBuffer
				for _, n := range c.held {
					b, err := f.pool.Allocate(n)
					require.NoError(t, err)
					held = append(held, b)
				}
				room := c.total - f.pool.ManagedBytes()
				require.Less(t, room, c.policy, "the policy's segment passes the room left")
				require.Less(t, c.policy, c.total, "but not the %s", by)
				require.GreaterOrEqual(t, room, roundTo(c.request, arenaUnit(f.q)), "the request's own block fits the room")
				w.asked()

				b, err := allocateWithin(t, f, w, c.request)
				require.NoError(t, err, "a segment of the request's own size fits the %d bytes the %s leaves", room, by)
				if asked := w.asked(); by == "budget" {
					require.NotEmpty(t, asked)
					assert.Equal(t, c.policy, asked[0], "the device was asked for the policy's segment first")
				}
				assert.LessOrEqual(t, f.pool.ManagedBytes(), c.total)
				require.NoError(t, b.Close())
				for _, h := range held {
					require.NoError(t, h.Close())
				}
			})
		}
	}
}

// Found by FuzzLadder (seed 2): a miss that makes the arena's slack
// give up a kept segment (BeforeGrow) reserves its own segment under the
// limit before the kept one is out of the accounts, so the room it sees
// still counts the segment being freed. Under a limit of 3,900 KiB, with
// a wholly free 2 MiB segment kept and 1,896,448 bytes in use, a 2 MiB
// request failed, though freeing the kept segment left exactly 2 MiB: the
// ladder never tries the policy's segment again after that free (and its
// own size is the policy's). A Budget of the same size serves it.
func TestLadderRoomCountsTheSegmentsBeforeGrowFrees(t *testing.T) {
	const total = 3900 << 10
	for _, by := range []string{"limit", "budget"} {
		t.Run(by, func(t *testing.T) {
			w := &tripwire{}
			f := newCappedFixture(t, by, total, w.over, mempool.WithArena())
			small, err := f.pool.Allocate(1000) // a 2 MiB small segment
			require.NoError(t, err)
			// A large segment takes (most of) the rest: under the limit, the
			// 1,896,448 bytes of room; under the budget, its own 1,600,000.
			large, err := allocateWithin(t, f, w, 1600000)
			require.NoError(t, err)
			require.NoError(t, small.Close()) // its segment is wholly free, kept
			before := f.pool.Stats()
			require.Less(t, total-before.ManagedBytes, int64(2*mib), "no room for 2 MiB more")
			require.GreaterOrEqual(t, total-(before.ManagedBytes-2*mib), int64(2*mib), "but there is once the kept segment goes")

			b, err := allocateWithin(t, f, w, 2*mib)
			require.NoError(t, err, "freeing the kept 2 MiB segment leaves room for 2 MiB")
			s := f.pool.Stats()
			assert.Equal(t, before.DeviceFrees+1, s.DeviceFrees, "the kept segment was freed")
			assert.LessOrEqual(t, s.ManagedBytes, int64(total))
			require.NoError(t, b.Close())
			require.NoError(t, large.Close())
		})
	}
}

// RMM's pool_mr_tests ForceGrowth: a pool over a 6000-byte budget serves
// 1000, 4000 and 500 bytes at once, each from a segment of its own size
// after the device refused the policy's 2 MiB, and refuses 2000 more.
// Blocks here align to 512 bytes (POCL's and Oclgrind's base address
// alignment is 128 bytes; the arena's unit is at least 512), so the three
// take 1024 + 4096 + 512 = 5632 bytes, and 2048 more would pass 6000.
// (The halving gave the 1000-byte request a 4096-byte segment, halving
// 2 MiB down to the first size the budget held, and the 4000 failed.)
func TestLadderGrowsByTheRequestAsRMM(t *testing.T) {
	const budget = 6000
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator {
		return allocator.NewBudget(a, budget)
	}, mempool.WithArena())
	unit := arenaUnit(f.q)
	sizes := []int64{1000, 4000, 500}
	var need int64
	for _, n := range sizes {
		need += roundTo(n, unit)
	}
	if need > budget {
		t.Skipf("blocks of %d bytes: %v takes %d bytes, more than RMM's %d", unit, sizes, need, budget)
	}
	var bs []*mempool.PooledBuffer
	for _, n := range sizes {
		b, err := f.pool.Allocate(n)
		require.NoError(t, err, "Allocate(%d) after %d bytes", n, f.pool.ManagedBytes())
		assert.Zero(t, b.Offset(), "a segment of its own")
		bs = append(bs, b)
	}
	s := f.pool.Stats()
	assert.Equal(t, need, s.ManagedBytes, "segments of the requests' own sizes")
	assert.Equal(t, int64(3), s.DeviceAllocs)
	_, err := f.pool.Allocate(2000)
	require.ErrorIs(t, err, mempool.ErrOutOfMemory, "RMM's last step: 2000 more bytes are too much")
	for _, b := range bs {
		require.NoError(t, b.Close())
	}
}

// Issue 21 (torch's test_notifies_oom): a request over the device's
// largest buffer is an out-of-memory like any other: the hooks hear of
// its malloc, which fails with it, and Stats().OOMs and num_ooms count it.
func TestLadderOversizeRequestIsAnOutOfMemory(t *testing.T) {
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			opts := policyOptions(arena)
			f := newFixture(t, nil, opts...)
			size := f.q.Device().MaxMemAllocSize + 1
			rec := &recorder{}
			remove := f.pool.AddHook(rec)
			b, err := f.pool.Allocate(size)
			assert.Nil(t, b)
			require.ErrorIs(t, err, mempool.ErrOutOfMemory)
			ev := rec.take()
			require.Equal(t, []mempool.EventKind{mempool.MallocBefore, mempool.MallocAfter}, kinds(ev), "the hook hears of the failed malloc")
			assert.Equal(t, size, ev[0].Size)
			assert.ErrorIs(t, ev[1].Err, mempool.ErrOutOfMemory)
			assert.Equal(t, size, ev[1].Size)
			assert.Zero(t, ev[1].BlockID)
			s := f.pool.Stats()
			assert.Equal(t, int64(1), s.OOMs)
			assert.Equal(t, int64(1), f.pool.MemoryStats()["num_ooms"])
			assert.Zero(t, s.DeviceAllocs, "the device was not asked")

			remove()
			_, err = f.pool.Allocate(size)
			require.ErrorIs(t, err, mempool.ErrOutOfMemory)
			assert.Equal(t, int64(2), f.pool.Stats().OOMs, "counted without a hook too")
			assert.Equal(t, int64(2), f.pool.MemoryStats()["num_ooms"])
		})
	}
}

// Issue 21: a request whose own block passes the limit, which no amount
// of freeing could serve, fails at once and frees nothing the pool holds.
// (The arena's slack gave up its kept segments before the limit was
// looked at: a 16 MiB request under an 8 MiB limit freed a held 4 MiB
// segment, and failed all the same.)
func TestLadderNeverServableFreesNothing(t *testing.T) {
	const limit = 8 * mib
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			opts := append(policyOptions(arena), mempool.WithLimit(limit))
			f := newFixture(t, nil, opts...)
			a, err := f.pool.Allocate(4 * mib)
			require.NoError(t, err)
			require.NoError(t, a.Close())
			before := f.pool.Stats()
			require.Positive(t, before.HeldBytes)
			require.Equal(t, before.HeldBytes, before.ManagedBytes, "a wholly free segment, held")
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)

			b, err := f.pool.Allocate(16 * mib)
			runtime.ReadMemStats(&m1)
			assert.Nil(t, b)
			require.ErrorIs(t, err, mempool.ErrOutOfMemory)
			var oom *mempool.OutOfMemoryError
			require.ErrorAs(t, err, &oom)
			assert.Equal(t, int64(limit), oom.Limit)
			assert.Nil(t, oom.Err, "the limit refused it, not the device")
			s := f.pool.Stats()
			assert.Equal(t, before.HeldBytes, s.HeldBytes, "nothing held was freed")
			assert.Equal(t, before.ManagedBytes, s.ManagedBytes)
			assert.Equal(t, before.DeviceFrees, s.DeviceFrees, "no device frees")
			assert.Equal(t, before.DeviceAllocs, s.DeviceAllocs, "the device was not asked")
			assert.Equal(t, before.OOMRetries, s.OOMRetries, "no ladder")
			assert.Equal(t, m0.NumForcedGC, m1.NumForcedGC, "no garbage collection")
			assert.Equal(t, before.OOMs+1, s.OOMs)
		})
	}
}

// dropAllocate allocates size bytes from p and drops the PooledBuffer
// without Close, unreachable at once; it returns the block's buffer.
//
//go:noinline
func dropAllocate(t *testing.T, p *mempool.Pool, size int64) *cl.Buffer {
	b, err := p.Allocate(size)
	require.NoError(t, err)
	return b.Buffer()
}

// Issue 21, the ladder's order, PyOpenCL's: after a refusal (the device's
// or the limit's), it collects buffers dropped without Close before it
// frees what it holds, and a block that came back serves the request.
// Under a limit, the pool freed its held blocks first and allocated anew,
// leaving the dropped block held.
func TestLadderCollectsDroppedBuffersFirst(t *testing.T) {
	total := allocSize(8000) + allocSize(4000) // room for two blocks only
	for _, by := range []string{"budget", "limit"} {
		t.Run(by, func(t *testing.T) {
			f := newCappedFixture(t, by, total, nil)
			held, err := f.pool.Allocate(8000)
			require.NoError(t, err)
			require.NoError(t, held.Close())
			buf := dropAllocate(t, f.pool, 4000)

			b, err := f.pool.Allocate(4000)
			require.NoError(t, err)
			assert.Same(t, buf, b.Buffer(), "the dropped block, collected, serves the request")
			s := f.pool.Stats()
			assert.Equal(t, int64(1), s.Reclaimed)
			assert.Equal(t, int64(2), s.DeviceAllocs)
			assert.Zero(t, s.DeviceFrees, "the held block was not freed: the collection came first")
			assert.Equal(t, 1, s.HeldBlocks)
			require.NoError(t, b.Close())
		})
	}
}

// Issue 21, the ladder's order: without a dropped buffer, a collection
// that brings nothing back is no reason to ask the device again. After
// the device refused the arena's segment, the ladder collects, has
// nothing held to free, and asks once more, for the request's own size:
// two device calls in all. (The halving asked for 1 MiB, 512 KiB, ...,
// 4 KiB after the collection.)
func TestLadderRetriesTheDeviceOnlyForARung(t *testing.T) {
	// Two blocks fill what the pool holds; the budget leaves one byte
	// less than the policy's next segment (firstAsk).
	managed, first := firstAsk(t, []int64{1 * mib, 1 * mib}, 1000)
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator {
		return allocator.NewBudget(a, managed+first-1)
	}, mempool.WithArena())
	unit := arenaUnit(f.q)
	require.Greater(t, first, roundTo(1000, unit), "the policy's segment is larger than the request's block")
	x, err := f.pool.Allocate(1 * mib)
	require.NoError(t, err)
	y, err := f.pool.Allocate(1 * mib)
	require.NoError(t, err)
	require.Equal(t, managed, f.pool.ManagedBytes())

	rec := &recorder{}
	remove := f.pool.AddHook(rec)
	defer remove()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	b, err := f.pool.Allocate(1000)
	runtime.ReadMemStats(&m1)
	require.NoError(t, err)
	var asked []int64
	for _, e := range rec.take() {
		if e.Kind == mempool.AllocBefore {
			asked = append(asked, e.Size)
		}
	}
	assert.Equal(t, []int64{first, roundTo(1000, unit)}, asked, "the policy's segment, then the request's own size")
	assert.Greater(t, m1.NumForcedGC, m0.NumForcedGC, "the ladder collected (two blocks are active)")
	s := f.pool.Stats()
	assert.Equal(t, int64(1), s.OOMRetries)
	assert.Zero(t, s.Reclaimed)
	for _, c := range []*mempool.PooledBuffer{b, x, y} {
		require.NoError(t, c.Close())
	}
}

// The sizes, limits and budgets the fuzzer picks from: around the arena's
// segment sizes and the cases of issue 21.
var (
	ladderSizes  = []int64{0, 1, 500, 1000, 4000, 4096, 6000, 65536, 1 * mib, 1*mib + 1, 1600000, 1835008, 2 * mib, 2*mib + 1, 3 * mib, 5 * mib, 13 * mib, 20 * mib}
	ladderLimits = []int64{0, 6000, 1 * mib, 1900000, 2 * mib, 3900 << 10, 8 * mib, 24 * mib}
)

// ladderOp indexes of the ops that FuzzLadder's seeds use.
const (
	opAlloc    = 0 // Allocate(ladderSizes[arg])
	opAllocOdd = 3 // Allocate(arg*arg*331 + arg)
	opClose    = 4 // Close open[arg]
	opSetLimit = 6 // SetLimit(ladderLimits[arg])
	opFreeHeld = 7 // FreeHeld
)

// sizeIndex returns the index of n in ladderSizes, as a seed's byte.
func sizeIndex(n int64) byte {
	for i, s := range ladderSizes {
		if s == n {
			return byte(i)
		}
	}
	panic(fmt.Sprintf("no size %d", n))
}

// FuzzLadder runs a random sequence of Allocates, Closes, SetLimits and
// FreeHelds, two bytes each, on a pool (bins or arena) over a random
// Budget under a random limit, every call under hangLimit, and checks
// after each step that the pool never grows past its limit or its
// budget, counts its blocks right, fails only with out-of-memory errors
// and only when the room left could not hold the request's own block,
// with nothing wholly free left unfreed; at the end, that every device
// buffer was freed exactly once.
func FuzzLadder(f *testing.F) {
	s := sizeIndex
	// Issue 21's cases.
	f.Add(uint32(3900<<10), uint32(0), true, []byte{opAlloc, s(1000), opAlloc, s(1600000)})
	f.Add(uint32(40*mib), uint32(1900000), true, []byte{opAlloc, s(1000), opAlloc, s(1600000), opSetLimit, 3})
	f.Add(uint32(40*mib), uint32(3900<<10), true, []byte{opAlloc, s(1000), opAlloc, s(1600000), opClose, 0, opAlloc, s(2 * mib)})
	f.Add(uint32(6000), uint32(0), true, []byte{opAlloc, s(1000), opAlloc, s(4000), opAlloc, s(500), opAlloc, s(6000), opClose, 1, opAlloc, s(4000)})
	f.Add(uint32(48*mib-1), uint32(8*mib), true, []byte{opAlloc, s(5 * mib), opClose, 0, opAlloc, s(20 * mib), opFreeHeld, 0, opAlloc, s(5 * mib)})
	// Limits lowered and raised under memory in use; bins.
	f.Add(uint32(30*mib), uint32(24*mib), true, []byte{opAlloc, s(13 * mib), opAlloc, s(3 * mib), opClose, 1, opSetLimit, 4, opAlloc, s(2*mib + 1), opSetLimit, 0, opAllocOdd, 200, opFreeHeld, 0})
	f.Add(uint32(3*mib), uint32(0), false, []byte{opAlloc, s(1 * mib), opClose, 0, opAlloc, s(1*mib + 1), opAlloc, s(65536), opClose, 0, opAlloc, s(1600000)})
	f.Add(uint32(10*mib), uint32(2*mib), false, []byte{opAlloc, s(4000), opAlloc, s(1 * mib), opClose, 0, opAlloc, s(1*mib + 1), opSetLimit, 1, opAllocOdd, 9})

	q := cltest.Queue(f)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(f, err)
	unit := arenaUnit(q)

	f.Fuzz(func(t *testing.T, budgetBytes, limitBytes uint32, arena bool, ops []byte) {
		// Go's fuzzer takes an input that runs over 10 s for a hang; with
		// the checks after every step, a few thousand steps can take that
		// long on a loaded 2-core machine, so an input is cut to maxOps.
		const maxOps = 512
		ops = ops[:min(len(ops), maxOps)]
		budget := int64(budgetBytes % (48 * mib))
		limit := int64(limitBytes % (48 * mib))
		count := allocator.NewCounting(imm)
		bud := allocator.NewBudget(count, budget)
		opts := append(policyOptions(arena), mempool.WithLimit(limit))
		p, err := mempool.New(bud, opts...)
		require.NoError(t, err)
		// blockOf is the bytes of a request's own block.
		blockOf := func(size int64) int64 {
			if arena {
				return roundTo(size, unit)
			}
			return allocSize(max(size, 1))
		}
		// call runs fn under hangLimit, failing the fuzz input if it hangs.
		call := func(what string, fn func()) {
			t.Helper()
			if !within(t, what, fn) {
				t.FailNow()
			}
		}
		type live struct {
			b    *mempool.PooledBuffer
			size int64
		}
		var open []live
		// noWhollyFree checks that every segment has an active block.
		noWhollyFree := func(step string) {
			t.Helper()
			for _, seg := range p.Snapshot().Segments {
				active := false
				for _, b := range seg.Blocks {
					active = active || b.State == mempool.StateActive
				}
				require.True(t, active, "%s: a wholly free segment of %d bytes is left", step, seg.Size)
			}
		}
		managed := int64(0)
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%8, int(ops[i+1])
			var step string
			switch op {
			case 0, 1, 2, 3:
				size := ladderSizes[arg%len(ladderSizes)]
				if op == opAllocOdd {
					size = int64(arg)*int64(arg)*331 + int64(arg)
				}
				step = fmt.Sprintf("op %d: Allocate(%d)", i/2, size)
				var b *mempool.PooledBuffer
				call(step, func() { b, err = p.Allocate(size) })
				if err == nil {
					open = append(open, live{b, size})
					break
				}
				require.ErrorIs(t, err, mempool.ErrOutOfMemory, step)
				st := p.Stats()
				need, lim := blockOf(size), p.Limit()
				if lim > 0 && need > lim {
					break // no limit could serve it: it fails at once, freeing nothing
				}
				assert.True(t, need > budget-st.ManagedBytes || lim > 0 && need > lim-st.ManagedBytes,
					"%s failed with room for its own %d-byte block: budget %d, limit %d, managed %d: %v", step, need, budget, lim, st.ManagedBytes, err)
				noWhollyFree(step + " failed")
			case 4, 5:
				if len(open) == 0 {
					continue
				}
				k := arg % len(open)
				l := open[k]
				open = append(open[:k], open[k+1:]...)
				step = fmt.Sprintf("op %d: Close of a %d-byte buffer", i/2, l.size)
				call(step, func() { err = l.b.Close() })
				require.NoError(t, err, step)
			case opSetLimit:
				newLimit := ladderLimits[arg%len(ladderLimits)]
				step = fmt.Sprintf("op %d: SetLimit(%d)", i/2, newLimit)
				call(step, func() { err = p.SetLimit(newLimit) })
				require.NoError(t, err, step)
				if newLimit > 0 && p.ManagedBytes() > newLimit {
					noWhollyFree(step + ", still over it")
				}
			case opFreeHeld:
				step = fmt.Sprintf("op %d: FreeHeld", i/2)
				call(step, func() { err = p.FreeHeld() })
				require.NoError(t, err, step)
				noWhollyFree(step)
			}
			var st mempool.Stats
			call(step+": Stats", func() { st = p.Stats() })
			lim := p.Limit()
			if lim > 0 && st.ManagedBytes > managed {
				require.LessOrEqual(t, st.ManagedBytes, lim, "%s: the pool grew past its limit", step)
			}
			managed = st.ManagedBytes
			require.LessOrEqual(t, st.ManagedBytes, budget, step)
			require.Equal(t, bud.Live(), st.ManagedBytes, "%s: managed bytes are the device's", step)
			require.Equal(t, len(open), st.ActiveBlocks, step)
			var activeBytes int64
			for _, l := range open {
				activeBytes += l.size
			}
			require.Equal(t, activeBytes, st.ActiveBytes, step)
			require.Equal(t, st.ManagedBytes, st.HeldBytes+st.AllocatedBytes.All.Current, "%s: managed = held + allocated", step)
		}
		for _, l := range open {
			call("Close", func() { err = l.b.Close() })
			require.NoError(t, err)
		}
		call("Close of the pool", func() { err = p.Close() })
		require.NoError(t, err)
		st := p.Stats()
		assert.Zero(t, st.ManagedBytes)
		assert.Zero(t, st.ActiveBlocks)
		assert.Zero(t, st.ActiveBytes)
		assert.Zero(t, st.HeldBlocks)
		assert.Zero(t, st.HeldBytes)
		cs := count.Stats()
		assert.Zero(t, cs.Live, "device buffers never freed")
		assert.Zero(t, cs.BadFrees, "device buffers freed twice")
		assert.Equal(t, cs.Allocs, cs.Frees)
		assert.Equal(t, cs.Allocs, st.DeviceAllocs)
		assert.Equal(t, cs.Frees, st.DeviceFrees)
		assert.Zero(t, bud.Live())
	})
}

// Found by FuzzLadder's slowness (most inputs that reach the ladder took
// 100 ms or more): the ladder's collection (collectDropped, buffer.go)
// waits for the finalizer of a marker, new(int64), to know that the
// finalizers of the buffers it dropped have run. An 8-byte pointer-free
// object comes from the runtime's tiny allocator, which packs it with
// others in one 16-byte block, and "the finalizer for an unreferenced
// object in such an allocation may never run if it always exists in the
// same batch as a referenced object" (runtime.SetFinalizer). Here another
// goroutine, on the one P, keeps tiny objects alive while the collection
// runs: the marker shares their block, its finalizer does not run, and
// every collection waits out its 100 ms timeout and returns early, its
// second marker never set.
//
// The race detector turns the tiny allocator off: under -race the test
// has nothing to show, and skips.
func TestLadderCollectionDoesNotWaitOutItsTimeout(t *testing.T) {
	if !tinyAllocatorOn() {
		t.Skip("the runtime packs no tiny objects together (the race detector is on)")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator {
		return allocator.NewBudget(a, 2*mib+4096)
	}, mempool.WithArena(), mempool.WithoutQueueCaches())
	// Two blocks fill a small segment: each miss after this one goes down
	// the ladder, and collects (two blocks are active).
	x, err := f.pool.Allocate(1 * mib)
	require.NoError(t, err)
	y, err := f.pool.Allocate(1 * mib)
	require.NoError(t, err)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		keep := make([]*int64, 4096) // tiny objects, each alive for 4096 more
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			keep[i%len(keep)] = new(int64)
			runtime.Gosched()
		}
	})
	const timeout = 100 * time.Millisecond // collectDropped's
	var took []time.Duration
	for range 3 {
		start := time.Now()
		b, err := f.pool.Allocate(1000) // the device refuses 2 MiB; the ladder collects; then 1024 bytes
		took = append(took, time.Since(start))
		require.NoError(t, err)
		require.NoError(t, b.Close())
		require.NoError(t, f.pool.FreeHeld())
	}
	close(stop)
	wg.Wait()
	assert.Less(t, slices.Min(took), timeout, "every collection waited out its timeout: %v", took)
	require.NoError(t, x.Close())
	require.NoError(t, y.Close())
}

// tinySink keeps tinyAllocatorOn's objects on the heap.
var tinySink [2]*int64

// tinyAllocatorOn reports whether the runtime packs tiny pointer-free
// objects into shared blocks: whether two 8-byte objects allocated in a
// row are (in one of a few tries) 8 bytes apart.
func tinyAllocatorOn() bool {
	for range 4 {
		tinySink[0], tinySink[1] = new(int64), new(int64)
		if uintptr(unsafe.Pointer(tinySink[1]))-uintptr(unsafe.Pointer(tinySink[0])) == 8 {
			return true
		}
	}
	return false
}
