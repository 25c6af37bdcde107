package mempool

import (
	"fmt"
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
// it alive with runtime.KeepAlive). After Close, Buffer and Base return
// nil: the block may already belong to another user, so do not keep the
// *cl.Buffer past Close. A second Close returns ErrClosed and changes
// nothing.
//
// A PooledBuffer is for one goroutine at a time, as a *cl.Buffer's user
// would expect: a goroutine that hands it to another does so through a
// channel, a mutex or the like. Of two Closes racing, one wins and the
// other returns ErrClosed; any other method racing a Close is a misuse
// that the race detector reports.
//
// It is 32 bytes, a size class of its own: with drop safety, the hot path
// allocates one per Allocate.
type PooledBuffer struct {
	pool *Pool
	blk  *block  // its segment, offset and size; kept after Close, for Size
	size int64   // the requested size, or ^size once closed (see closedMark)
	q    *qstate // the queue it is for; the pool's host if none
}

// slabSize is how many PooledBuffers a pool without drop safety
// allocates at once: 32 of 32 bytes fill the 1024-byte size class.
const slabSize = 32

// newPooledBuffer returns what an Allocate hands out, for the core's
// handOut (or the queue cache) to ready: with drop safety, a new PooledBuffer, allocated before the pool's
// lock is taken (allocations on different cores do not wait for each
// other); without, nil.
func (p *Pool) newPooledBuffer() *PooledBuffer {
	if p.dropSafety {
		return new(PooledBuffer)
	}
	return nil
}

// ID returns the buffer's block id, as hooks see it: unique among the
// PooledBuffers alive at one time (like CuPy's pmem_id, it is an address).
func (b *PooledBuffer) ID() uint64 { return uint64(uintptr(unsafe.Pointer(b))) }

// Buffer returns a device buffer covering exactly the block, or nil after
// Close. Its size is the block's, at least Size: with exact bins, the
// bin's AllocSize (exactly Size near the device's limit), the whole of
// Base. With WithArena, a block that is part of a larger segment gets a
// sub-buffer of it, made at the first call and kept with the block, so a
// later Allocate that reuses the block makes no sub-buffer for it; Buffer
// returns nil if the runtime refuses the sub-buffer. Code that can take a
// buffer and an offset should use Base and Offset, which never make one.
//
// Like the rest of a PooledBuffer, it is for one goroutine at a time:
// calling it while another goroutine Closes the buffer is a misuse that
// the race detector reports.
func (b *PooledBuffer) Buffer() *cl.Buffer {
	if b.closedMark() < 0 {
		return nil
	}
	blk := b.blk
	if blk.Whole() {
		return blk.Seg.Data.buf
	}
	if blk.Cache.buf == nil && blk.Seg.Data.buf != nil {
		// The block is this PooledBuffer's until Close: the pool reads
		// Cache only after that.
		sub, err := blk.Seg.Data.buf.CreateSubBuffer(0, blk.Off, blk.Size)
		if err != nil {
			return nil
		}
		blk.Cache = mem{buf: sub}
	}
	return blk.Cache.buf
}

// Base returns the device buffer the block is part of (its segment), or
// nil after Close. The block's bytes start at Offset in it. With exact
// bins, Base is Buffer and Offset is 0.
func (b *PooledBuffer) Base() *cl.Buffer {
	if b.closedMark() < 0 {
		return nil
	}
	return b.blk.Seg.Data.buf
}

// SVM returns the shared virtual memory the block is part of (its
// segment), in a pool made by NewSVM; nil in a pool of buffers and after
// Close. The block's bytes start at Offset in it: a kernel takes them with
// cl.Kernel.SetArgSVMPointer(i, b.SVM(), b.Offset()).
func (b *PooledBuffer) SVM() *cl.SVM {
	if b.closedMark() < 0 {
		return nil
	}
	return b.blk.Seg.Data.svm
}

// Offset returns where the block starts in Base (or SVM), in bytes: a
// multiple of the base-address alignment of the context's devices; 0
// after Close.
func (b *PooledBuffer) Offset() int64 {
	if b.closedMark() < 0 {
		return 0
	}
	return b.blk.Off
}

// Size returns the size that was requested.
func (b *PooledBuffer) Size() int64 {
	if n := b.closedMark(); n < 0 {
		return ^n
	} else {
		return n
	}
}

// Closed reports whether Close has been called.
func (b *PooledBuffer) Closed() bool { return b.closedMark() < 0 }

// closedMark returns the size field, negative once closed. Close marks
// it under the lock of the buffer's queue's cache (see give), so that of
// two racing Closes one wins. Nothing reads or writes it atomically: the
// other methods are for the buffer's one goroutine (see PooledBuffer).
func (b *PooledBuffer) closedMark() int64 { return b.size }

// Close gives the block back to the pool. A second Close returns ErrClosed.
// After StopHolding, Close frees the block's segment once it is wholly
// free, and returns the allocator's error, if any.
func (b *PooledBuffer) Close() error {
	if b == nil {
		return fmt.Errorf("mempool: Close of a nil PooledBuffer: %w", ErrClosed)
	}
	return b.pool.put(b)
}

// reclaim is the finalizer of a dropped PooledBuffer. The buffer is
// unreachable, so nothing else can close it meanwhile.
func (b *PooledBuffer) reclaim() {
	p := b.pool
	if p.san != nil {
		p.san.dropped(b) // a finding once it is back, with its allocation site
	}
	p.lock()
	p.l.reclaimed()
	p.mu.Unlock()
	_ = p.put(b)
}

// collectDropped runs the garbage collector and waits (a bounded while) for
// the finalizers it queued, so that dropped buffers are back in the pool
// when it returns: in the policy itself, where the caller can reuse or
// free them, since it then drains the queue caches the finalizers gave
// them to. The runtime runs finalizers on one goroutine, in batches; a
// first marker's finalizer shows the batch holding this collection's
// finalizers has started, a second one, queued by a later collection, that
// it has finished.
func (p *Pool) collectDropped() {
	defer p.drainCaches()
	runtime.GC()
	for range 2 {
		done := make(chan struct{})
		runtime.SetFinalizer(new(gcMarker), func(*gcMarker) { close(done) })
		runtime.GC()
		select {
		case <-done:
		case <-time.After(100 * time.Millisecond):
			return
		}
	}
}

// gcMarker is collectDropped's marker. It holds a pointer so that the
// runtime's tiny allocator, which packs small pointer-free objects
// together, gives it a block of its own: a tiny object's finalizer may
// never run while a neighbour in its block is alive, and the collection
// then waited out its timeout (TestLadderCollectionDoesNotWaitOutItsTimeout).
type gcMarker struct{ _ *gcMarker }
