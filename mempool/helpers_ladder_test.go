package mempool_test

import (
	"sync"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/require"
)

// Helpers for tests of the out-of-memory ladder's last rung, which waits
// for memory on its way: a request held in the allocator (its segment
// reserved, in flight) and a request refused beside it.

// aside is an Allocate running on a goroutine of its own.
type aside struct {
	done chan struct{} // closed when it returns
	pb   *mempool.PooledBuffer
	err  error
}

// allocateAside starts alloc(size) on a goroutine of its own.
func allocateAside(alloc func(int64) (*mempool.PooledBuffer, error), size int64) *aside {
	p := &aside{done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.pb, p.err = alloc(size)
	}()
	return p
}

// returned reports whether p's Allocate returned within d (0: by now).
func (p *aside) returned(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	default:
	}
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// result waits for p's Allocate (hangLimit at most: the test fails past
// it) and returns its results.
func (p *aside) result(t *testing.T, what string) (*mempool.PooledBuffer, error) {
	t.Helper()
	if !p.returned(hangLimit) {
		t.Fatalf("%s never returned", what)
	}
	return p.pb, p.err
}

// heldInAllocator starts an Allocate of size on pool whose allocator the
// gate g (held) keeps: it returns once the request is there, its segment
// reserved and in flight.
func heldInAllocator(t *testing.T, pool *mempool.Pool, g *gated, size int64) *aside {
	t.Helper()
	p := allocateAside(pool.Allocate, size)
	select {
	case <-g.entered:
	case <-p.done:
		t.Fatalf("returned before its allocation: %v", p.err)
	case <-time.After(hangLimit):
		t.Fatal("never reached the allocator")
	}
	return p
}

// downToLastRung starts an Allocate of size on pool, which the limit or
// the device is to refuse, and returns once the pool counted it a miss,
// and 50 ms more: down its ladder to the last rung's wait (500 ms at
// most) for memory in flight.
func downToLastRung(pool *mempool.Pool, size int64) *aside {
	misses := pool.Stats().Misses
	p := allocateAside(pool.Allocate, size)
	for deadline := time.Now().Add(hangLimit); pool.Stats().Misses == misses && time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	return p
}

// inFlight is a pool capped (WithLimit) at two blocks of size (exact
// bins, or an arena) over a gated allocator, with A, one block, active,
// and R, a second request, held in the allocator (its segment reserved,
// in flight): the limit is full, and a third request of size waits on its
// ladder's last rung for R's segment.
type inFlight struct {
	f           *fixture
	g           *gated
	a           *mempool.PooledBuffer // A; nil once the test closed it
	r           *aside                // R
	size, block int64
	open        func() // opens the gate, once: R's allocation goes on
}

// newInFlight makes an inFlight of 1 MiB blocks whose ladder waits wait
// at most (0: the pool's own bound). The gate opens at the test's end
// if the test has not opened it.
func newInFlight(t *testing.T, arena bool, wait time.Duration) *inFlight {
	t.Helper()
	s := &inFlight{g: newGated(), size: 1 << 20, block: binSize(1 << 20)}
	var opts []mempool.Option
	if arena {
		s.block = s.size // a segment of the request's own size, under the limit
		opts = append(opts, mempool.WithArena())
	}
	s.f = newCappedFixture(t, "limit", 2*s.block, func(a allocator.Allocator) allocator.Allocator { s.g.Allocator = a; return s.g }, opts...)
	if wait > 0 {
		mempool.SetInFlightWait(s.f.pool, wait)
	}
	var err error
	s.a, err = s.f.pool.Allocate(s.size)
	require.NoError(t, err)
	var once sync.Once
	open := s.g.hold()
	s.open = func() { once.Do(open) }
	t.Cleanup(s.open) // before the fixture's checks, which run later
	s.r = heldInAllocator(t, s.f.pool, s.g, s.size)
	return s
}

// finish opens the gate and closes R's block, A's if open, and w's (if
// any) if it was served.
func (s *inFlight) finish(t *testing.T, w *aside) {
	t.Helper()
	s.open()
	rb, err := s.r.result(t, "R")
	require.NoError(t, err)
	require.NoError(t, rb.Close())
	if w != nil {
		if wb, err := w.result(t, "W"); err == nil {
			require.NoError(t, wb.Close())
		}
	}
	if s.a != nil {
		require.NoError(t, s.a.Close())
	}
}
