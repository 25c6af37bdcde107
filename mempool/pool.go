package mempool

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
)

// This file holds the pool's whole policy: binning a request, reusing held
// blocks (LIFO per bin), allocating on a miss within the limit, reacting to
// out-of-memory, and what giving a block back does. Every counter changes
// under p.mu; hooks are called outside it.

// Pool is a memory pool of device buffers over an Allocator. It is safe for
// concurrent use.
type Pool struct {
	alloc       allocator.Allocator
	device      *cl.Device // for hooks and errors; nil if the allocator does not say
	maxAlloc    int64      // the device's largest buffer; 0 if unknown
	leadingBits int
	limit       int64 // 0: no limit
	dropSafety  bool
	hooks       atomic.Pointer[[]*hookEntry] // nil when none: the hot path checks only that
	hooksMu     sync.Mutex                   // serializes AddHook and its remove

	mu       sync.Mutex
	bins     binTable       // held blocks, by bin
	exactBin *bin           // the bin of exact-size blocks, which are never held (see Allocate)
	slab     []PooledBuffer // handed out one by one without drop safety (see handOutLocked)
	holding  bool           // false after StopHolding: given-back blocks are freed
	closed   bool
	s        Stats // the counters; guarded by mu
}

// Option configures a Pool.
type Option func(*Pool)

// WithLeadingBits sets leading_bits_in_bin_id, the bits of a size after its
// leading one that name its bin: more bits waste less memory per block and
// make more bins. The default is 4 (a block wastes at most 1/16 of its size).
// New accepts 0 to MaxLeadingBits.
func WithLeadingBits(n int) Option { return func(p *Pool) { p.leadingBits = n } }

// WithLimit caps the pool's managed bytes (active plus held, as CuPy counts
// them). A request that would pass the cap makes the pool free held blocks
// first; if that is not enough, it fails with ErrOutOfMemory.
func WithLimit(bytes int64) Option { return func(p *Pool) { p.limit = bytes } }

// WithDropSafety sets whether a PooledBuffer dropped without Close goes back
// to the pool after garbage collection (the default, as in PyOpenCL). Each
// allocation then carries a finalizer, which costs more than the rest of a
// pool hit together. A program that Closes every buffer can turn it off:
// a hit then costs about a third as much and allocates nothing (the pool
// hands out PooledBuffers from slabs). The price: a buffer dropped without
// Close is never given back, and its device memory leaks until the program
// exits, as an unreleased cl.Buffer's would.
func WithDropSafety(on bool) Option { return func(p *Pool) { p.dropSafety = on } }

// New returns a pool over a. The pool owns the buffers it gets from a and
// gives them back with a.Free.
func New(a allocator.Allocator, opts ...Option) (*Pool, error) {
	if a == nil {
		return nil, errors.New("mempool: New: nil allocator")
	}
	p := &Pool{alloc: a, device: allocator.DeviceOf(a), leadingBits: 4, dropSafety: true, holding: true}
	for _, o := range opts {
		o(p)
	}
	if p.leadingBits < 0 || p.leadingBits > MaxLeadingBits {
		return nil, fmt.Errorf("mempool: New: leading bits %d outside 0..%d", p.leadingBits, MaxLeadingBits)
	}
	if p.limit < 0 {
		return nil, fmt.Errorf("mempool: New: negative limit %d", p.limit)
	}
	p.bins = newBinTable(p, p.leadingBits)
	p.exactBin = &bin{pool: p, exact: true}
	if p.device != nil {
		p.maxAlloc = p.device.MaxMemAllocSize
	}
	p.s.LeadingBits, p.s.Limit, p.s.Holding = p.leadingBits, p.limit, true
	return p, nil
}

// Allocate returns a buffer of at least size bytes: the most recently given
// back block of size's bin if there is one, else a new block of the bin's
// AllocSize from the allocator. Allocate(0) returns a real 1-byte block. A
// negative size is an error, and changes nothing.
//
// Near the device's largest buffer (MaxMemAllocSize), a bin's AllocSize can
// pass the limit while the request does not: such a request gets a block of
// exactly its size, which is freed on Close rather than held, since it is
// too small for the rest of its bin. (PyOpenCL fails these requests.)
func (p *Pool) Allocate(size int64) (*PooledBuffer, error) {
	if size < 0 {
		return nil, fmt.Errorf("mempool: Allocate(%d): negative size: %w", size, cl.ErrInvalidBufferSize)
	}
	bn := BinNumber(size, p.leadingBits)
	hooks := p.hooks.Load()
	if hooks != nil {
		n, _ := p.blockSize(bn, size)
		p.emit(hooks, Event{Kind: MallocBefore, Size: size, AllocSize: n})
	}
	pb := p.newPooledBuffer()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, p.mallocFailed(hooks, size, bn, ErrPoolClosed)
	}
	if b := p.bins.get(bn); b != nil && len(b.bufs) > 0 {
		buf := b.pop()
		p.s.Hits++
		p.s.HeldBlocks--
		p.s.HeldBytes -= b.allocSize
		p.activate(b.allocSize, size)
		pb = p.handOutLocked(pb)
		p.mu.Unlock()
		return p.wrap(hooks, pb, b, buf, size), nil
	}
	p.s.Misses++
	p.mu.Unlock()

	b, buf, pb, err := p.allocateBlock(hooks, bn, size, pb)
	if err != nil {
		return nil, p.mallocFailed(hooks, size, bn, err)
	}
	return p.wrap(hooks, pb, b, buf, size), nil
}

// blockSize returns the bytes a new block for a request of size in bin bn
// takes: the bin's AllocSize, or exactly size (exact) where only that fits
// the device's largest buffer.
func (p *Pool) blockSize(bn uint32, size int64) (n int64, exact bool) {
	n = AllocSize(bn, p.leadingBits)
	if p.maxAlloc > 0 && n > p.maxAlloc && size <= p.maxAlloc {
		return max(size, 1), true
	}
	return n, false
}

// activate counts a block handed out. p.mu must be held.
func (p *Pool) activate(allocSize, size int64) {
	large := allocSize >= SmallBlock
	p.s.Allocation.add(large, 1)
	p.s.AllocatedBytes.add(large, allocSize)
	p.s.ActiveBytes += size
	p.s.PeakActiveBytes = max(p.s.PeakActiveBytes, p.s.ActiveBytes)
}

// deactivate counts a block given back. p.mu must be held.
func (p *Pool) deactivate(allocSize, size int64) {
	large := allocSize >= SmallBlock
	p.s.Allocation.sub(large, 1)
	p.s.AllocatedBytes.sub(large, allocSize)
	p.s.ActiveBytes -= size
}

// allocateBlock gets a new block for a miss: it reserves the bin's bytes
// under the limit, then asks the allocator, freeing held blocks (largest
// first) after each out-of-memory until the allocation succeeds or nothing
// is left to free. It returns the block's bin (p.exactBin for an
// exact-size block) and pb, from newPooledBuffer, readied by handOutLocked.
func (p *Pool) allocateBlock(hooks hookList, bn uint32, size int64, pb *PooledBuffer) (*bin, *cl.Buffer, *PooledBuffer, error) {
	n, exact := p.blockSize(bn, size)
	if err := p.reserve(size, n); err != nil {
		return nil, nil, nil, err
	}
	collected := false
	for {
		if hooks != nil {
			p.emit(hooks, Event{Kind: AllocBefore, Size: n, AllocSize: n})
		}
		buf, err := p.alloc.Allocate(n)
		if hooks != nil {
			p.emit(hooks, Event{Kind: AllocAfter, Size: n, AllocSize: n, Buffer: buf, Err: err})
		}
		if err == nil {
			p.mu.Lock()
			p.s.DeviceAllocs++
			p.s.Segment.add(n >= SmallBlock, 1)
			p.activate(n, size)
			b := p.exactBin
			if !exact {
				b = p.bins.make(bn)
			}
			pb = p.handOutLocked(pb)
			p.mu.Unlock()
			return b, buf, pb, nil
		}
		if !isOutOfMemory(err) {
			p.unreserve(n)
			return nil, nil, nil, fmt.Errorf("mempool: allocating %d bytes for a %d-byte request: %w", n, size, err)
		}
		p.mu.Lock()
		p.s.OOMRetries++
		p.mu.Unlock()
		if !collected {
			// Buffers dropped without Close come back as held blocks.
			collected = true
			p.collectDropped()
		}
		if !p.freeLargestHeld() {
			p.unreserve(n)
			return nil, nil, nil, p.outOfMemory(size, n, err)
		}
	}
}

// reserve counts n bytes as managed before they are allocated, so that
// concurrent misses cannot pass the limit together. Over the limit, it frees
// held blocks, largest first, then collects dropped buffers once, before it
// gives up.
func (p *Pool) reserve(size, n int64) error {
	collected := false
	for {
		p.mu.Lock()
		if p.limit == 0 || p.s.ReservedBytes.current()+n <= p.limit {
			p.s.ReservedBytes.add(n >= SmallBlock, n)
			p.mu.Unlock()
			return nil
		}
		buf := p.popLargestHeldLocked()
		p.mu.Unlock()
		switch {
		case buf != nil:
			p.freeDevice(buf)
		case !collected:
			collected = true
			p.collectDropped()
		default:
			return p.outOfMemory(size, n, nil)
		}
	}
}

// unreserve takes back a reservation whose allocation failed.
func (p *Pool) unreserve(n int64) {
	p.mu.Lock()
	p.s.ReservedBytes.sub(n >= SmallBlock, n)
	p.mu.Unlock()
}

// isOutOfMemory reports whether an allocator's error means the device is
// out of memory, which freeing held blocks may cure.
func isOutOfMemory(err error) bool {
	return errors.Is(err, cl.ErrMemObjectAllocationFailure) ||
		errors.Is(err, cl.ErrOutOfResources) ||
		errors.Is(err, cl.ErrOutOfHostMemory)
}

func (p *Pool) outOfMemory(size, n int64, cause error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.s.OOMs++
	s := p.snapshot()
	e := &OutOfMemoryError{
		Requested: size, AllocSize: n,
		ActiveBlocks: s.ActiveBlocks, ActiveBytes: s.ActiveBytes,
		HeldBlocks: s.HeldBlocks, HeldBytes: s.HeldBytes,
		ManagedBytes: s.ManagedBytes, Limit: p.limit, Err: cause,
	}
	if p.device != nil {
		e.DeviceTotal = p.device.GlobalMemSize
	}
	if b := p.bins.largestHeld(); b != nil {
		e.LargestHeldBin, e.LargestHeldSize = b.num, b.allocSize
	}
	return e
}

// put takes back the block of a PooledBuffer, marking it closed (a negative
// pb.size): the block is held for reuse, or, after StopHolding (or for an
// exact-size block), freed at once. A PooledBuffer already closed returns
// ErrClosed and changes nothing. The closed mark is guarded by p.mu, which
// put takes anyway.
func (p *Pool) put(pb *PooledBuffer) error {
	hooks := p.hooks.Load()
	p.mu.Lock()
	size := pb.size
	if size < 0 {
		p.mu.Unlock()
		return ErrClosed
	}
	buf := pb.buf
	pb.size, pb.buf = ^size, nil // closed before the hook: a racing Close gets ErrClosed
	if p.dropSafety {
		runtime.SetFinalizer(pb, nil) // under p.mu: see handOutLocked
	}
	if hooks != nil {
		p.mu.Unlock()
		p.emit(hooks, pb.event(FreeBefore, buf))
		p.mu.Lock()
	}
	var err error
	if b := pb.bin; p.holding && !b.exact {
		p.deactivate(b.allocSize, size)
		b.bufs = append(b.bufs, buf)
		p.s.HeldBlocks++
		p.s.HeldBytes += b.allocSize
		p.mu.Unlock()
	} else {
		n := pb.allocSize()
		p.deactivate(n, size)
		p.s.Segment.sub(n >= SmallBlock, 1)
		p.s.ReservedBytes.sub(n >= SmallBlock, n)
		p.mu.Unlock()
		err = p.freeDevice(buf)
	}
	if hooks != nil {
		e := pb.event(FreeAfter, buf)
		e.Err = err
		p.emit(hooks, e)
	}
	return err
}

// popLargestHeldLocked takes the most recently held block of the largest
// non-empty bin out of the pool's accounts, for the caller to free. It
// returns nil if nothing is held. p.mu must be held.
func (p *Pool) popLargestHeldLocked() *cl.Buffer {
	if p.s.HeldBlocks == 0 {
		return nil
	}
	largest := p.bins.largestHeld()
	p.forgetHeld(largest.allocSize)
	return largest.pop()
}

// forgetHeld counts a held block of n bytes leaving the pool. p.mu must be held.
func (p *Pool) forgetHeld(n int64) {
	p.s.HeldBlocks--
	p.s.HeldBytes -= n
	p.s.Segment.sub(n >= SmallBlock, 1)
	p.s.ReservedBytes.sub(n >= SmallBlock, n)
}

// freeLargestHeld frees one held block of the largest bin, and reports
// whether there was one.
func (p *Pool) freeLargestHeld() bool {
	p.mu.Lock()
	buf := p.popLargestHeldLocked()
	p.mu.Unlock()
	if buf == nil {
		return false
	}
	p.freeDevice(buf)
	return true
}

// freeDevice gives a buffer, already out of the pool's accounts, back to
// the allocator.
func (p *Pool) freeDevice(buf *cl.Buffer) error {
	err := p.alloc.Free(buf)
	p.mu.Lock()
	p.s.DeviceFrees++
	if err != nil {
		p.s.FreeErrors++
	}
	p.mu.Unlock()
	return err
}

// FreeHeld frees every held block.
func (p *Pool) FreeHeld() {
	p.mu.Lock()
	var bufs []*cl.Buffer
	p.bins.each(func(b *bin) {
		for _, buf := range b.bufs {
			bufs = append(bufs, buf)
			p.forgetHeld(b.allocSize)
		}
		clear(b.bufs)
		b.bufs = b.bufs[:0]
	})
	p.mu.Unlock()
	for _, buf := range bufs {
		p.freeDevice(buf)
	}
}

// StopHolding frees every held block, and from now on frees blocks as they
// are given back instead of holding them. It cannot be undone; Allocate
// still works, allocating every request anew.
func (p *Pool) StopHolding() {
	p.mu.Lock()
	p.holding = false
	p.s.Holding = false
	p.mu.Unlock()
	p.FreeHeld()
}

// Close stops holding, frees every held block and refuses further
// Allocates with ErrPoolClosed. Buffers still active stay valid; each is
// freed when closed (or collected). Close is idempotent.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.StopHolding()
	return nil
}

// Stats returns a snapshot of the pool's counters.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.snapshot()
}

// Device returns the device of the pool's allocator, or nil if it does not
// say (see allocator.DeviceOf).
func (p *Pool) Device() *cl.Device { return p.device }

// HeldBlocks returns the number of blocks held for reuse.
func (p *Pool) HeldBlocks() int { return p.Stats().HeldBlocks }

// ActiveBlocks returns the number of blocks handed out and not yet given back.
func (p *Pool) ActiveBlocks() int { return p.Stats().ActiveBlocks }

// ManagedBytes returns the alloc sizes of all blocks the pool owns.
func (p *Pool) ManagedBytes() int64 { return p.Stats().ManagedBytes }

// ActiveBytes returns the sizes requested for the active blocks.
func (p *Pool) ActiveBytes() int64 { return p.Stats().ActiveBytes }

// HeldBytes returns the alloc sizes of the held blocks.
func (p *Pool) HeldBytes() int64 { return p.Stats().HeldBytes }

// LargestHeldBin returns the largest bin that holds a block, and whether
// there is one.
func (p *Pool) LargestHeldBin() (uint32, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if b := p.bins.largestHeld(); b != nil {
		return b.num, true
	}
	return 0, false
}
