package mempool

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool/internal/policy"
)

// This file orders reuse across command queues. A block given back
// remembers the queues whose commands may still use it (policy.Use); a
// request on another queue (or on an out-of-order one) waits for them on
// the device: a marker on the old queue, enqueued at the handover rather
// than at Close so that a Close costs no OpenCL call, and a barrier on
// that marker in the new queue. A marker covers every block given back on
// its queue before it, so one serves many handovers, and once it is seen
// complete (polled, never waited for) handovers need no barrier at all.

// ErrQueueMismatch is returned for a queue that is not of the pool's
// context.
var ErrQueueMismatch = errors.New("mempool: the queue is not of the pool's context")

// qstate is what the pool knows of one command queue.
type qstate struct {
	q   *cl.CommandQueue
	id  int32 // its index in p.queues, plus 1
	ooo bool  // out of order: even its own reuse goes through a marker

	// seq counts the markers started on q. A block given back reads it;
	// a marker started later (seq higher than read) covers the block.
	seq atomic.Uint64

	mu        sync.Mutex // protects the fields below; never held with p.mu
	marker    *cl.Event  // the newest marker, nil if none
	markerSeq uint64     // its number
	done      bool       // it has been seen complete
	closed    bool       // the pool is closed: keep no marker

	c qcache // the queue's cache of blocks given back on it
}

// QueueStats are the figures of one queue, in Stats.Queues.
type QueueStats struct {
	Queue *cl.CommandQueue
	// Requests made on the queue, those served by a held block, and those
	// whose block was last used on another queue (or, out of order, on
	// this one). For those, the other queues' markers found complete
	// already, and those waited for on the device (a barrier).
	Requests, Hits, Handovers, Ready, Barriers int64
	// Markers enqueued on the queue, and host waits for one of them (for
	// requests on no queue).
	Markers, HostWaits int64
	// Blocks held in the queue's own cache (see the package doc).
	Cached int64
}

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
// the pool does not retain it: keep it until the pool is closed.
func (p *Pool) On(q *cl.CommandQueue) *QueueAllocator {
	qs, err := p.queueState(q)
	return &QueueAllocator{p: p, qs: qs, err: err}
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

// queueState returns the state of q, made at its first use.
func (p *Pool) queueState(q *cl.CommandQueue) (*qstate, error) {
	if q == nil {
		return nil, fmt.Errorf("mempool: On(nil): %w", cl.ErrInvalidCommandQueue)
	}
	if ctx := p.context(); ctx != nil && q.Context() != ctx {
		return nil, ErrQueueMismatch
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, qs := range p.queues {
		if qs.q == q {
			return qs, nil
		}
	}
	qs := &qstate{q: q, id: int32(len(p.queues) + 1), ooo: q.Properties()&cl.QueueOutOfOrder != 0}
	// The cache's array has its full size at once: 128 bytes, a size
	// class whose objects fill two cache lines of their own, so that no
	// other queue's cache writes its lines (a small array grown by append
	// can share a line with another queue's).
	qs.c.blocks = make([]*block, 0, cacheBlocks)
	p.queues = append(p.queues, qs)
	p.l.s.Queues = append(p.l.s.Queues, QueueStats{Queue: q})
	return qs, nil
}

// context returns the context of the pool's allocator, if it (or an
// allocator it wraps) says.
func (p *Pool) context() *cl.Context { return allocator.ContextOf(p.src.outer()) }

// handover is what a block taken for queue r needs before r may use it:
// the uses to wait for. It is nil, and costs nothing, when only r (in
// order) may still use the block.
func handover(b *block, r *qstate) []policy.Use {
	if len(b.Uses) == 0 {
		return nil
	}
	if r != nil && !r.ooo && len(b.Uses) == 1 && b.Uses[0].Queue == r.id {
		b.Uses = b.Uses[:0]
		return nil
	}
	uses := append([]policy.Use(nil), b.Uses...)
	b.Uses = b.Uses[:0]
	return uses
}

// order makes r wait, on the device, for the commands of uses (from
// handover); with r nil (a request on no queue), the host waits. It
// returns what each fence did, for the ledger. Called without p.mu.
func (p *Pool) order(uses []policy.Use, r *qstate) ([]fenced, error) {
	fs := make([]fenced, 0, len(uses))
	var errs []error
	for _, u := range uses {
		if r != nil && !r.ooo && u.Queue == r.id {
			continue // r's own commands come before, in order
		}
		f := fenced{from: p.queueByID(u.Queue)}
		var err error
		f.ready, f.marked, err = f.from.fence(u.Seq, r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fs = append(fs, f)
	}
	return fs, errors.Join(errs...)
}

// fenced is what one fence did: whether the marker of queue from was
// complete already, and the markers it enqueued there.
type fenced struct {
	from   *qstate
	ready  bool
	marked int64
}

func (p *Pool) queueByID(id int32) *qstate {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.queues[id-1]
}

// fence makes r wait for the commands enqueued on qs before a block was
// given back when qs had started seq markers: it reports ready if a marker
// started later is complete already; else it enqueues a barrier on r (or
// waits on the host, r nil) on such a marker, enqueuing one first if
// there is none (marked 1).
func (qs *qstate) fence(seq uint64, r *qstate) (ready bool, marked int64, err error) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	defer qs.releaseIfClosedLocked() // a handover racing the pool's Close keeps no marker
	if qs.marker == nil || qs.markerSeq <= seq {
		n := qs.seq.Add(1) // before the enqueue: see seq
		m, err := qs.q.EnqueueMarker()
		if err != nil {
			return false, 0, fmt.Errorf("mempool: ordering after the commands that may use a block: %w", err)
		}
		// Commands of other queues may wait on the marker only once
		// its queue has been flushed.
		if err := qs.q.Flush(); err != nil {
			_ = m.Release()
			return false, 0, fmt.Errorf("mempool: ordering after the commands that may use a block: %w", err)
		}
		if qs.marker != nil {
			_ = qs.marker.Release()
		}
		qs.marker, qs.markerSeq, qs.done, marked = m, n, false, 1
	}
	if !qs.done {
		qs.done, _ = qs.marker.Done()
	}
	if qs.done {
		return true, marked, nil
	}
	if r == nil {
		err = qs.marker.Wait()
	} else {
		err = r.q.EnqueueBarrier(qs.marker)
	}
	if err != nil {
		return false, marked, fmt.Errorf("mempool: ordering after the commands that may use a block: %w", err)
	}
	return false, marked, nil
}

// release releases the queue's marker, at the pool's Close; a fence
// after it releases its own.
func (qs *qstate) release() error {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	qs.closed = true
	return qs.releaseIfClosedLocked()
}

func (qs *qstate) releaseIfClosedLocked() error {
	if !qs.closed || qs.marker == nil {
		return nil
	}
	err := qs.marker.Release()
	qs.marker = nil
	return err
}

// idOrNone returns the queue's id, 0 for none.
func (qs *qstate) idOrNone() int32 {
	if qs == nil {
		return 0
	}
	return qs.id
}

// recordUsesLocked records, on a block given back, that its queue r (nil:
// none) and the queues RecordQueue added (with no count yet) may still
// use it, each with its count of markers now. p.mu must be held.
func (p *Pool) recordUsesLocked(b *block, r *qstate) {
	for i := range b.Uses {
		b.Uses[i].Seq = p.queues[b.Uses[i].Queue-1].seq.Load()
	}
	if r != nil {
		b.Uses = append(b.Uses, policy.Use{Queue: r.id, Seq: r.seq.Load()})
	}
}

// RecordQueue records that the buffer is also used on q, as torch's
// record_stream does: when it is given back, a request on another queue
// waits for the commands enqueued on q before Close too. q must be of the
// pool's context. After Close it returns ErrClosed.
func (b *PooledBuffer) RecordQueue(q *cl.CommandQueue) error {
	if b == nil {
		return fmt.Errorf("mempool: RecordQueue on a nil PooledBuffer: %w", ErrClosed)
	}
	p := b.pool
	qs, err := p.queueState(q)
	if err != nil {
		return err
	}
	if b.q != nil {
		// A Close may be putting the block in b.q's cache, which reads
		// b.blk.Uses under that lock.
		b.q.c.mu.Lock()
		defer b.q.c.mu.Unlock()
	}
	p.mu.Lock()
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
func (b *PooledBuffer) Queue() *cl.CommandQueue {
	if b.q == nil {
		return nil
	}
	return b.q.q
}

// freeHeldIf frees the wholly free segments whose block pred accepts.
func (p *Pool) freeHeldIf(pred func(*block) bool) error {
	p.drainCaches()
	p.mu.Lock()
	var segs []*segment
	for s := p.pol.TakeFreeIf(pred); s != nil; s = p.pol.TakeFreeIf(pred) {
		segs = append(segs, s)
	}
	stale := p.forgetLocked(segs...)
	p.mu.Unlock()
	return p.freeSegments(segs, stale)
}
