package mempool

import (
	"errors"
	"fmt"

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
// the pool does not retain it: keep it until the pool is closed. On a
// closed pool, On of a queue the pool does not know registers nothing:
// its allocator's Allocate returns ErrPoolClosed, as the pool's does.
//
// QueueName names q, for the queue's figures (QueueStats.Name) and the
// queue label of package metrics:
//
//	copies := pool.On(copyQueue, mempool.QueueName("copy"))
func (p *Pool) On(q *cl.CommandQueue, opts ...QueueOption) *QueueAllocator {
	qs, err := p.queueState(q, true)
	if err == nil {
		var c queueConfig
		for _, o := range opts {
			o(&c)
		}
		if c.named {
			p.lock()
			p.l.s.Queues[qs.id-1].Name = c.name
			p.mu.Unlock()
		}
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
// allocator's queue; see Pool.Allocate.
func (a *QueueAllocator) Allocate(size int64) (*PooledBuffer, error) {
	if a.err != nil {
		return nil, a.err
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
	return a.p.freeHeldIf(func(b *block) bool { return b.Only(a.qs.id) })
}

// queueState returns the state of q, made at its first use: for On
// (forOn), only while the pool is open (else ErrPoolClosed, and q is not
// registered).
func (p *Pool) queueState(q *cl.CommandQueue, forOn bool) (*qstate, error) {
	if q == nil {
		return nil, fmt.Errorf("mempool: On(nil): %w", cl.ErrInvalidCommandQueue)
	}
	if ctx := p.context(); ctx != nil && q.Context() != ctx {
		return nil, ErrQueueMismatch
	}
	p.lock()
	defer p.mu.Unlock()
	for _, qs := range p.queues {
		if qs.q == q {
			return qs, nil
		}
	}
	if p.life == lifeClosed {
		if forOn {
			return nil, ErrPoolClosed // a closed pool takes no new queue
		}
		// RecordQueue on a buffer still open: its Close still orders the
		// free after q's commands, but the queue keeps no marker, as Close
		// made the others keep none.
	}
	qs := newQstate(q, int32(len(p.queues)+1), p.arena)
	qs.closed = p.life == lifeClosed
	p.queues = append(p.queues, qs)
	caches := append(*p.caches.Load(), qs) // a new array: readers keep theirs
	p.caches.Store(&caches)
	p.l.s.Queues = append(p.l.s.Queues, QueueStats{Queue: q})
	return qs, nil
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
// (CommandQueue.Finished). A Release that begins during the pool's own
// call on q (a marker) races that call, as any Release during a call on
// the queue does (see package cl). The pool keeps the state of every
// queue it has seen, released or not, until it is closed (a few KiB
// each, and a line of Stats.Queues): a program that makes a queue
// per task should not record each one with a long-lived pool. After
// Close it returns ErrClosed.
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
	qs, err := p.queueState(q, false)
	if err != nil {
		return err
	}
	// A Close may be putting the block in b.q's cache, which reads
	// b.blk.Uses under that lock.
	b.q.c.mu.Lock()
	defer b.q.c.mu.Unlock()
	p.lock()
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

// freeHeldIf frees the wholly free segments whose block pred accepts. It
// returns the allocator's errors, joined, those of the drain's frees too
// (as freeHeldWhile does).
func (p *Pool) freeHeldIf(pred func(*block) bool) error {
	_, err := p.drain()
	p.lock()
	var segs []*segment
	for s := p.pol.TakeFreeIf(pred); s != nil; s = p.pol.TakeFreeIf(pred) {
		segs = append(segs, s)
	}
	p.forget(segs...)
	p.mu.Unlock()
	return errors.Join(err, p.freeSegments(segs))
}
