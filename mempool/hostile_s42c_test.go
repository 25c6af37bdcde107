package mempool_test

// Hostile review s42c of 9576ef1 (the last rung's wait, cut by a Close
// with memory still on its way, counts as a change: another round) and
// 0dbc26e (a sanitized pool's quarantine lets blocks through while a
// request is on the ladder).

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s42cCloser is a goroutine that allocates and closes a block of size on
// pool, pausing every between Closes, until stop: a steady stream of
// Closes of a block that fits no waiting request and frees no segment.
type s42cCloser struct {
	stop   chan struct{}
	done   chan struct{}
	closes atomic.Int64
	errs   atomic.Int64
}

func startCloser(pool *mempool.Pool, size int64, every time.Duration) *s42cCloser {
	c := &s42cCloser{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			select {
			case <-c.stop:
				return
			default:
			}
			b, err := pool.Allocate(size)
			if err != nil {
				c.errs.Add(1)
			} else if b.Close() == nil {
				c.closes.Add(1)
			}
			time.Sleep(every)
		}
	}()
	return c
}

func (c *s42cCloser) halt() {
	select {
	case <-c.stop:
	default:
		close(c.stop)
	}
	<-c.done
}

// s42cScene is s42a's scene (an arena under a 1 MiB limit, A and X of
// 64 KiB sharing the first segment, R of 460 KiB held in the allocator:
// its segment in flight) with W, a second 460 KiB request, on its last
// rung, waiting for R's segment.
type s42cScene struct {
	f      *mempool.Pool
	fx     *fixture
	g      *gated
	a, x   *mempool.PooledBuffer
	r      *aside
	open   func()
	wait   time.Duration
	big    int64
	pieces int64
}

func newS42cScene(t *testing.T, wait time.Duration, opts ...mempool.Option) *s42cScene {
	t.Helper()
	return newS42cSceneOver(t, wait, nil, append([]mempool.Option{mempool.WithLimit(1 << 20)}, opts...)...)
}

// newS42cSceneOver is newS42cScene with no limit unless opts set one,
// and the allocator under the gate wrapped by wrap (if not nil).
func newS42cSceneOver(t *testing.T, wait time.Duration, wrap func(allocator.Allocator) allocator.Allocator, opts ...mempool.Option) *s42cScene {
	t.Helper()
	s := &s42cScene{g: newGated(), big: 460 << 10, pieces: 64 << 10, wait: wait}
	opts = append([]mempool.Option{mempool.WithArena()}, opts...)
	s.fx = newFixture(t, func(a allocator.Allocator) allocator.Allocator {
		s.g.Allocator = a
		if wrap != nil {
			return wrap(s.g)
		}
		return s.g
	}, opts...)
	s.f = s.fx.pool
	if wait > 0 {
		mempool.SetInFlightWait(s.f, wait)
	}
	var err error
	s.a, err = s.f.Allocate(s.pieces)
	require.NoError(t, err)
	s.x, err = s.f.Allocate(s.pieces)
	require.NoError(t, err)
	require.Equal(t, s.a.Base(), s.x.Base(), "A and X share a segment")
	var once sync.Once
	hold := s.g.hold()
	s.open = func() { once.Do(hold) }
	t.Cleanup(s.open)
	s.r = heldInAllocator(t, s.f, s.g, s.big)
	return s
}

// sendW closes X (its piece back in the first segment, where it fits
// nothing), starts W, and returns once W is down to its last rung,
// waiting for R's segment.
func (s *s42cScene) sendW(t *testing.T) *aside {
	t.Helper()
	require.NoError(t, s.x.Close())
	w := downToLastRung(s.f, s.big)
	require.False(t, w.returned(0), "W returned before the Closes: %v", w.err)
	return w
}

// The scene of TestS42aLastRungWaitsAgainWhileMemoryIsOnItsWay, where one
// Close (X's) cut W's wait and W waited again for R's segment, with a
// steady stream of such Closes instead of one: another goroutine
// allocates X's piece and closes it every 2 ms (a fits-nothing,
// frees-nothing Close, as s40c's other goroutines made). R's segment
// arrives 250 ms after W reached its last rung, an eighth of the wait
// bound (here 2 s: the doc's "half a second at most in all", scaled for
// the race detector). Doc (doc.go step 7): memory on its way is waited
// for, up to the bound; a Close that ends the wait before it came leads
// to another round (9576ef1: "the next round waits for it again").
// Expected: W still waits when R's segment comes. Found: every Close of the stream cuts a wait and
// is counted as one of the 16 rounds, so W burns its 16 rounds within a
// few tens of milliseconds and fails with R's segment still on its way,
// long before the wait bound, the starvation of s40c that 9576ef1 fixed
// for one Close, back for many.
func TestS42cStreamOfClosesBurnsTheRoundsWhileMemoryIsOnItsWay(t *testing.T) {
	s := newS42cScene(t, 2*time.Second)
	retries0 := s.f.Stats().OOMRetries
	w := s.sendW(t)
	start := time.Now()
	c := startCloser(s.f, s.pieces, 2*time.Millisecond)
	// 250 ms of Closes with R's segment on its way: W must still wait.
	gaveUp := w.returned(250 * time.Millisecond)
	took := time.Since(start)
	s.open()
	<-s.r.done
	require.NoError(t, s.r.err, "R")
	require.NoError(t, s.r.pb.Close()) // a block that fits W, given back
	wb, wErr := w.result(t, "W")
	c.halt()
	st := s.f.Stats()
	t.Logf("W returned %v after the stream began (err %v); %d Closes by the stream, %d OOMRetries since W started, %d stream errors",
		time.Since(start), wErr, c.closes.Load(), st.OOMRetries-retries0, c.errs.Load())
	if wErr == nil {
		require.NoError(t, wb.Close())
	}
	require.NoError(t, s.a.Close())
	// W's result once R's segment came is a race with R's Close (W's
	// round may find R's block still open): not asserted.
	assert.False(t, gaveUp, "W failed within %v of the stream with R's segment on its way, its wait bound %v: %v", took, s.wait, w.err)
}

// The same stream of Closes with R's segment on its way forever (until
// the test's end) and the pool's own wait bound: W must still end, within
// the documented bounds: its waits half a second at most in all, its
// last rung at most 16 rounds (OOMRetries), and the stream never refused.
func TestS42cStreamOfClosesWithMemoryOnItsWayForeverEnds(t *testing.T) {
	s := newS42cScene(t, 0)
	retries0 := s.f.Stats().OOMRetries
	w := s.sendW(t)
	start := time.Now()
	c := startCloser(s.f, s.pieces, 0)
	_, wErr := w.result(t, "W")
	took := time.Since(start)
	c.halt()
	st := s.f.Stats()
	retries := st.OOMRetries - retries0
	t.Logf("W returned after %v (%v); %d Closes, %d OOMRetries", took, wErr, c.closes.Load(), retries)
	require.ErrorIs(t, wErr, mempool.ErrOutOfMemory)
	assert.LessOrEqual(t, retries, int64(16+4), "OOMRetries of W: the last rung's 16 rounds and rungs 0-4 at most")
	assert.Zero(t, c.errs.Load(), "the stream's requests refused")
	s.open()
	rb, err := s.r.result(t, "R")
	require.NoError(t, err)
	require.NoError(t, rb.Close())
	require.NoError(t, s.a.Close())
}

// A request the device refuses (not the limit: every retry asks the
// device), on its last rung while R's segment is on its way forever and
// another goroutine closes a block that fits nothing and frees nothing
// over and over. Counts the device allocations W asks for: the doc bounds
// them by the 16 rounds. Afterwards the pool's Stats agree with the
// allocator (DeviceAllocs, Misses, OOMs).
func TestS42cDeviceAsksBoundedUnderAStreamOfCloses(t *testing.T) {
	calls := &s40cCalls{}
	s := newS42cSceneOver(t, 0, func(a allocator.Allocator) allocator.Allocator { calls.Allocator = a; return calls })
	s.g.refuse.Store(1 << 20) // the device is full from now on
	retries0 := s.f.Stats().OOMRetries
	w := s.sendW(t)
	calls0, retries1 := calls.n.Load(), s.f.Stats().OOMRetries
	c := startCloser(s.f, s.pieces, 0)
	_, wErr := w.result(t, "W")
	c.halt()
	st := s.f.Stats()
	asked, retries := calls.n.Load()-calls0, st.OOMRetries-retries1
	t.Logf("W: %v; after the stream began: %d device allocations asked, %d OOMRetries (%d in all); %d Closes, %d stream errors",
		wErr, asked, retries, st.OOMRetries-retries0, c.closes.Load(), c.errs.Load())
	require.ErrorIs(t, wErr, mempool.ErrOutOfMemory)
	assert.LessOrEqual(t, asked, int64(16), "device allocations W asked for on its last rung")
	assert.LessOrEqual(t, retries, int64(16), "OOMRetries on the last rung")
	assert.Zero(t, c.errs.Load(), "the stream's requests refused")
	s.g.refuse.Store(0)
	s.open()
	rb, err := s.r.result(t, "R")
	require.NoError(t, err)
	require.NoError(t, rb.Close())
	require.NoError(t, s.a.Close())
	require.NoError(t, s.f.FreeHeld())
	st = s.f.Stats()
	assert.Equal(t, st.DeviceAllocs, st.DeviceFrees, "every device allocation freed after FreeHeld")
}

// The device-refused scene above, held to inflight.go's finalRounds
// comment ("Each round needs a change since the last refusal") and
// stats.go's OOMRetries ("retries ... after freeing, collecting, or
// trying a smaller segment"): after the stream of Closes begins, nothing
// changes for W (no block that fits, no segment freed or arrived, no
// room), only its waits are cut. 9576ef1 says a cut round "waits for it
// again"; instead each cut round first asks the device again (refused),
// counted as an OOMRetry: W asks it 16 times in a few milliseconds with
// nothing changed, as s40e's own-free finding did once per round.
func TestS42cCutRoundsAskTheDeviceWithNothingChanged(t *testing.T) {
	calls := &s40cCalls{}
	s := newS42cSceneOver(t, 0, func(a allocator.Allocator) allocator.Allocator { calls.Allocator = a; return calls })
	s.g.refuse.Store(1 << 20)
	w := s.sendW(t)
	calls0, retries0 := calls.n.Load(), s.f.Stats().OOMRetries
	start := time.Now()
	c := startCloser(s.f, s.pieces, 0)
	_, wErr := w.result(t, "W")
	took := time.Since(start)
	c.halt()
	asked, retries := calls.n.Load()-calls0, s.f.Stats().OOMRetries-retries0
	s.g.refuse.Store(0)
	s.open()
	rb, err := s.r.result(t, "R")
	require.NoError(t, err)
	require.NoError(t, rb.Close())
	require.NoError(t, s.a.Close())
	require.ErrorIs(t, wErr, mempool.ErrOutOfMemory)
	t.Logf("W failed %v after the stream began: %d device allocations asked, %d OOMRetries, %d Closes", took, asked, retries, c.closes.Load())
	assert.LessOrEqual(t, asked, int64(1), "device allocations W asked for with nothing changed but its waits cut")
	assert.LessOrEqual(t, retries, int64(1), "OOMRetries with nothing freed, collected or arrived")
}

// The pool closes while W's rounds are being cut by a stream of Closes
// and R's segment is on its way: W ends with ErrPoolClosed (or an
// out-of-memory), soon, not after more rounds; nothing hangs.
func TestS42cPoolCloseDuringCutRounds(t *testing.T) {
	s := newS42cScene(t, 5*time.Second) // the time bound never ends W's rounds here
	w := s.sendW(t)
	c := startCloser(s.f, s.pieces, 20*time.Millisecond) // slow: W's 16 rounds last past the pool's Close
	time.Sleep(60 * time.Millisecond)
	if w.returned(0) {
		c.halt()
		t.Logf("W returned before the pool's Close: %v", w.err)
	}
	closed := make(chan error, 1)
	go func() { closed <- s.f.Close() }()
	ended := w.returned(2 * time.Second)
	c.halt()
	s.open()
	select {
	case err := <-closed:
		assert.NoError(t, err, "Pool.Close")
	case <-time.After(hangLimit):
		t.Fatal("Pool.Close never returned")
	}
	assert.True(t, ended, "W still on the ladder 2 s after the pool's Close began")
	if wb, err := w.result(t, "W"); err == nil {
		_ = wb.Close()
	} else if !assert.ErrorIs(t, err, mempool.ErrPoolClosed) {
		t.Logf("W: %v", err)
	}
	if rb, err := s.r.result(t, "R"); err == nil {
		_ = rb.Close()
	}
	_ = s.a.Close()
}

// FreeHeld, called by another goroutine over and over while W is on its
// last rung (R on its way forever): each frees nothing W can use. W ends
// within the bounds, and the pool's counts stay right.
func TestS42cFreeHeldDuringRounds(t *testing.T) {
	s := newS42cScene(t, 0)
	retries0 := s.f.Stats().OOMRetries
	w := s.sendW(t)
	stop := make(chan struct{})
	var fhErrs atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if b, err := s.f.Allocate(s.pieces); err == nil {
				_ = b.Close()
			}
			if s.f.FreeHeld() != nil {
				fhErrs.Add(1)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	_, wErr := w.result(t, "W")
	close(stop)
	<-done
	retries := s.f.Stats().OOMRetries - retries0
	t.Logf("W: %v; %d OOMRetries", wErr, retries)
	require.ErrorIs(t, wErr, mempool.ErrOutOfMemory)
	assert.LessOrEqual(t, retries, int64(20))
	assert.Zero(t, fhErrs.Load())
	s.open()
	rb, err := s.r.result(t, "R")
	require.NoError(t, err)
	require.NoError(t, rb.Close())
	require.NoError(t, s.a.Close())
	require.NoError(t, s.f.FreeHeld())
	st := s.f.Stats()
	assert.Zero(t, st.ActiveBlocks)
	assert.Zero(t, st.HeldBlocks)
}

// Sanitized: three requests on the last rung at once (R on its way
// forever), a fourth goroutine closing blocks that pass the quarantine
// while they press. All three end within the bounds, and once they have,
// nobody is pressing: a block closed afterwards is quarantined.
func TestS42cSanitizedSeveralOnLastRungWithCloses(t *testing.T) {
	s := newS42cScene(t, 0, mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil))
	require.NoError(t, s.x.Close())
	misses := s.f.Stats().Misses
	ws := make([]*aside, 3)
	for i := range ws {
		ws[i] = allocateAside(s.f.Allocate, s.big)
	}
	for deadline := time.Now().Add(hangLimit); s.f.Stats().Misses < misses+3 && time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
	}
	c := startCloser(s.f, s.pieces, time.Millisecond)
	for i, w := range ws {
		_, err := w.result(t, "W")
		assert.ErrorIs(t, err, mempool.ErrOutOfMemory, "W%d", i)
	}
	c.halt()
	t.Logf("%d Closes, %d stream errors", c.closes.Load(), c.errs.Load())
	s.open()
	rb, err := s.r.result(t, "R")
	require.NoError(t, err)
	q0 := mempool.Quarantined(s.f)
	require.NoError(t, rb.Close())
	assert.Equal(t, q0+1, mempool.Quarantined(s.f), "R's block, closed with nobody on the ladder")
	require.NoError(t, s.a.Close())
	assert.Empty(t, s.f.Findings())
}
