package mempool

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool/internal/policy"
)

// This file is the pool's core, the same for every policy: the public
// API, the lock, reserving bytes under the limit, the out-of-memory
// ladder, what giving a block back does, and Close. Where a request goes
// is the policy's (policy.go); every counter changes in the ledger
// (ledger.go), under p.mu; hooks and the allocator are called outside it.

// Pool is a memory pool of device buffers over an Allocator (New), or of
// shared virtual memory over an SVMAllocator (NewSVM). It is safe for
// concurrent use.
type Pool struct {
	src         source     // the allocator, of buffers or of SVM
	device      *cl.Device // for hooks and errors; nil if the allocator does not say
	maxAlloc    int64      // the device's largest buffer; 0 if unknown
	sizeCap     int64      // the largest request: maxAlloc, or maxRequest if unknown
	leadingBits int
	arena       bool    // WithArena
	maxSplit    int64   // WithMaxSplitSize; 0: none
	align       int64   // the arena's block alignment
	limitFrac   float64 // WithLimitFraction's, if byFrac
	byFrac      bool    // the last limit option was WithLimitFraction
	limitSet    bool    // WithLimit or WithLimitFraction was given
	dropSafety  bool
	noCaches    bool                         // queues cache no blocks (tests compare pools with and without)
	hooks       atomic.Pointer[[]*hookEntry] // nil when none: the hot path checks only that
	caching     atomic.Bool                  // queue caches take blocks (qcache.go)
	cachesGone  atomic.Bool                  // caching is off for good and the caches are drained
	hooksMu     sync.Mutex                   // serializes AddHook and its remove

	defq *qstate // the allocator's queue, where pool.Allocate allocates; nil if none

	// The fields above are read on every request; mu and the fields below
	// are written. The padding keeps them on different cache lines, so
	// that one core taking the lock does not take the lines the others
	// read without it.
	_ [64]byte

	mu      sync.Mutex // protects the fields below
	queues  []*qstate  // every queue allocated for, by id-1
	pol     placement
	slab    []PooledBuffer // handed out one by one without drop safety (see handOutLocked)
	holding bool           // false after StopHolding: given-back blocks are freed
	closed  bool
	limit   int64 // 0: no limit
	l       ledger
}

// Option configures a Pool.
type Option func(*Pool)

// WithLeadingBits sets leading_bits_in_bin_id, the bits of a size after its
// leading one that name its bin (with WithArena, its size class): more bits
// waste less memory per block and make more bins. The default is 4 (a block
// wastes at most 1/16 of its size). New accepts 0 to MaxLeadingBits.
func WithLeadingBits(n int) Option { return func(p *Pool) { p.leadingBits = n } }

// WithLimit caps the pool's managed bytes (active plus held, as CuPy counts
// them). A request that would pass the cap makes the pool free held memory
// first; if that is not enough, it fails with ErrOutOfMemory. A request
// that could not fit even in an empty pool fails at once, keeping what the
// pool holds. 0 means no limit. Without WithLimit or WithLimitFraction, the
// limit comes from the environment (LimitEnv); SetLimit changes it later.
func WithLimit(bytes int64) Option {
	return func(p *Pool) { p.limit, p.byFrac, p.limitSet = bytes, false, true }
}

// WithArena makes the pool a splitting arena instead of exact bins: it
// allocates segments (2 MiB for requests up to 1 MiB; larger ones growing
// with the pool) and cuts them into blocks, merging blocks given back with
// their free neighbours. It holds close to the live peak where exact bins
// can hold many times it; see the package doc.
func WithArena() Option { return func(p *Pool) { p.arena = true } }

// WithMaxSplitSize makes requests over n bytes oversize, as torch's
// max_split_size_mb does: each gets a segment of its own that is never
// split, and only oversize requests reuse it, so that large blocks are not
// cut into pieces that no large request can use again. It needs WithArena.
func WithMaxSplitSize(n int64) Option { return func(p *Pool) { p.maxSplit = n } }

// WithDropSafety sets whether a PooledBuffer dropped without Close goes back
// to the pool after garbage collection (the default, as in PyOpenCL). Each
// allocation then carries a finalizer, which costs more than the rest of a
// pool hit together. A program that Closes every buffer can turn it off:
// a hit then costs a fraction as much and allocates nothing (the pool
// hands out PooledBuffers from slabs). The price: a buffer dropped without
// Close is never given back, and its device memory leaks until the program
// exits, as an unreleased cl.Buffer's would.
func WithDropSafety(on bool) Option { return func(p *Pool) { p.dropSafety = on } }

// New returns a pool of device buffers over a. The pool owns the buffers it
// gets from a and gives them back with a.Free.
func New(a allocator.Allocator, opts ...Option) (*Pool, error) {
	if a == nil {
		return nil, errors.New("mempool: New: nil allocator")
	}
	return newPool("New", buffers{a}, opts)
}

// NewSVM returns a pool of shared virtual memory over a, with the same
// options, policies, limits, queue ordering, hooks and statistics as New's.
// Its PooledBuffers have SVM and Offset instead of Buffer and Base: pass
// them to kernels with cl.Kernel.SetArgSVMPointer(i, b.SVM(), b.Offset()).
// The pool owns the allocations it gets from a and gives them back with
// a.Free. Over allocator.ImmediateSVM, an out-of-memory shows at Allocate,
// and pool.Allocate allocates on its queue.
func NewSVM(a allocator.SVMAllocator, opts ...Option) (*Pool, error) {
	if a == nil {
		return nil, errors.New("mempool: NewSVM: nil allocator")
	}
	return newPool("NewSVM", svms{a}, opts)
}

// newPool is New and NewSVM, for the constructor called call.
func newPool(call string, src source, opts []Option) (*Pool, error) {
	if isNil(src.outer()) {
		return nil, fmt.Errorf("mempool: %s: nil allocator", call)
	}
	// In a context of several devices, a block must suit each: the
	// least of their largest buffers, the largest of their alignments.
	ctx := allocator.ContextOf(src.outer())
	p := &Pool{src: src, leadingBits: 4, dropSafety: true, holding: true}
	if ds := ctx.Devices(); len(ds) > 0 {
		p.device = ds[0]
	}
	for _, o := range opts {
		o(p)
	}
	switch {
	case p.leadingBits < 0 || p.leadingBits > MaxLeadingBits:
		return nil, fmt.Errorf("mempool: %s: leading bits %d outside 0..%d", call, p.leadingBits, MaxLeadingBits)
	case p.limit < 0:
		return nil, fmt.Errorf("mempool: %s: negative limit %d", call, p.limit)
	case p.maxSplit < 0:
		return nil, fmt.Errorf("mempool: %s: negative max split size %d", call, p.maxSplit)
	case p.maxSplit > 0 && !p.arena:
		return nil, fmt.Errorf("mempool: %s: WithMaxSplitSize needs WithArena: exact bins never split", call)
	}
	p.maxAlloc = ctx.MaxMemAllocSize()
	p.sizeCap = maxRequest
	if p.maxAlloc > 0 {
		p.sizeCap = min(p.maxAlloc, maxRequest)
	}
	if err := p.resolveLimit(); err != nil {
		return nil, err
	}
	p.align = arenaAlignment(ctx)
	p.pol = p.newPlacement()
	p.caching.Store(!p.noCaches)
	p.cachesGone.Store(p.noCaches)
	p.l.s = Stats{Policy: "bins", LeadingBits: p.leadingBits, MaxSplitSize: p.maxSplit, Limit: p.limit, Holding: true}
	if p.arena {
		p.l.s.Policy = "arena"
	}
	if q := allocator.QueueOf(src.outer()); q != nil {
		p.defq, _ = p.queueState(q)
	}
	return p, nil
}

// Allocate returns a buffer of at least size bytes. With exact bins (the
// default) it is the most recently given back block of size's bin if there
// is one, else a new block of the bin's AllocSize from the allocator; with
// WithArena, a block cut from a segment. Allocate(0) returns a real block
// (1 byte with bins, the arena's smallest block with it). A negative size
// is an error, and changes nothing.
//
// Near the device's largest buffer (MaxMemAllocSize), the block a policy
// would make can pass the limit while the request does not: such a request
// gets a block of exactly its size, which is freed on Close rather than
// held, since it is too small for the rest of its bin. (PyOpenCL fails these
// requests.)
//
// The block is for use on the allocator's queue (allocator.Immediate's),
// ordered after every command that may still use it on other queues (see
// On). Over an allocator without a queue (allocator.Deferred), the pool
// knows no queue: a block last used through On waits on the host for the
// commands that may still use it, and the caller orders the rest.
func (p *Pool) Allocate(size int64) (*PooledBuffer, error) { return p.allocate(size, p.defq) }

// allocate serves a request of size bytes on queue r (nil: none).
func (p *Pool) allocate(size int64, r *qstate) (*PooledBuffer, error) {
	if err := p.checkSize(size); err != nil {
		return nil, err
	}
	hooks := p.hooks.Load()
	pb := p.newPooledBuffer()
	if hooks == nil && r != nil {
		if got := p.allocateCached(size, r, pb); got != nil {
			return got, nil
		}
	}
	if hooks != nil {
		if err := p.emit(hooks, Event{Kind: MallocBefore, Size: size, AllocSize: p.blockSize(size)}); err != nil {
			return nil, p.mallocFailed(hooks, size, err)
		}
	}
	p.lockReplayed(r)
	for drained := false; ; drained = true {
		if p.closed {
			p.mu.Unlock()
			return nil, p.mallocFailed(hooks, size, ErrPoolClosed)
		}
		if b := p.pol.GetOn(size, r.idOrNone()); b != nil {
			p.l.request(r, true)
			pb, err := p.hitUnlock(b, size, pb, r)
			if err != nil {
				return nil, p.mallocFailed(hooks, size, err)
			}
			return p.wrap(hooks, pb, b, size, r)
		}
		if drained || !p.arena && p.pol.BlockSize(size) > cacheMaxBlock {
			break // cached blocks are small: no bin of theirs serves it
		}
		// Blocks waiting in queue caches may serve the request or, given
		// back to an arena, merge into a block that does, or leave
		// segments wholly free for BeforeGrow to free before the pool
		// grows.
		p.mu.Unlock()
		p.drainCaches()
		p.lockReplayed(r)
	}
	p.l.miss()
	p.l.request(r, false)
	gone := p.pol.BeforeGrow(size)
	stale := p.forgetLocked(gone...)
	p.mu.Unlock()
	p.freeSegments(gone, stale)

	b, pb, err := p.allocateBlock(hooks, size, pb, r)
	if err != nil {
		return nil, p.mallocFailed(hooks, size, err)
	}
	return p.wrap(hooks, pb, b, size, r)
}

// checkSize refuses, before anything changes, a size no block can have:
// a negative one, and one larger than the device's largest buffer (or,
// where the pool does not know its device, one whose block size would
// overflow), which no amount of freeing could serve. The latter is an
// *OutOfMemoryError, as torch and CuPy raise theirs there.
func (p *Pool) checkSize(size int64) error {
	if uint64(size) <= uint64(p.sizeCap) { // a negative size wraps past any cap
		return nil
	}
	return p.sizeError(size)
}

// sizeError is checkSize's error for a size past p.sizeCap.
func (p *Pool) sizeError(size int64) error {
	switch {
	case size < 0:
		return fmt.Errorf("mempool: Allocate(%d): negative size: %w", size, cl.ErrInvalidBufferSize)
	case p.maxAlloc > 0 && size > p.maxAlloc:
		return &OutOfMemoryError{Requested: size, AllocSize: size, DeviceMaxAlloc: p.maxAlloc,
			DeviceTotal: p.device.GlobalMemSize, Limit: p.Limit(), Err: cl.ErrInvalidBufferSize}
	case size > maxRequest:
		return fmt.Errorf("mempool: Allocate(%d): larger than any block can be (%d bytes): %w", size, int64(maxRequest), cl.ErrInvalidBufferSize)
	}
	return nil
}

// maxRequest is the largest size the pool serves when it does not know
// its device: any block size a policy rounds it to still fits an int64.
const maxRequest = 1 << 60

// hitUnlock hands out b, a held block taken for a request of size bytes
// on queue r: it counts the hit, readies pb (from newPooledBuffer),
// releases p.mu, which must be held, and orders b after the commands that
// may still use it.
func (p *Pool) hitUnlock(b *block, size int64, pb *PooledBuffer, r *qstate) (*PooledBuffer, error) {
	p.l.hit(b, size)
	p.l.sync(p.pol.Counts())
	pb = p.handOutLocked(pb)
	noteLocked(b, size, r, pb)
	uses := handover(b, r)
	p.mu.Unlock()
	if uses != nil {
		if err := p.handOver(uses, r, pb, b, size); err != nil {
			return nil, err
		}
	}
	return pb, nil
}

// handOver orders block b, taken for queue r, after the commands of uses.
// If that fails, the block goes back to the pool as it was, and pb (from
// handOutLocked) is dropped.
func (p *Pool) handOver(uses []policy.Use, r *qstate, pb *PooledBuffer, b *block, size int64) error {
	fs, err := p.order(uses, r)
	p.mu.Lock()
	p.l.handedOver(r, fs)
	p.mu.Unlock()
	if err == nil {
		return nil
	}
	*pb = PooledBuffer{pool: p, blk: b, size: size}
	b.Uses = append(b.Uses[:0], uses...)
	_ = p.putBack(pb, true)
	return err
}

// blockSize returns the bytes of the block a request of size gets (see
// newSegmentLocked for requests near the device's limit).
func (p *Pool) blockSize(size int64) int64 {
	n := p.pol.BlockSize(size)
	if p.maxAlloc > 0 && n > p.maxAlloc && size <= p.maxAlloc {
		return max(size, 1)
	}
	return n
}

// newSegmentLocked returns the segment, not yet allocated, that a miss of
// size makes: the policy's, or one of exactly size bytes where only that
// fits the device's largest buffer. p.mu must be held.
func (p *Pool) newSegmentLocked(size int64) *segment {
	seg := p.pol.NewSegment(size)
	if p.maxAlloc > 0 && seg.Size > p.maxAlloc && size <= p.maxAlloc {
		seg.Size, seg.Exact, seg.Oversize = max(size, 1), true, false
	}
	return seg
}

// allocateBlock gets a new segment for a miss and cuts the block from it.
// It reserves the segment's bytes under the limit, then asks the allocator.
// After an out-of-memory, it collects dropped buffers (once) and serves the
// request from what came back if it can; otherwise it frees wholly free
// segments, largest first, retrying after each, then tries the smaller
// segments the policy offers, before it gives up. pb, from
// newPooledBuffer, comes back readied by handOutLocked.
func (p *Pool) allocateBlock(hooks hookList, size int64, pb *PooledBuffer, r *qstate) (*block, *PooledBuffer, error) {
	p.mu.Lock()
	seg := p.newSegmentLocked(size)
	p.mu.Unlock()
	if err := p.reserve(size, seg); err != nil {
		return nil, nil, err
	}
	collected := false
	for {
		var hookErr error
		if hooks != nil {
			if hookErr = p.emit(hooks, Event{Kind: AllocBefore, Size: seg.Size, AllocSize: seg.Size}); hookErr != nil {
				p.unreserve(seg)
				return nil, nil, hookErr
			}
		}
		m, err := p.allocateSegment(seg.Size)
		if hooks != nil {
			hookErr = p.emit(hooks, Event{Kind: AllocAfter, Size: seg.Size, AllocSize: seg.Size, Buffer: m.buf, SVM: m.svm, Err: err})
		}
		if err == nil {
			seg.Data = m
			p.mu.Lock()
			p.l.segmentAdded(seg)
			b := p.pol.Add(seg, size)
			p.l.activate(b, size)
			p.l.sync(p.pol.Counts())
			pb = p.handOutLocked(pb)
			noteLocked(b, size, r, pb)
			p.mu.Unlock()
			if hookErr != nil {
				// The segment stays, held; the request fails.
				*pb = PooledBuffer{pool: p, blk: b, size: size, q: r}
				_ = p.putBack(pb, false)
				return nil, nil, hookErr
			}
			return b, pb, nil
		}
		switch {
		case hookErr != nil:
			p.unreserve(seg)
			return nil, nil, errors.Join(err, hookErr)
		case errors.Is(err, ErrPanicked):
			p.unreserve(seg)
			return nil, nil, err
		case !isOutOfMemory(err):
			p.unreserve(seg)
			return nil, nil, fmt.Errorf("mempool: allocating %d bytes for a %d-byte request: %w", seg.Size, size, err)
		}
		p.mu.Lock()
		p.l.oomRetried()
		kept := p.pol.TakeKept(seg.Size)
		stale := p.forgetLocked(kept...)
		p.mu.Unlock()
		if len(kept) > 0 {
			// Segments the policy kept past the most the pool had held
			// go first: freeing them costs less than a collection.
			p.freeSegments(kept, stale)
			continue
		}
		if !collected {
			// Buffers dropped without Close come back as held blocks, and
			// one of them may serve the request.
			collected = true
			p.collectDropped()
			p.mu.Lock()
			if b := p.pol.GetOn(size, r.idOrNone()); b != nil {
				p.l.unreserve(seg)
				pb, err := p.hitUnlock(b, size, pb, r)
				if err != nil {
					return nil, nil, err
				}
				return b, pb, nil
			}
			p.mu.Unlock()
		}
		if p.freeLargestHeld() {
			continue
		}
		p.mu.Lock()
		smaller := p.pol.Smaller(size, seg.Size)
		if smaller > 0 {
			p.l.unreserve(seg)
			seg.Size = smaller
			p.l.reserve(seg)
		}
		p.mu.Unlock()
		if smaller == 0 {
			p.unreserve(seg)
			return nil, nil, p.outOfMemory(size, seg.Size, err)
		}
	}
}

// allocateSegment asks the allocator for n bytes, recovering a panic into
// a *PanicError.
func (p *Pool) allocateSegment(n int64) (m mem, err error) {
	defer func() {
		if v := recover(); v != nil {
			m, err = mem{}, recovered(v, "allocator's Allocate")
		}
	}()
	return p.src.allocate(n)
}

// freeSegment gives m back to the allocator, recovering a panic into a
// *PanicError.
func (p *Pool) freeSegment(m mem) (err error) {
	defer func() {
		if err == nil {
			err = recovered(recover(), "allocator's Free")
		}
	}()
	return p.src.free(m)
}

// reserve counts seg's bytes as managed before they are allocated, so that
// concurrent misses cannot pass the limit together. Over the limit, it
// frees wholly free segments, largest first, then collects dropped buffers
// once, before it gives up. A request that could not fit the limit even
// with nothing else in the pool fails at once and frees nothing; so does
// a segment the policy would make larger than the limit, shrunk first to
// the smallest the policy offers.
func (p *Pool) reserve(size int64, seg *segment) error {
	p.mu.Lock()
	for p.limit > 0 && seg.Size > p.limit {
		smaller := p.pol.Smaller(size, seg.Size)
		if smaller == 0 {
			p.mu.Unlock()
			return p.outOfMemory(size, seg.Size, nil)
		}
		seg.Size = smaller
	}
	p.mu.Unlock()
	collected, drained := false, false
	for {
		p.mu.Lock()
		if p.limit == 0 || seg.Size <= p.limit-p.l.reserved() {
			p.l.reserve(seg)
			p.mu.Unlock()
			return nil
		}
		s := p.pol.TakeLargest()
		stale := p.forgetLocked(s)
		p.mu.Unlock()
		switch {
		case s != nil:
			p.freeSegments([]*segment{s}, stale)
		case !drained:
			drained = true
			p.drainCaches()
		case !collected:
			collected = true
			p.collectDropped()
		default:
			return p.outOfMemory(size, seg.Size, nil)
		}
	}
}

// unreserve takes back a reservation whose allocation failed.
func (p *Pool) unreserve(seg *segment) {
	p.mu.Lock()
	p.l.unreserve(seg)
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
	p.replayAll() // the figures count what the queue caches did too
	p.mu.Lock()
	defer p.mu.Unlock()
	p.l.oomRefused()
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
	if n := p.pol.LargestFree(); n > 0 {
		e.LargestHeldBin, e.LargestHeldSize = BinNumber(n, p.leadingBits), n
	}
	return e
}

// put takes back the block of a PooledBuffer, marking it closed (a negative
// pb.size): the block is held for reuse, or, after StopHolding (or for an
// exact-size block), its segment is freed once wholly free. A PooledBuffer
// already closed returns ErrClosed and changes nothing. The closed mark is
// set under the lock of pb's queue's cache (by a compare-and-swap for a
// buffer of no queue), so that of two racing Closes one wins.
//
// The block records the queues whose commands may still use it: pb's own
// and those of RecordQueue, each with its count of markers now (see
// queue.go). A hook that panics does not stop the block from going back:
// put returns the panic, joined with the allocator's error if any.
func (p *Pool) put(pb *PooledBuffer) error { return p.give(pb, p.hooks.Load(), true) }

// putBack takes back a block that was never handed out after all (a
// failed handover, a hook that panicked): no hook is told. With keepUses,
// the block keeps the uses it has; otherwise it records pb's queue's, as
// put does.
func (p *Pool) putBack(pb *PooledBuffer, keepUses bool) error { return p.give(pb, nil, !keepUses) }

// give is put, with the hooks to tell and whether to record pb's uses.
// It is kept small for the hot path, a Close on a queue whose block
// waits in the queue's cache; giveLocked does the rest.
func (p *Pool) give(pb *PooledBuffer, hooks hookList, record bool) error {
	var size int64
	if r := pb.q; r != nil {
		// Every Close of pb takes r's cache's lock before anything else:
		// under it, pb's closed mark needs no atomic instruction.
		r.c.mu.Lock()
		if size = pb.size; size < 0 {
			r.c.mu.Unlock()
			return ErrClosed
		}
		pb.size = ^size
		if hooks == nil && record && p.putCachedLocked(pb, size) {
			r.c.mu.Unlock()
			return nil
		}
		p.mu.Lock()
		p.replayLocked(r)
		r.c.mu.Unlock()
	} else {
		size = atomic.LoadInt64(&pb.size)
		if size < 0 || !atomic.CompareAndSwapInt64(&pb.size, size, ^size) {
			return ErrClosed // closed before the hook: a racing Close gets ErrClosed
		}
		p.mu.Lock()
	}
	return p.giveLocked(pb, size, hooks, record)
}

// giveLocked is give's work once pb is marked closed and p.mu is held;
// it unlocks p.mu.
func (p *Pool) giveLocked(pb *PooledBuffer, size int64, hooks hookList, record bool) error {
	b := pb.blk
	if p.dropSafety {
		runtime.SetFinalizer(pb, nil) // under p.mu: see handOutLocked
	}
	if record {
		p.recordUsesLocked(b, pb.q)
	}
	var hookErr error
	var after Event // read before Put: an arena may merge b away
	if hooks != nil {
		p.mu.Unlock()
		hookErr = p.emit(hooks, pb.event(FreeBefore, b))
		p.mu.Lock()
		after = pb.event(FreeAfter, b)
	}
	p.l.deactivate(b, size)
	s := p.pol.Put(b)
	if s == nil && p.holding && hooks == nil {
		// The hot path: the block is held, and nothing is to be freed.
		p.l.sync(p.pol.Counts())
		stale := p.pol.TakeStale(nil)
		p.mu.Unlock()
		return p.freeSegments(nil, stale)
	}
	var gone []*segment
	if s != nil {
		gone = append(gone, s)
	}
	if !p.holding {
		for s := p.pol.TakeLargest(); s != nil; s = p.pol.TakeLargest() {
			gone = append(gone, s)
		}
	}
	stale := p.forgetLocked(gone...)
	p.mu.Unlock()
	err := p.freeSegments(gone, stale)
	if hooks != nil {
		after.Err = err
		if herr := p.emit(hooks, after); hookErr == nil {
			hookErr = herr
		}
	}
	return errors.Join(err, hookErr)
}

// forgetLocked takes segments the policy gave up (nil ones are skipped)
// out of the pool's accounts, brings the held counts up to date, and
// returns the sub-buffers that went stale meanwhile: freeSegments frees
// both. p.mu must be held.
func (p *Pool) forgetLocked(segs ...*segment) (stale []mem) {
	for _, s := range segs {
		if s != nil {
			p.l.segmentRemoved(s)
		}
	}
	p.l.sync(p.pol.Counts())
	return p.pol.TakeStale(nil)
}

// freeLargestHeld frees the largest wholly free segment, and reports
// whether there was one.
func (p *Pool) freeLargestHeld() bool {
	p.drainCaches()
	p.mu.Lock()
	s := p.pol.TakeLargest()
	stale := p.forgetLocked(s)
	p.mu.Unlock()
	if s == nil {
		return false
	}
	p.freeSegments([]*segment{s}, stale)
	return true
}

// freeSegments releases the sub-buffers of stale blocks, then gives the
// segments, already out of the pool's accounts, back to the allocator. It
// returns the allocator's errors, joined: one that fails (or panics) does
// not keep the others from being freed.
func (p *Pool) freeSegments(segs []*segment, stale []mem) error {
	for _, sub := range stale {
		_ = sub.buf.Release() // a sub-buffer of ours: its release can fail only if its context is gone
	}
	var errs []error
	for _, s := range segs {
		if s.Data.svm != nil {
			// clSVMFree frees at once, where clReleaseMemObject waits
			// for the commands that use the buffer. Memory that may be
			// in use is better leaked than freed.
			if err := p.waitForUses(s); err != nil {
				errs = append(errs, err)
				continue
			}
		}
		err := p.freeSegment(s.Data)
		p.mu.Lock()
		p.l.deviceFreed(err)
		p.mu.Unlock()
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// waitForUses waits on the host for the commands that may still use
// seg's memory: those enqueued before its blocks were given back, on the
// queues their uses record (see recordUsesLocked; a merged block has the
// uses of its parts). seg is out of the pool: nothing else reads it.
func (p *Pool) waitForUses(seg *segment) error {
	var uses []policy.Use
	for b := range seg.Blocks() {
		uses = append(uses, b.Uses...)
	}
	if len(uses) == 0 {
		return nil
	}
	fs, err := p.order(uses, nil)
	p.mu.Lock()
	p.l.handedOver(nil, fs)
	p.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%w; the %d-byte SVM that they may still use is left allocated (leaked), not freed under them", err, seg.Size)
	}
	return nil
}

// FreeHeld frees every wholly free segment: with exact bins, every held
// block. An arena's free blocks that share a segment with active blocks
// stay, as they are part of memory in use. It returns the allocator's
// errors, joined; every segment is out of the pool either way.
func (p *Pool) FreeHeld() error {
	return p.freeHeldWhile(func() bool { return true })
}

// freeHeldWhile frees wholly free segments, largest first, while more()
// says so (it is called under p.mu).
func (p *Pool) freeHeldWhile(more func() bool) error {
	p.drainCaches()
	p.mu.Lock()
	var segs []*segment
	for more() {
		s := p.pol.TakeLargest()
		if s == nil {
			break
		}
		segs = append(segs, s)
		p.l.segmentRemoved(s)
	}
	stale := p.forgetLocked()
	p.mu.Unlock()
	return p.freeSegments(segs, stale)
}

// StopHolding frees every held segment, and from now on frees segments as
// they become wholly free instead of holding them. It cannot be undone;
// Allocate still works. It returns FreeHeld's error.
func (p *Pool) StopHolding() error {
	p.caching.Store(false)
	p.mu.Lock()
	p.holding = false
	p.l.setHolding(false)
	p.mu.Unlock()
	err := p.FreeHeld() // drains the caches first
	p.cachesGone.Store(true)
	return err
}

// Close stops holding, frees every held block and refuses further
// Allocates with ErrPoolClosed. Buffers still active stay valid; each is
// freed when closed (or collected). It returns the errors of freeing what
// it held and of releasing its queues' events, joined. Close is
// idempotent: a second Close frees nothing more and returns nil.
func (p *Pool) Close() error {
	p.caching.Store(false)
	p.mu.Lock()
	p.closed = true
	queues := p.queues
	p.mu.Unlock()
	errs := []error{p.StopHolding()}
	for _, qs := range queues {
		errs = append(errs, qs.release())
	}
	return errors.Join(errs...)
}

// Stats returns a snapshot of the pool's counters.
func (p *Pool) Stats() Stats {
	qs, cached := p.lockCaches()
	defer p.unlockCaches(qs)
	s := p.snapshot()
	if len(cached) > 0 && s.HeldBytes > 0 {
		largest := p.pol.LargestFree()
		for b := range cached {
			largest = max(largest, b.Size)
		}
		s.Fragmentation = 1 - float64(largest)/float64(s.HeldBytes)
	}
	return s
}

// Device returns the device of the pool's allocator, or nil if it does not
// say (see allocator.DeviceOf).
func (p *Pool) Device() *cl.Device { return p.device }

// HeldBlocks returns the number of blocks held for reuse.
func (p *Pool) HeldBlocks() int { return p.Stats().HeldBlocks }

// ActiveBlocks returns the number of blocks handed out and not yet given back.
func (p *Pool) ActiveBlocks() int { return p.Stats().ActiveBlocks }

// ManagedBytes returns the sizes of all segments the pool owns.
func (p *Pool) ManagedBytes() int64 { return p.Stats().ManagedBytes }

// ActiveBytes returns the sizes requested for the active blocks.
func (p *Pool) ActiveBytes() int64 { return p.Stats().ActiveBytes }

// HeldBytes returns the sizes of the held blocks.
func (p *Pool) HeldBytes() int64 { return p.Stats().HeldBytes }

// LargestHeldBin returns the bin of the largest held block (with
// WithArena, of the size class of the largest free block), and whether
// there is one.
func (p *Pool) LargestHeldBin() (uint32, bool) {
	qs, cached := p.lockCaches()
	defer p.unlockCaches(qs)
	n := p.pol.LargestFree()
	for b := range cached {
		n = max(n, b.Size)
	}
	if n > 0 {
		return BinNumber(n, p.leadingBits), true
	}
	return 0, false
}
