package mempool_test

// Hostile review s42b of 0dbc26e: a sanitized pool's quarantine lets a
// closed block through at once while a request is on the out-of-memory
// ladder (Pool.pressing). Does the counter always come back to zero, do
// the checks still find what they should for a block that passed, do the
// counts stay right, and does nothing hang? Found: a write after the
// Close of a block that passed goes unseen, and may land in the next
// user, as it did before for blocks the ladder takes back from the
// quarantine (a test of that failed at e23661e too): documented
// (README, WithSanitizer, the package doc), not tested here.

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s42bSan are the options of a sanitized pool that prints nothing.
func s42bSan(more ...mempool.Option) []mempool.Option {
	return append([]mempool.Option{mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil)}, more...)
}

// s42bOnLadder is s42a's scene: a sanitized pool (exact bins) over a
// gated allocator, with A open, a wholly free segment C the ladder frees,
// and W, a request of A's size the device refused once, held in the
// allocator at its retry: on the ladder. open lets W go on (once).
type s42bOnLadder struct {
	f    *fixture
	g    *gated
	size int64
	a    *mempool.PooledBuffer
	w    *aside
	open func()
}

func newS42bOnLadder(t *testing.T, opts ...mempool.Option) *s42bOnLadder {
	return newS42bOnLadderAfter(t, nil, opts...)
}

// newS42bOnLadderAfter is newS42bOnLadder, calling before(s) once A and C
// are there, before W starts.
func newS42bOnLadderAfter(t *testing.T, before func(*s42bOnLadder), opts ...mempool.Option) *s42bOnLadder {
	t.Helper()
	s := &s42bOnLadder{g: newGated()}
	s.f = newFixture(t, func(a allocator.Allocator) allocator.Allocator { s.g.Allocator = a; return s.g }, s42bSan(opts...)...)
	s.size = int64(cltest.Size(s.f.q, 100<<10, 1000<<10))
	var err error
	s.a, err = s.f.pool.Allocate(s.size)
	require.NoError(t, err)
	c, err := s.f.pool.Allocate(4 * s.size)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	if before != nil {
		before(s)
	}
	var once sync.Once
	hold := s.g.hold()
	s.open = func() { once.Do(hold) }
	t.Cleanup(s.open)
	s.g.refuse.Store(1)
	s.w = allocateAside(s.f.pool.Allocate, s.size)
	select {
	case <-s.g.entered:
	case <-s.w.done:
		t.Fatalf("W returned before its retry: %v", s.w.err)
	case <-time.After(hangLimit):
		t.Fatal("W never reached its retry")
	}
	return s
}

// finishW lets W go on and closes its block if it was served.
func (s *s42bOnLadder) finishW(t *testing.T) {
	t.Helper()
	s.open()
	wb, err := s.w.result(t, "W")
	require.NoError(t, err)
	require.NoError(t, wb.Close())
}

// quarantineWorks closes a fresh block with no request on the ladder
// and reports whether it went into the quarantine (the pressing counter
// is back to zero).
func quarantineWorks(t *testing.T, p *mempool.Pool, size int64) {
	t.Helper()
	b, err := p.Allocate(size) // its miss may drain the quarantine: counted after
	require.NoError(t, err)
	before := mempool.Quarantined(p)
	require.NoError(t, b.Close())
	assert.Equal(t, before+1, mempool.Quarantined(p),
		"a block closed with no request on the ladder passed the quarantine: the pool still counts a request pressing")
}

// A request the ladder fails (the limit full of open blocks, nothing in
// flight) leaves the ladder: later Closes are quarantined again. Buffers
// and SVM alike.
func TestS42bPressingEndsWhenTheLadderFails(t *testing.T) {
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			f := newFixture(t, nil, s42bSan(pol.opts...)...)
			size := int64(cltest.Size(f.q, 64<<10, 1<<20))
			a, err := f.pool.Allocate(size)
			require.NoError(t, err)
			b, err := f.pool.Allocate(size)
			require.NoError(t, err)
			managed := f.pool.Stats().ManagedBytes
			require.NoError(t, f.pool.SetLimit(managed))
			misses := f.pool.Stats().Misses
			for range 3 {
				// Within the limit, larger than the room left (an arena's
				// segment may hold more blocks of size than a and b).
				c, err := f.pool.Allocate(managed - size)
				if err == nil {
					require.NoError(t, c.Close())
				}
				require.ErrorIs(t, err, mempool.ErrOutOfMemory)
			}
			require.GreaterOrEqual(t, f.pool.Stats().Misses, misses+3, "the requests went down the ladder")
			require.NoError(t, a.Close())
			assert.Equal(t, 1, mempool.Quarantined(f.pool), "A, closed after the failed requests left the ladder")
			require.NoError(t, b.Close())
			assert.Equal(t, 2, mempool.Quarantined(f.pool))
			assert.Empty(t, f.pool.Findings())
		})
	}
	t.Run("svm", func(t *testing.T) {
		f := newSVMFixture(t, false, nil, s42bSan()...)
		a, err := f.pool.Allocate(64 << 10)
		require.NoError(t, err)
		require.NoError(t, f.pool.SetLimit(f.pool.Stats().ManagedBytes))
		for range 3 {
			c, err := f.pool.Allocate(64 << 10)
			if err == nil {
				require.NoError(t, c.Close())
			}
			require.ErrorIs(t, err, mempool.ErrOutOfMemory)
		}
		require.NoError(t, a.Close())
		assert.Equal(t, 1, mempool.Quarantined(f.pool), "A, closed after the failed requests left the ladder")
		assert.Empty(t, f.pool.Findings())
	})
}

// refuseThenPanic refuses refuse allocations, then panics in the next
// panics ones.
type refuseThenPanic struct {
	allocator.Allocator
	refuse, panics atomic.Int32
}

func (a *refuseThenPanic) Allocate(size int64) (*cl.Buffer, error) {
	if a.refuse.Add(-1) >= 0 {
		return nil, cl.ErrMemObjectAllocationFailure
	}
	if a.panics.Add(-1) >= 0 {
		panic("allocator bug on the ladder's retry")
	}
	return a.Allocator.Allocate(size)
}

func (a *refuseThenPanic) Unwrap() allocator.Allocator { return a.Allocator }

// nthPanics is a hook that panics at the nth event of kind.
type nthPanics struct {
	kind mempool.EventKind
	n    int32
	seen atomic.Int32
}

func (h *nthPanics) Handle(e mempool.Event) {
	if e.Kind == h.kind && h.seen.Add(1) == h.n {
		panic("hook bug on the ladder's retry")
	}
}

// A request that panics on the ladder (its allocator at the retry, or a
// hook at the retry's alloc_before or alloc_after) fails with
// ErrPanicked and leaves the ladder: later Closes are quarantined.
func TestS42bPressingEndsAfterAPanicOnTheLadder(t *testing.T) {
	for _, where := range []string{"allocator", "alloc_before", "alloc_after"} {
		t.Run(where, func(t *testing.T) {
			rp := &refuseThenPanic{}
			f := newFixture(t, func(a allocator.Allocator) allocator.Allocator { rp.Allocator = a; return rp }, s42bSan()...)
			size := int64(cltest.Size(f.q, 100<<10, 1000<<10))
			a, err := f.pool.Allocate(size)
			require.NoError(t, err)
			c, err := f.pool.Allocate(4 * size) // wholly free: the ladder frees it and retries
			require.NoError(t, err)
			require.NoError(t, c.Close())
			rp.refuse.Store(1)
			remove := func() {}
			switch where {
			case "allocator":
				rp.panics.Store(1)
			case "alloc_before":
				remove = f.pool.AddHook(&nthPanics{kind: mempool.AllocBefore, n: 2})
			case "alloc_after":
				remove = f.pool.AddHook(&nthPanics{kind: mempool.AllocAfter, n: 2})
			}
			w, err := f.pool.Allocate(size)
			remove()
			if w != nil {
				require.NoError(t, w.Close())
			}
			require.ErrorIs(t, err, mempool.ErrPanicked)
			require.NoError(t, a.Close())
			assert.Equal(t, 1, mempool.Quarantined(f.pool), "A, closed after the request that panicked left the ladder")
			quarantineWorks(t, f.pool, size)
			assert.Empty(t, f.pool.Findings())
		})
	}
}

// The pool closes while W is on the ladder and a block has passed the
// quarantine: Close returns, W ends, the pool's findings are A's leak
// (B, open) and W's if served, no check misfires, nothing hangs, and
// every device buffer is freed once (the fixture).
func TestS42bPoolClosesWhileARequestIsOnTheLadder(t *testing.T) {
	var b *mempool.PooledBuffer
	s := newS42bOnLadderAfter(t, func(s *s42bOnLadder) {
		var err error
		b, err = s.f.pool.Allocate(s.size / 2) // open through the pool's Close
		require.NoError(t, err)
	})
	require.NoError(t, s.a.Close())
	assert.Equal(t, 0, mempool.Quarantined(s.f.pool), "A passed")
	var closeErr error
	if !within(t, "Pool.Close with W on the ladder", func() { closeErr = s.f.pool.Close() }) {
		s.open()
		return
	}
	require.NoError(t, closeErr)
	s.open()
	wb, werr := s.w.result(t, "W")
	served := 0
	if werr == nil {
		served = 1
		require.NoError(t, wb.Close())
	} else {
		assert.ErrorIs(t, werr, mempool.ErrPoolClosed)
	}
	require.NoError(t, b.Close())
	got := s.f.pool.Findings()
	kinds := findingKinds(got)
	assert.Equal(t, 1+served, kinds[mempool.LeakedAtClose], "%v", got)
	assert.Equal(t, len(got), kinds[mempool.LeakedAtClose], "only leaks: %v", got)
	assert.Equal(t, 0, mempool.Quarantined(s.f.pool))
	st := s.f.pool.Stats()
	assert.Zero(t, st.HeldBlocks, "held after Close")
	assert.Zero(t, st.ActiveBlocks)
}

// An off-by-one write into A, closed while W is on the ladder (A passes
// the quarantine at once): its guard is still checked, found once.
func TestS42bOutOfBoundsFoundOnABlockThatPassed(t *testing.T) {
	s := newS42bOnLadder(t)
	k := kernel(t, s.f.q, offByOne, "upto")
	n := int(s.size / 4)
	id := s.a.ID()
	runUpto(t, s.f.q, k, s.a, n)
	require.NoError(t, s.a.Close())
	assert.Equal(t, 0, mempool.Quarantined(s.f.pool), "A passed")
	s.finishW(t)
	got := s.f.pool.Findings()
	require.Len(t, got, 1, "%v", got)
	assert.Equal(t, mempool.OutOfBounds, got[0].Kind)
	assert.Equal(t, id, got[0].BlockID)
	assert.Equal(t, int64(4*n), got[0].Offset)
	assert.Equal(t, got, s.f.pool.Findings(), "found once")
}

// The counts after blocks passed: with every block closed, none is
// active; what is held is the policy's and the quarantine's; the pool's
// device counts match the allocator's; FreeHeld and StopHolding, called
// while W is on the ladder after A passed, leave nothing held once W's
// block is closed.
func TestS42bCountsAfterPassesAndFreeHeld(t *testing.T) {
	s := newS42bOnLadder(t)
	require.NoError(t, s.a.Close())
	assert.Equal(t, 0, mempool.Quarantined(s.f.pool), "A passed")
	st := s.f.pool.Stats()
	assert.Zero(t, st.ActiveBlocks)
	assert.Zero(t, st.ActiveBytes)
	var err error
	if !within(t, "FreeHeld with W on the ladder", func() { err = s.f.pool.FreeHeld() }) {
		s.open()
		return
	}
	require.NoError(t, err)
	assert.Zero(t, s.f.pool.Stats().HeldBlocks, "held after FreeHeld")
	s.finishW(t)
	assert.Equal(t, 1, mempool.Quarantined(s.f.pool), "W's block, closed with no request on the ladder")
	st, c := s.f.pool.Stats(), s.f.count.Stats()
	assert.Equal(t, c.Allocs, st.DeviceAllocs)
	assert.Equal(t, c.Frees, st.DeviceFrees)
	assert.Equal(t, 1, st.HeldBlocks)
	assert.Zero(t, st.ActiveBlocks)
	if !within(t, "StopHolding", func() { err = s.f.pool.StopHolding() }) {
		return
	}
	require.NoError(t, err)
	st, c = s.f.pool.Stats(), s.f.count.Stats()
	assert.Zero(t, mempool.Quarantined(s.f.pool))
	assert.Zero(t, st.HeldBlocks)
	assert.Zero(t, st.HeldBytes)
	assert.Zero(t, st.ManagedBytes)
	assert.Zero(t, c.Live, "device buffers left after StopHolding with nothing open")
	assert.Empty(t, s.f.pool.Findings())
}

// StopHolding while W is on the ladder: A, closed after it, goes back at
// once (no poison) and W still ends; a later Close is not quarantined.
func TestS42bStopHoldingWhileARequestIsOnTheLadder(t *testing.T) {
	s := newS42bOnLadder(t)
	var err error
	if !within(t, "StopHolding with W on the ladder", func() { err = s.f.pool.StopHolding() }) {
		s.open()
		return
	}
	require.NoError(t, err)
	require.NoError(t, s.a.Close())
	assert.Equal(t, 0, mempool.Quarantined(s.f.pool))
	s.finishW(t)
	assert.Equal(t, 0, mempool.Quarantined(s.f.pool))
	st, c := s.f.pool.Stats(), s.f.count.Stats()
	assert.Zero(t, st.HeldBlocks)
	assert.Zero(t, c.Live)
	assert.Empty(t, s.f.pool.Findings())
}

// Three goroutines on three queues (in order, a second in order, out of
// order), under a limit that holds all their blocks but forces the
// ladder (two sizes in turn), each writing its whole block, data and
// nothing past it, before Close: blocks pass the quarantine on one queue
// and serve another. No check may misfire (a check ordered before the
// user's writes, or the next user's guard fill before the last user's
// poison check), every request is served, the device counts match, and
// afterwards no request is left pressing.
func TestS42bQueuesUnderALimitWithPasses(t *testing.T) {
	for _, by := range []string{"limit", "budget"} {
		t.Run(by, func(t *testing.T) {
			q := cltest.Queue(t)
			size := int64(cltest.Size(q, 16<<10, 128<<10))
			need := size + mempool.SanitizerGuard
			block := binSize(2 * need)
			rounds := 40
			for pi := range 2 {
				f := newCappedFixture(t, by, 3*block, nil, s42bSan()...)
				qs := []*cl.CommandQueue{f.q, cltest.SecondQueue(t, f.q, 0), cltest.SecondQueue(t, f.q, cl.QueueOutOfOrder)}
				var sink errSink
				var wg sync.WaitGroup
				for g := range 3 {
					wg.Go(func() {
						data := make([]byte, 2*size)
						for i := range data {
							data[i] = byte(g + 1)
						}
						for i := range rounds {
							n := size << ((i + g) % 2)
							b, err := f.pool.On(qs[g]).Allocate(n)
							if err != nil {
								sink.add(fmt.Errorf("pool %d, goroutine %d, request %d: %w", pi, g, i, err))
								continue
							}
							if err := qs[g].WriteBuffer(b.Base(), b.Offset(), data[:n]); err != nil {
								sink.add(err)
							}
							sink.add(b.Close())
						}
					})
				}
				if !withinWork(t, "three goroutines under the limit", wg.Wait) {
					return
				}
				assert.NoError(t, sink.err())
				st, c := f.pool.Stats(), f.count.Stats()
				assert.Positive(t, st.OOMRetries, "no request went down the ladder: nothing passed")
				assert.Equal(t, c.Allocs, st.DeviceAllocs, "device allocations")
				assert.Equal(t, c.Frees, st.DeviceFrees, "device frees")
				assert.Zero(t, st.ActiveBlocks)
				assert.Empty(t, f.pool.Findings(), "a check misfired")
				require.NoError(t, f.pool.FreeHeld())
				assert.Zero(t, mempool.Quarantined(f.pool))
				quarantineWorks(t, f.pool, size)
				require.NoError(t, f.pool.FreeHeld())
				if t.Failed() {
					return
				}
			}
		})
	}
}

// A request that never reaches nextRung (larger than the limit: "no
// segment fits", the drain and the error at once) leaves nothing
// pressing either; nor does one that fails a hook's MallocBefore.
func TestS42bRequestsOffTheLadderLeaveNothingPressing(t *testing.T) {
	f := newFixture(t, nil, s42bSan(mempool.WithLimit(4<<20))...)
	for range 3 {
		b, err := f.pool.Allocate(8 << 20)
		if b != nil {
			require.NoError(t, b.Close())
		}
		require.ErrorIs(t, err, mempool.ErrOutOfMemory)
	}
	remove := f.pool.AddHook(&nthPanics{kind: mempool.MallocBefore, n: 1})
	b, err := f.pool.Allocate(4096)
	remove()
	if b != nil {
		require.NoError(t, b.Close())
	}
	require.True(t, errors.Is(err, mempool.ErrPanicked), "%v", err)
	quarantineWorks(t, f.pool, 4096)
}

// A buffer dropped without Close, collected by the ladder's own
// collection (rung 2, the request pressing): its block passes the
// quarantine to serve the request, and it is still a Dropped finding,
// once.
func TestS42bDroppedCollectedByTheLadderFoundOnce(t *testing.T) {
	f := newFixture(t, nil, s42bSan()...)
	size := int64(64 << 10)
	id := dropOne(t, f.pool) // 3000 bytes, unreachable
	a, err := f.pool.Allocate(size)
	require.NoError(t, err)
	require.NoError(t, f.pool.SetLimit(f.pool.Stats().ManagedBytes))
	w, werr := f.pool.Allocate(3000) // the limit refuses; the ladder collects the dropped one
	t.Logf("W: %v", werr)
	if werr == nil {
		require.NoError(t, w.Close())
	}
	require.NoError(t, a.Close())
	fs := collectUntil(t, f.pool, mempool.Dropped)
	n := 0
	for _, fd := range fs {
		if fd.Kind == mempool.Dropped {
			n++
			assert.Equal(t, id, fd.BlockID)
		}
	}
	assert.Equal(t, 1, n, "%v", fs)
	assert.Equal(t, len(fs), n, "only the drop: %v", fs)
	quarantineWorks(t, f.pool, 3000)
}
