package mempool

import (
	"runtime"
	"time"
	"unsafe"

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
	buf    *cl.Buffer // nil once closed
	size   int64
	bin    uint32
	exact  bool // a block of exactly size bytes, not the bin's AllocSize (see Pool.Allocate)
	closed bool // guarded by pool.mu
}

// wrap hands out buf for a request of size bytes.
func (p *Pool) wrap(hooks hookList, buf *cl.Buffer, bn uint32, size int64, exact bool) *PooledBuffer {
	b := &PooledBuffer{pool: p, buf: buf, bin: bn, size: size, exact: exact}
	if p.dropSafety {
		runtime.SetFinalizer(b, (*PooledBuffer).reclaim)
	}
	if hooks != nil {
		p.emit(hooks, b.event(MallocAfter, buf))
	}
	return b
}

// ID returns the buffer's block id, as hooks see it: unique among the
// PooledBuffers alive at one time (like CuPy's pmem_id, it is an address).
func (b *PooledBuffer) ID() uint64 { return uint64(uintptr(unsafe.Pointer(b))) }

// allocSize returns the bytes of the block.
func (b *PooledBuffer) allocSize() int64 {
	if b.exact {
		return max(b.size, 1)
	}
	return AllocSize(b.bin, b.pool.leadingBits)
}

// Buffer returns the device buffer, whose size is the bin's AllocSize (at
// least Size; exactly Size near the device's limit), or nil after Close. Like the rest of a PooledBuffer, it is
// for one goroutine at a time: calling it while another goroutine Closes
// the buffer is a misuse that the race detector reports.
func (b *PooledBuffer) Buffer() *cl.Buffer { return b.buf }

// Size returns the size that was requested.
func (b *PooledBuffer) Size() int64 { return b.size }

// Closed reports whether Close has been called.
func (b *PooledBuffer) Closed() bool { return b.closed }

// Close gives the block back to the pool. A second Close returns ErrClosed.
// After StopHolding, Close frees the block and returns the allocator's
// error, if any.
func (b *PooledBuffer) Close() error {
	err := b.pool.put(b)
	if err != ErrClosed && b.pool.dropSafety {
		runtime.SetFinalizer(b, nil)
	}
	return err
}

// reclaim is the finalizer of a dropped PooledBuffer. The buffer is
// unreachable, so nothing else can close it meanwhile.
func (b *PooledBuffer) reclaim() {
	b.pool.mu.Lock()
	b.pool.s.Reclaimed++
	b.pool.mu.Unlock()
	_ = b.pool.put(b)
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
