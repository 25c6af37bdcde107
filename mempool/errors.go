package mempool

import (
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
)

// Sentinel errors. Match them with errors.Is.
var (
	// ErrOutOfMemory matches every *OutOfMemoryError: the pool's limit
	// refused a request, or the device ran out of memory after the pool had
	// freed everything it held, or the request is larger than the device's
	// largest buffer. It is allocator.ErrOutOfMemory, the same value, so
	// that either sentinel matches every out-of-memory refusal of clpool:
	// a pool's, an allocator.Budget's, an array's too large for the device.
	ErrOutOfMemory = allocator.ErrOutOfMemory
	// ErrClosed is returned by Close of a PooledBuffer already closed.
	ErrClosed = errors.New("mempool: buffer already closed")
	// ErrPoolClosed is returned by Allocate on a closed Pool.
	ErrPoolClosed = errors.New("mempool: pool is closed")
	// ErrPanicked matches every *PanicError: a hook or the allocator
	// panicked, and the pool recovered.
	ErrPanicked = errors.New("mempool: a callback panicked")
)

// PanicError is a panic of a hook or of the pool's allocator, recovered by
// the pool. The pool finishes what it was doing first (a block taken for
// the request goes back, a block given back stays given back, a
// reservation is taken back), so that its accounts stay consistent and
// nothing is lost, then returns a PanicError from the method that called
// the hook or the allocator. It matches ErrPanicked, and unwraps to the
// panic's value when that is an error.
type PanicError struct {
	Site  string // what panicked: "malloc_after hook", "allocator's Free", ...
	Value any    // what it panicked with
	Stack []byte // the stack of the panic
}

// Error names the site and the panic's value.
func (e *PanicError) Error() string { return fmt.Sprintf("mempool: %s panicked: %v", e.Site, e.Value) }

// Is reports whether target is ErrPanicked.
func (e *PanicError) Is(target error) bool { return target == ErrPanicked }

// Unwrap returns the panic's value if it is an error.
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}

// recovered turns a recovered panic value into a *PanicError at site; nil
// stays nil. Call it as recovered(recover(), site) in a deferred function.
func recovered(v any, site string) error {
	if v == nil {
		return nil
	}
	return &PanicError{Site: site, Value: v, Stack: debug.Stack()}
}

// plural returns "1 block", "2 blocks".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// OutOfMemoryError is the error of a request the pool could not serve: what
// was asked, and where the memory is. It matches ErrOutOfMemory, and unwraps
// to the allocator's error when the device (not the limit) refused.
type OutOfMemoryError struct {
	Requested    int64 // the bytes asked for
	AllocSize    int64 // the bytes of the bin the pool tried to allocate
	ActiveBlocks int   // blocks in use
	ActiveBytes  int64 // bytes asked for by the blocks in use
	HeldBlocks   int   // blocks held for reuse: those the ladder could not free (see LargestHeldBin)
	HeldBytes    int64
	ManagedBytes int64 // bytes the pool owns: active blocks' alloc sizes plus held
	InFlight     int64 // bytes of segments other requests were allocating or freeing (still on the device): not managed, under the limit
	Limit        int64 // the pool's limit; 0 if none
	DeviceTotal  int64 // the device's global memory; 0 if the pool does not know its device

	// The device's largest buffer (CL_DEVICE_MAX_MEM_ALLOC_SIZE) when the
	// request is larger than it: no amount of freeing can serve it. 0
	// otherwise.
	DeviceMaxAlloc int64

	// The largest bin still holding a block, and its size: blocks the
	// ladder could not free (an arena's free blocks in segments in use,
	// everything on a refusal at once by the limit), or one a concurrent
	// Close brought back.
	LargestHeldBin  uint32
	LargestHeldSize int64 // 0 if nothing is held

	Err error // the allocator's error; nil if the limit refused (or, with no limit, math.MaxInt64 managed bytes)
}

// Error says what was asked, what is active and what is held.
func (e *OutOfMemoryError) Error() string {
	if e.DeviceMaxAlloc > 0 {
		return fmt.Sprintf("mempool: out of memory: requested %d bytes, more than the device's largest buffer (%d bytes): %v",
			e.Requested, e.DeviceMaxAlloc, e.Err)
	}
	s := fmt.Sprintf("mempool: out of memory: requested %d bytes (allocating %d); %s active holding %d bytes requested, %s held (%d bytes), %d bytes managed",
		e.Requested, e.AllocSize, plural(e.ActiveBlocks, "block"), e.ActiveBytes, plural(e.HeldBlocks, "block"), e.HeldBytes, e.ManagedBytes)
	if e.LargestHeldSize > 0 {
		s += fmt.Sprintf(" (largest held: bin %d, %d bytes)", e.LargestHeldBin, e.LargestHeldSize)
	}
	if e.InFlight > 0 {
		s += fmt.Sprintf(", %d bytes being allocated or freed", e.InFlight)
	}
	if e.Limit > 0 {
		s += fmt.Sprintf(", limit %d", e.Limit)
	}
	if e.DeviceTotal > 0 {
		s += fmt.Sprintf(", device total %d", e.DeviceTotal)
	}
	switch {
	case e.Err != nil:
		s += ": " + e.Err.Error()
	case e.Limit > 0:
		s += ": over the pool's limit"
	default: // no limit, no device error: the managed bytes would pass what an int64 counts
		s += ": over the most bytes the pool can count (math.MaxInt64)"
	}
	return s
}

// Is reports whether target is ErrOutOfMemory, which is
// allocator.ErrOutOfMemory.
func (e *OutOfMemoryError) Is(target error) bool { return target == ErrOutOfMemory }

// Unwrap returns the allocator's error.
func (e *OutOfMemoryError) Unwrap() error { return e.Err }

// refuseSize is the error for a request of size bytes on queue r past
// p.sizeCap: a negative one, and one larger than the device's largest
// buffer (or, where the pool does not know its device, one whose block
// size would overflow), which no amount of freeing could serve. The
// latter is an *OutOfMemoryError, as torch and CuPy raise theirs there,
// told to the hooks as every refused request is (malloc_before, then
// malloc_after with the error, on r), and counted by oversize.
func (p *Pool) refuseSize(size int64, r *qstate) error {
	if size < 0 {
		return fmt.Errorf("mempool: Allocate(%d): negative size: %w", size, cl.ErrInvalidBufferSize)
	}
	req := &request{size: size, q: r, hooks: p.hooks.Load()}
	if req.hooks != nil {
		if err := p.emit(req.hooks, Event{Kind: MallocBefore, Size: size, AllocSize: p.blockSize(size), Queue: queueOf(r)}); err != nil {
			return p.mallocFailed(req, err)
		}
	}
	return p.mallocFailed(req, p.oversize(req))
}

// oversize counts req, too large for the device, as a miss of its queue
// and an OOM, and returns its error, which says what is active and held
// as Stats finds it: the request frees nothing, and drains no cache (the
// sanitizer's quarantine included). A closed pool refuses every request
// alike, with ErrPoolClosed.
func (p *Pool) oversize(req *request) error {
	qs := p.lockCaches()
	defer p.unlockCaches(qs)
	if p.life == lifeClosed {
		return ErrPoolClosed
	}
	n := p.pol.LargestFree()
	for b := range p.cachedLocked(qs) {
		n = max(n, b.Size)
	}
	e := p.refusedLocked(req, req.size, cl.ErrInvalidBufferSize, n)
	e.DeviceMaxAlloc = p.maxAlloc
	return e
}

// refusedLocked counts req as an OOM, and as a miss unless it was counted
// already (countMiss: not yet, if a drain was asked for), and returns its
// error: it asked for a block of allocSize bytes, refused with cause,
// while the largest held block was largest bytes. p.mu must be held.
func (p *Pool) refusedLocked(req *request, allocSize int64, cause error, largest int64) *OutOfMemoryError {
	p.countMiss(req)
	p.l.oomRefused()
	s := p.statsLocked()
	e := &OutOfMemoryError{
		Requested: req.size, AllocSize: allocSize,
		ActiveBlocks: s.ActiveBlocks, ActiveBytes: s.ActiveBytes,
		HeldBlocks: s.HeldBlocks, HeldBytes: s.HeldBytes, ManagedBytes: s.ManagedBytes,
		Limit: p.limit, Err: cause,
	}
	if p.device != nil {
		e.DeviceTotal = p.device.GlobalMemSize
	}
	if largest > 0 {
		e.LargestHeldBin, e.LargestHeldSize = BinNumber(largest, p.leadingBits), largest
	}
	return e
}

// isOutOfMemory reports whether an allocator's error means the device is
// out of memory, which freeing held blocks may cure.
func isOutOfMemory(err error) bool {
	return errors.Is(err, cl.ErrMemObjectAllocationFailure) ||
		errors.Is(err, cl.ErrOutOfResources) ||
		errors.Is(err, cl.ErrOutOfHostMemory) ||
		errors.Is(err, allocator.ErrOutOfMemory)
}

// outOfMemory counts and returns the error of a request the ladder could
// not serve: it tried a segment of n bytes last, and the device refused
// it with cause (nil: the limit refused it).
func (p *Pool) outOfMemory(req *request, n int64, cause error) error {
	p.drainCaches() // the figures count what the queue caches did and held too (a drain flushes their sums)
	p.lock()
	defer p.mu.Unlock()
	e := p.refusedLocked(req, n, cause, p.pol.LargestFree())
	e.InFlight = p.l.inflight + p.l.freeing
	return e
}
