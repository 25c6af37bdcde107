package mempool

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/nilptr"
)

// This file is the Pool: its fields and lock, construction, and the
// calls that free what it holds (FreeHeld, StopHolding, Close). A
// request's way is allocate.go's, a block's way back release.go's; the
// state both change is the core's (core.go), under p.mu.

// Pool is a memory pool of device buffers over an Allocator (New), or of
// shared virtual memory over an SVMAllocator (NewSVM). It is safe for
// concurrent use.
type Pool struct {
	// Set at New, never changed.
	src          source     // the allocator, of buffers or of SVM
	device       *cl.Device // for hooks and errors; nil if the allocator does not say
	sizeCap      int64      // the largest request: the device's largest buffer, or maxRequest if unknown
	leadingBits  int
	arena        bool // WithArena
	dropSafety   bool
	defq         *qstate       // the allocator's queue, where pool.Allocate allocates; p.host if none
	host         *qstate       // no queue: its cache serves requests on none
	san          *sanitizer    // WithSanitizer's (sanitize.go); nil when off
	waitInFlight time.Duration // the ladder's last rung's waits, in all: inFlightWait (tests set another)

	hooks      atomic.Pointer[[]*hookEntry] // nil when none: the hot path checks only that
	cacheState atomic.Int32                 // cachesOn, cachesStopping or cachesGone (qcache.go)
	caches     atomic.Pointer[[]*qstate]    // every queue cache: p.host's, then each queue's; replaced, never changed, under p.mu (and p.listMu to add one)
	listMu     sync.RWMutex                 // read-held by a lockCaches waiting for each cache's lock in turn, write-held to register a queue: the list holds still for it (see lockCaches)
	hooksMu    sync.Mutex                   // serializes AddHook and its remove; protects nothing else
	locks      *atomic.Int64                // counts lock's acquisitions, in tests; nil otherwise

	// clock numbers the queue caches' turns (qflush.go). It has cache
	// lines of its own: with goroutines on several queues, it is written
	// at each turn.
	_          [64]byte
	clock      atomic.Uint64
	inspecting atomic.Int32 // Stats, Snapshot, drains in progress, which hold caches' locks (qflush.go)
	waiting    atomic.Int32 // requests waiting on the ladder's last rung (awaitInFlight): a Close wakes them
	pressing   atomic.Int32 // requests on the out-of-memory ladder (refused once): the quarantine lets closed blocks through

	// The fields above are read on every request; mu and the core are
	// written. The padding keeps them on different cache lines, so that
	// one core taking the lock does not take the lines the others read
	// without it.
	_ [64]byte

	mu    sync.Mutex // protects the core: take it with lock
	freed sync.Cond  // on mu: signalled when memory arrives or room is made (see inFlightLocked, awaitInFlight)
	core             // the state that changes, and the decisions on it
}

// lock takes p.mu. Every acquisition of p.mu goes through it, so that a
// test can count them.
func (p *Pool) lock() {
	p.mu.Lock()
	if p.locks != nil {
		p.locks.Add(1)
	}
}

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
	if nilptr.Is(src.outer()) {
		return nil, fmt.Errorf("mempool: %s: nil allocator", call)
	}
	c := defaultConfig()
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("mempool: %s: option %d is nil", call, i)
		}
		o(&c)
	}
	if err := c.validate(call); err != nil {
		return nil, err
	}
	// The sanitizer's fills and checks are commands on the pool's
	// buffers, undefined on pinned ones, which stay mapped.
	pinned := allocator.HostOf(src.outer()) != nil
	if pinned && c.san.on {
		return nil, fmt.Errorf("mempool: %s: WithSanitizer over pinned host memory: its commands on a mapped buffer are undefined", call)
	}
	if _, err := sanitizeEnv(call); pinned && !c.san.off && err != nil {
		return nil, err // a bad value fails, as it does for other pools
	}
	c.san.off = c.san.off || pinned           // CLPOOL_SANITIZE leaves a pinned pool alone
	sanitize, err := c.resolveSanitizer(call) // before the fields it sets are read
	if err != nil {
		return nil, err
	}
	// In a context of several devices, a block must suit each: the
	// least of their largest buffers, the largest of their alignments.
	ctx := allocator.ContextOf(src.outer())
	p := &Pool{src: src, leadingBits: c.leadingBits, arena: c.arena, dropSafety: c.dropSafety, waitInFlight: inFlightWait}
	if ds := ctx.Devices(); len(ds) > 0 {
		p.device = ds[0]
	}
	limit, err := c.resolveLimit(call, p.globalMem())
	if err != nil {
		return nil, err
	}
	p.maxAlloc = ctx.MaxMemAllocSize()
	p.sizeCap = maxRequest
	if p.maxAlloc > 0 {
		p.sizeCap = min(p.maxAlloc, maxRequest)
	}
	p.core.init(c, arenaAlignment(ctx), p.maxAlloc, limit, overlapSafe(ctx))
	p.freed.L = &p.mu
	if sanitize {
		p.san = newSanitizer(p, c.san)
		p.l.heldLarge = true
	}
	// Blocks of pinned memory go to the host, which touches their
	// bytes in no queue's order: every reuse waits for the commands that
	// may still use the block (handover), which no cache hit would.
	p.hostOwned = pinned
	if c.noCaches || p.hostOwned {
		p.cacheState.Store(cachesGone)
	}
	p.host = newQstate(nil, 0, p.arena)
	p.defq = p.host
	p.caches.Store(&[]*qstate{p.host})
	if q := allocator.QueueOf(src.outer()); q != nil {
		if qs, _ := p.queueState(q, false, ""); qs != nil { // nil: q was released
			p.defq = qs
		}
	}
	return p, nil
}

// globalMem returns the device's global memory, 0 if unknown.
func (p *Pool) globalMem() int64 {
	if p.device == nil {
		return 0
	}
	return p.device.GlobalMemSize
}

// FreeHeld frees every wholly free segment: with exact bins, every held
// block. An arena's free blocks that share a segment with active blocks
// stay, as they are part of memory in use. It returns the allocator's
// errors, joined; every segment is out of the pool either way.
func (p *Pool) FreeHeld() error {
	return p.freeHeldWhile(func() bool { return true })
}

// freeHeldWhile drains the queue caches, then frees wholly free segments,
// largest first, while more() says so (it is called under p.mu).
func (p *Pool) freeHeldWhile(more func() bool) error {
	_, err := p.drain()
	p.lock()
	segs := p.takeFree(nil, more)
	p.forget()
	p.mu.Unlock()
	return errors.Join(err, p.freeSegments(segs))
}

// StopHolding frees every held segment, and from now on frees segments as
// they become wholly free instead of holding them. It cannot be undone;
// Allocate still works. It returns FreeHeld's error.
func (p *Pool) StopHolding() error {
	p.stopCaching()
	p.lock()
	if p.life == lifeOpen {
		p.life = lifeStopped
	}
	p.l.setHolding(false)
	p.mu.Unlock()
	if p.san != nil {
		p.san.stopHolding()
	}
	err := p.FreeHeld() // drains the caches (and the quarantine) first
	p.cacheState.Store(cachesGone)
	return err
}

// Close stops holding, frees every held block and refuses further
// Allocates with ErrPoolClosed. Buffers still active stay valid; each is
// freed when closed (or collected). It returns the errors of freeing what
// it held and of releasing its queues' events, joined. Close is
// idempotent: a second Close frees nothing more and returns nil. With
// the sanitizer, it first records a LeakedAtClose finding for each block
// still open and completes every check (see Findings).
func (p *Pool) Close() error {
	p.stopCaching()
	p.lock()
	p.life = lifeClosed              // no Allocate is served from now on
	queues := slices.Clone(p.queues) // forgetReleased writes p.queues' entries
	p.mu.Unlock()
	p.freed.Broadcast() // a request waiting on the ladder's last rung fails now (awaitInFlight)
	var errs []error
	if p.san != nil {
		errs = append(errs, p.san.poolClosing()) // leaks found; the quarantine checked and given back
	}
	errs = append(errs, p.StopHolding())
	for _, qs := range queues {
		if qs == nil {
			continue // forgotten: released already
		}
		errs = append(errs, qs.release())
	}
	if p.san != nil {
		p.san.releaseIfIdle()
	}
	return errors.Join(errs...)
}

// Stats returns the pool's counters, consistent at one moment (every
// queue cache's sums flushed first).
func (p *Pool) Stats() Stats {
	qs := p.lockCaches()
	cached := p.cachedLocked(qs)
	defer p.unlockCaches(qs)
	s := p.statsLocked()
	if len(cached) > 0 && s.HeldBytes > 0 {
		// A cached block is active to the policy: its run of held
		// memory goes on through its free (and cached) neighbours.
		largest := p.pol.LargestFree()
		held := func(b *block) bool { return cached[b] }
		for b := range cached {
			largest = max(largest, b.Run(held))
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
	qs := p.lockCaches()
	cached := p.cachedLocked(qs)
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
