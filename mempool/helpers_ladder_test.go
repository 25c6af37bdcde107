package mempool_test

import (
	"testing"
	"time"

	"github.com/clpool/clpool/mempool"
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
