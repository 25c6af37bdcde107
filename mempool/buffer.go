package mempool

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/clpool/clpool/cl"
)

// PooledBuffer is a block handed out by a Pool. Close gives it back. With
// drop safety on (the default), a PooledBuffer dropped without Close goes
// back to the pool after the garbage collector finds it unreachable.
//
// Misuse: a PooledBuffer must stay reachable while the device uses its
// buffer (Close it after the last command that uses it completes, or keep
// it alive with runtime.KeepAlive). After Close, Buffer returns nil: the
// block may already belong to another user, so do not keep the *cl.Buffer
// past Close. A second Close returns ErrClosed and changes nothing.
type PooledBuffer struct {
	pool   *Pool
	buf    *cl.Buffer
	bin    uint32
	size   int64
	closed atomic.Bool
}

// wrap hands out buf for a request of size bytes.
func (p *Pool) wrap(buf *cl.Buffer, bn uint32, size int64) *PooledBuffer {
	b := &PooledBuffer{pool: p, buf: buf, bin: bn, size: size}
	if p.dropSafety {
		runtime.SetFinalizer(b, (*PooledBuffer).reclaim)
	}
	return b
}

// Buffer returns the device buffer, whose size is the bin's AllocSize (at
// least Size), or nil after Close.
func (b *PooledBuffer) Buffer() *cl.Buffer {
	if b.closed.Load() {
		return nil
	}
	return b.buf
}

// Size returns the size that was requested.
func (b *PooledBuffer) Size() int64 { return b.size }

// Closed reports whether Close has been called.
func (b *PooledBuffer) Closed() bool { return b.closed.Load() }

// Close gives the block back to the pool. A second Close returns ErrClosed.
// After StopHolding, Close frees the block and returns the allocator's
// error, if any.
func (b *PooledBuffer) Close() error {
	if !b.closed.CompareAndSwap(false, true) {
		return ErrClosed
	}
	if b.pool.dropSafety {
		runtime.SetFinalizer(b, nil)
	}
	return b.pool.put(b.buf, b.bin, b.size)
}

// reclaim is the finalizer of a dropped PooledBuffer.
func (b *PooledBuffer) reclaim() {
	if !b.closed.CompareAndSwap(false, true) {
		return
	}
	b.pool.mu.Lock()
	b.pool.s.Reclaimed++
	b.pool.mu.Unlock()
	_ = b.pool.put(b.buf, b.bin, b.size)
}

// collectDropped runs the garbage collector and waits (a bounded while) for
// the finalizers it queued, so that dropped buffers are back in the pool
// when it returns. The runtime runs finalizers on one goroutine, in batches;
// a first marker's finalizer shows the batch holding this collection's
// finalizers has started, a second one, queued by a later collection, that
// it has finished.
func (p *Pool) collectDropped() {
	runtime.GC()
	for range 2 {
		done := make(chan struct{})
		runtime.SetFinalizer(new(int64), func(*int64) { close(done) })
		runtime.GC()
		select {
		case <-done:
		case <-time.After(100 * time.Millisecond):
			return
		}
	}
}
