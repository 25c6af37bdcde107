package mempool

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool/internal/policy"
)

// This file is the queues' API: On and its QueueAllocator, a queue's
// state made at its first use, RecordQueue. How reuse is ordered across
// queues is queue.go's.

// QueueAllocator allocates from a Pool for use on one command queue: the
// pool orders the memory it hands out after every command that may still
// use it on other queues. Its Allocate can be passed to array
// constructors as pool.Allocate can. See Pool.On.
type QueueAllocator struct {
	p   *Pool
	qs  *qstate
	err error
}

// On returns an allocator of the pool's memory for use on q. Blocks given
// back on q are reused on q with no OpenCL call (q in order); a block
// last used on another queue is handed over after the commands that may
// still use it (see the package doc). q must be of the pool's context;
// the pool does not retain it. q may be released before the pool (see
// RecordQueue); On of a released queue is an error. On a closed pool,
// On of a queue the pool does not know registers nothing: its
// allocator's Allocate returns ErrPoolClosed, as the pool's does. A nil
// option registers nothing either: the allocator's Allocate returns the
// error.
//
// QueueName names q, for the queue's figures (QueueStats.Name) and the
// queue label of package metrics:
//
//	copies := pool.On(copyQueue, mempool.QueueName("copy"))
func (p *Pool) On(q *cl.CommandQueue, opts ...QueueOption) *QueueAllocator {
	var c queueConfig
	for i, o := range opts {
		if o == nil {
			return &QueueAllocator{p: p, err: fmt.Errorf("mempool: On: option %d is nil", i)}
		}
		o(&c)
	}
	qs, err := p.queueState(q, true, c.name) // a new queue's line has its name at once (s41f)
	if err == nil && c.named {
		p.lock()
		p.l.s.Queues[qs.id-1].Name = c.name // a queue known before is renamed
		p.mu.Unlock()
	}
	return &QueueAllocator{p: p, qs: qs, err: err}
}

// QueueOption is an option of On.
type QueueOption func(*queueConfig)

// queueConfig is what On's options set.
type queueConfig struct {
	name  string
	named bool // name was given, "" included
}

// QueueName names the queue On is given: the name is the queue's
// QueueStats.Name, and the queue label of its series in package metrics
// (which is its index in Stats.Queues otherwise), stable however many
// queues the program makes and in whatever order it first uses them. A
// queue keeps its name for the life of the pool; a later On of the same
// queue with another QueueName renames it, and one with "" takes its name
// away. Give each of a pool's queues a name of its own.
func QueueName(name string) QueueOption {
	return func(c *queueConfig) { c.name, c.named = name, true }
}

// Queue returns the allocator's queue.
func (a *QueueAllocator) Queue() *cl.CommandQueue {
	if a.qs == nil {
		return nil
	}
	return a.qs.q
}

// Allocate returns a buffer of at least size bytes for use on the
// allocator's queue; see Pool.Allocate. Once the queue is released, it
// returns an error matching cl.ErrInvalidCommandQueue.
func (a *QueueAllocator) Allocate(size int64) (*PooledBuffer, error) {
	if a.err != nil {
		return nil, a.err
	}
	if a.qs.q.FinishedNoWait() {
		return nil, fmt.Errorf("mempool: Allocate on a released queue: %w", cl.ErrInvalidCommandQueue)
	}
	return a.p.allocate(size, a.qs)
}

// FreeHeld frees the pool's wholly free segments that only the
// allocator's queue may still use (CuPy's free_all_blocks(stream)). It
// first gives every queue's cache back to the pool.
func (a *QueueAllocator) FreeHeld() error {
	if a.err != nil {
		return a.err
	}
	return a.p.freeHeldOn(a.qs)
}

// queueState returns the state of q, made at its first use: for On
// (forOn), only while the pool is open (else ErrPoolClosed, and q is not
// registered). A released queue gets no state: On's is an error, and
// RecordQueue's nil (nothing is left to wait for). Once the states reach
// twice what the last pass kept (forgetMin at least), the pool first
// forgets the queues their owners released (forgetReleased). A new
// queue's line in Stats.Queues is named name.
func (p *Pool) queueState(q *cl.CommandQueue, forOn bool, name string) (*qstate, error) {
	return p.queueStateListed(q, forOn, name, false)
}

// queueStateListed is queueState; listHeld: the caller holds p.listMu,
// taken after p.mu was let go for it (then no pass forgets queues).
func (p *Pool) queueStateListed(q *cl.CommandQueue, forOn bool, name string, listHeld bool) (*qstate, error) {
	if q == nil {
		return nil, fmt.Errorf("mempool: On(nil): %w", cl.ErrInvalidCommandQueue)
	}
	released := func() (*qstate, error) {
		if forOn {
			return nil, fmt.Errorf("mempool: On of a released queue: %w", cl.ErrInvalidCommandQueue)
		}
		return nil, nil
	}
	// Finished waits for a Release of q under way (as long as q's
	// commands take): never with p.listMu held (listHeld), which would
	// keep every other new queue's On, and every lockCaches past its
	// tries, waiting for q's commands (review s46e). The first look
	// waited already; FinishedNoWait below, under p.mu, sees a Release
	// since, as it sees one that begins just after the first look.
	if !listHeld && q.Finished() {
		return released()
	}
	if ctx := p.context(); ctx != nil && q.Context() != ctx {
		return nil, ErrQueueMismatch
	}
	p.lock()
	if qs := p.queueOf[q]; qs != nil {
		p.mu.Unlock()
		return qs, nil
	}
	if q.FinishedNoWait() { // released since: it may have been forgotten, and is not registered again
		p.mu.Unlock()
		return released()
	}
	if p.life == lifeClosed {
		if forOn {
			p.mu.Unlock()
			return nil, ErrPoolClosed // a closed pool takes no new queue
		}
		// RecordQueue on a buffer still open: its Close still orders the
		// free after q's commands, but the queue keeps no marker, as Close
		// made the others keep none.
	}
	if n := len(p.queueOf); n >= p.forgetAt && !listHeld { // its lockCaches would wait for p.listMu
		p.forgetAt = math.MaxInt // one goroutine forgets at a time
		p.mu.Unlock()
		forgot := p.forgetReleased()
		p.lock()
		// Twice the states it kept: those registered meanwhile count
		// towards the next pass at once (s36b: a pass that ran long
		// while other goroutines made queues set the next one far off).
		p.forgetAt = max(forgetMin, 2*(n-forgot+1))
		if qs := p.queueOf[q]; qs != nil { // another goroutine registered q meanwhile
			p.mu.Unlock()
			return qs, nil
		}
		if p.life == lifeClosed && forOn { // closed meanwhile
			p.mu.Unlock()
			return nil, ErrPoolClosed
		}
	}
	if !listHeld {
		if !p.listMu.TryLock() {
			// A lockCaches waits for each cache's lock in turn: the
			// list holds still for it. Wait outside p.mu (the lock
			// order: p.listMu, caches, p.mu), and look again.
			p.mu.Unlock()
			p.listMu.Lock()
			defer p.listMu.Unlock()
			return p.queueStateListed(q, forOn, name, true)
		}
		defer p.listMu.Unlock()
	}
	qs := newQstate(q, int32(len(p.queues)+1), p.arena)
	qs.closed = p.life == lifeClosed
	p.queues = append(p.queues, qs)
	p.queueOf[q] = qs
	caches := append(*p.caches.Load(), qs) // a new array: readers keep theirs
	p.caches.Store(&caches)
	p.l.s.Queues = append(p.l.s.Queues, QueueStats{Queue: q, Name: name})
	p.mu.Unlock()
	return qs, nil
}

// forgetMin is the fewest queue states at which the pool forgets the
// released queues among them (see forgetReleased).
const forgetMin = 16

// forgetReleased forgets the queues their owners released (but the
// allocator's): a released queue has finished its commands, so no
// request waits for it. Each one's cache goes back to the policy (the
// segments it empties freed), its marker is released, and its state
// leaves the pool, but for its line of Stats.Queues and its id, which
// are never reused: a block that names it in its uses waits for nothing.
// A buffer still open on such a queue goes back to the policy, not to
// the queue's cache, when closed. It costs a look at each queue the pool
// knows. p.mu must not be held; it takes every queue's cache lock, then
// p.mu (lockCaches, which brings every cache's sums in, turn by turn: a
// released cache emptied alone would bring one goroutine's newer turns
// on another queue in before its older ones, review s43a). It returns
// how many queues it forgot.
func (p *Pool) forgetReleased() (forgot int) {
	p.lock()
	states := make([]*qstate, 0, len(p.queueOf))
	for _, qs := range p.queueOf {
		// A Release under way is not waited for (s36a: an On waited
		// for another queue's commands): the next pass forgets it.
		if qs != p.defq && qs.q.FinishedNoWait() {
			states = append(states, qs)
		}
	}
	p.mu.Unlock()
	if len(states) == 0 {
		return 0
	}
	locked := p.lockCaches()
	var gone []*segment
	forgotten := states[:0]
	for _, qs := range states {
		if qs.c.gone || p.queueOf[qs.q] != qs {
			continue // forgotten meanwhile, by another pass
		}
		qs.c.gone = true // before emptyCacheLocked, which then records no use of qs
		gone = append(gone, p.emptyCacheLocked(qs)...)
		p.queues[qs.id-1] = nil
		delete(p.queueOf, qs.q)
		forgotten = append(forgotten, qs)
	}
	if len(forgotten) > 0 {
		// The caches marked gone are these: an earlier pass took its own
		// off the list in its hold of p.mu.
		caches := slices.DeleteFunc(slices.Clone(p.cacheList()), func(c *qstate) bool { return c.c.gone })
		p.caches.Store(&caches)
	}
	p.unlockCaches(locked)
	_ = p.freeSegments(gone) // counted, as a drain's frees are
	for _, qs := range forgotten {
		_ = qs.release() // its marker, seen complete or not: the queue finished
	}
	return len(forgotten)
}

// context returns the context of the pool's allocator, if it (or an
// allocator it wraps) says.
func (p *Pool) context() *cl.Context { return allocator.ContextOf(p.src.outer()) }

// RecordQueue records that the buffer is also used on q, as torch's
// record_stream does: when it is given back, a request on another queue
// waits for the commands enqueued on q before Close too. q must be of the
// pool's context. It may be released before the pool: cl's Release
// finishes its commands, after which nothing waits for q, and a request
// that finds a Release of q under way waits for it to return
// (CommandQueue.Finished). The pool holds q while it calls on it (a
// marker: CommandQueue.Hold), so a Release on another goroutine at any
// time waits for that call rather than racing it. The pool forgets a
// released queue once the queues it knows reach twice what it kept when it
// last looked: it gives the queue's cache back, releases its marker and
// drops its state (a few KiB), keeping only its line of Stats.Queues (with
// the queue's handle, about 170 bytes). So a program that makes a queue
// per task and releases it after does not slow the pool's requests down;
// Stats copies every line (a million queues: some 170 MB a Stats). RecordQueue
// of a released queue does nothing. After Close it returns ErrClosed.
func (b *PooledBuffer) RecordQueue(q *cl.CommandQueue) error {
	if b == nil {
		return fmt.Errorf("mempool: RecordQueue on a nil PooledBuffer: %w", ErrClosed)
	}
	p := b.pool
	b.q.c.mu.Lock() // Close sets the mark under it
	closed := b.closedMark() < 0
	b.q.c.mu.Unlock()
	if closed {
		return ErrClosed // before queueState, which would register q
	}
	qs, err := p.queueState(q, false, "")
	if err != nil || qs == nil { // nil: q was released, its commands finished
		return err
	}
	// A Close may be putting the block in b.q's cache, which reads
	// b.blk.Uses under that lock.
	b.q.c.mu.Lock()
	defer b.q.c.mu.Unlock()
	p.lockUnder(b.q)
	defer p.mu.Unlock()
	if b.closedMark() < 0 {
		return ErrClosed
	}
	if qs == b.q {
		return nil
	}
	for _, u := range b.blk.Uses {
		if u.Queue == qs.id {
			return nil
		}
	}
	b.blk.Uses = append(b.blk.Uses, policy.Use{Queue: qs.id})
	return nil
}

// Queue returns the queue the buffer was allocated for (by Pool.On, or the
// allocator's), or nil if none.
func (b *PooledBuffer) Queue() *cl.CommandQueue { return b.q.q }

// freeHeldOn frees the wholly free segments whose block only qs may
// still use, once every queue cache and qs's blocks in the sanitizer's
// quarantine are given back (another queue's blocks stay there: s45e).
// It returns the allocator's errors, joined, those of the drain's frees
// too (as freeHeldWhile does).
func (p *Pool) freeHeldOn(qs *qstate) error {
	_, err := p.drainOf(qs)
	pred := func(b *block) bool { return b.Only(qs.id) }
	p.lock()
	var segs []*segment
	for s := p.pol.TakeFreeIf(pred); s != nil; s = p.pol.TakeFreeIf(pred) {
		segs = append(segs, s)
	}
	p.forget(segs...)
	p.mu.Unlock()
	return errors.Join(err, p.freeSegments(segs))
}
