package mempool

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool/internal/policy"
)

// This file orders reuse across command queues. A block given back
// remembers the queues whose commands may still use it (policy.Use); a
// request on another queue (or on an out-of-order one) waits for them on
// the device: a marker on each old queue, enqueued at the handover rather
// than at Close so that a Close costs no OpenCL call, and one barrier in
// the new queue that waits on every such marker (not a barrier per marker:
// POCL's out-of-order queues honour only the last of two barriers in a
// row: cl.CommandQueue.EnqueueBarrier keeps the one before there). A
// marker covers every block given back on its queue before it,
// so one serves many handovers, and once it is seen complete (polled,
// never waited for) a handover needs no barrier for it at all.

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
	Name  string // given by On's QueueName; "" if none
	// Requests made on the queue, those served by a held block, and those
	// whose block was last used on another queue (or, out of order, on
	// this one). For those, the other queues' markers found complete
	// already, and those waited for on the device (a barrier).
	Requests, Hits, Handovers, Ready, Barriers int64
	// Markers enqueued on the queue, and host waits for one of them (for
	// requests on no queue), or for the queue itself (clFinish, in a pool
	// over pinned memory: see the package doc).
	Markers, HostWaits int64
	// Blocks held in the queue's own cache (see the package doc).
	Cached int64
}

// handover is what a block taken for queue r needs before r may use it:
// the uses to wait for. It is nil, and costs nothing, when only r (in
// order) may still use the block, unless host: in a pool over pinned
// memory, the host touches the block's bytes before any queue does, so
// it waits for every use (see Pool.handOver).
func handover(b *block, r *qstate, host bool) []policy.Use {
	if len(b.Uses) == 0 {
		return nil
	}
	if !host && r != nil && !r.ooo && len(b.Uses) == 1 && b.Uses[0].Queue == r.id {
		b.Uses = b.Uses[:0]
		return nil
	}
	uses := append([]policy.Use(nil), b.Uses...)
	b.Uses = b.Uses[:0]
	return uses
}

// order makes r wait, on the device, for the commands of uses (from
// handover); with r nil (a request on no queue), the host waits. It
// returns what each fence did, for the ledger: one fenced per queue
// waited for (the latest of its uses). Called without p.mu.
//
// A handover that waits for the markers of several queues (several old
// queues, or an out-of-order r's own and another's) waits for all of them
// in one barrier: POCL's out-of-order queues honour only the last of two
// barriers enqueued one after the other, so a barrier per marker let a
// command after them overwrite a block that an earlier marker's queue
// still read (issue 21). Each qstate's marker may be replaced and
// released by another goroutine once its lock is dropped, so those
// markers are retained (a handle of our own) until the barrier is
// enqueued. A handover that waits for one queue enqueues its barrier
// under that queue's lock, with no retain. With holdR, r's queue is held
// (cl's Hold) around each barrier enqueued there, for a caller that does
// not own r (the sanitizer, for a buffer closed on another goroutine); if
// r was released, the error wraps errQueueReleased. The pool holds one
// queue at a time, and while it holds one waits for no hold, nor for a
// lock whose holder may wait for one (the sanitizer's s.mu, whose holders
// only try holds), so that Releases waiting for holds never wait on each
// other.
func (p *Pool) order(uses []policy.Use, r *qstate, holdR bool) ([]fenced, error) {
	uses = latestUses(uses, r)
	fs := make([]fenced, 0, len(uses))
	if len(uses) == 0 {
		return fs, nil
	}
	// With holdR, r is held with no marker's lock held (s36c: a wait for
	// r's Release under one stalled every user of that marker).
	if r != nil && len(uses) == 1 && !holdR {
		f := fenced{from: p.queueByID(uses[0].Queue)}
		if f.from == nil {
			return fs, nil
		}
		var err error
		f.ready, f.marked, err = f.from.fence(uses[0].Seq, r)
		if err != nil {
			f.failed = true // its marker still counts
			return append(fs, f), err
		}
		return append(fs, f), nil
	}
	var errs []error
	var wait []*cl.Event // retained markers not seen complete, for fs[waitAt[i]]
	var waitAt []int
	for _, u := range uses {
		f := fenced{from: p.queueByID(u.Queue)}
		if f.from == nil {
			continue
		}
		m, marked, err := f.from.retainMarker(u.Seq)
		f.marked = marked
		if err != nil {
			errs = append(errs, err)
			continue
		}
		f.ready = m == nil
		if m != nil {
			wait = append(wait, m)
			waitAt = append(waitAt, len(fs))
		}
		fs = append(fs, f)
	}
	failed := make([]bool, len(fs)) // fences whose wait failed: counted for their markers only
	if r != nil && len(wait) > 0 {
		if err := barrier(r, holdR, wait...); err != nil {
			errs = append(errs, err)
			for _, i := range waitAt {
				failed[i] = true
			}
		}
	}
	for j, m := range wait {
		if r == nil {
			if err := m.Wait(); err != nil {
				errs = append(errs, fmt.Errorf("mempool: ordering after the commands that may use a block: %w", err))
				failed[waitAt[j]] = true
			}
		}
		_ = m.Release() // our handle; the queue keeps its own
	}
	for i := range fs {
		fs[i].failed = failed[i] // its markers still count (s36d)
	}
	return fs, errors.Join(errs...)
}

// finish waits on the host for every command enqueued so far on the
// queues of uses (clFinish, each queue held around it): the handover of a
// pool over pinned memory, whose next user is the host. It waits for more
// than order would (commands enqueued after the block was given back
// too), never less, and costs less where it matters: an idle queue
// answers clFinish at once, where a marker's wait takes the runtime's
// round trip (BENCHMARKS.md, session 38). Each queue waited for has a
// fenced, not ready.
func (p *Pool) finish(uses []policy.Use) ([]fenced, error) {
	var fs []fenced
	var errs []error
	for _, u := range latestUses(uses, nil) {
		qs := p.queueByID(u.Queue)
		if qs == nil {
			continue // forgotten: released, and its commands finished
		}
		var err error
		switch {
		case qs.q.Hold():
			err = qs.q.Finish()
			qs.q.Unhold()
		case qs.q.Finished():
			continue // released: its commands finished
		default: // released, and its Release's wait failed
			err = errQueueReleased
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("mempool: waiting for the commands that may use a pinned block: %w", err))
		}
		fs = append(fs, fenced{from: qs, failed: err != nil, host: true})
	}
	return fs, errors.Join(errs...)
}

// latestUses returns the uses r must wait for: one per queue, the latest
// (a marker that covers it covers the earlier ones: a segment's blocks can
// each have a use of one queue), without r's own when r is in order (its
// commands come before, in order). It returns uses itself when that is
// all of them, else a new slice: the caller may put uses back on the
// block.
func latestUses(uses []policy.Use, r *qstate) []policy.Use {
	keep := func(i int) bool {
		u := uses[i]
		if r != nil && !r.ooo && u.Queue == r.id {
			return false
		}
		for _, v := range uses[:i] {
			if v.Queue == u.Queue {
				return false
			}
		}
		return true
	}
	i := 0
	for i < len(uses) && keep(i) {
		i++
	}
	if i == len(uses) {
		return uses
	}
	out := append(make([]policy.Use, 0, len(uses)), uses[:i]...)
outer:
	for _, u := range uses[i:] {
		if r != nil && !r.ooo && u.Queue == r.id {
			continue
		}
		for j := range out {
			if out[j].Queue == u.Queue {
				out[j].Seq = max(out[j].Seq, u.Seq)
				continue outer
			}
		}
		out = append(out, u)
	}
	return out
}

// fenced is what one fence did: whether the marker of queue from was
// complete already (else r waited for it: a barrier, or the host), and
// the markers it enqueued there. A handover that waits for several
// queues has one fenced for each but enqueues one barrier for them all:
// the ledger's Barriers count the markers waited for with a barrier.
type fenced struct {
	from   *qstate
	ready  bool
	marked int64
	failed bool // the wait could not be enqueued: only its markers count
	host   bool // the host waited for the whole queue (finish)
}

// queueByID returns the state of queue id, or nil if the pool forgot it
// (released: nothing is left to wait for).
func (p *Pool) queueByID(id int32) *qstate {
	p.lock()
	defer p.mu.Unlock()
	return p.queues[id-1]
}

// fence makes r (not nil) wait for the commands enqueued on qs before a
// block was given back when qs had started seq markers: it reports ready
// if a marker started later is complete already; else it enqueues a
// barrier on r on such a marker, under qs's lock, enqueuing the marker
// first if there is none (marked 1). For a handover that waits for one
// queue only, r not to be held: see order.
func (qs *qstate) fence(seq uint64, r *qstate) (ready bool, marked int64, err error) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	defer qs.releaseIfClosed() // a handover racing the pool's Close keeps no marker
	if marked, err = qs.mark(seq); err != nil {
		return false, marked, err
	}
	if qs.done {
		return true, marked, nil
	}
	return false, marked, barrier(r, false, qs.marker)
}

// errQueueReleased is wrapped by order's error, with holdR, when the queue
// to order was released.
var errQueueReleased = errors.New("mempool: the queue was released")

// barrier enqueues on r a barrier that waits for events, holding r's
// queue around it with hold (see order).
func barrier(r *qstate, hold bool, events ...*cl.Event) error {
	if hold {
		if !r.q.Hold() {
			return fmt.Errorf("mempool: ordering after the commands that may use a block: %w", errQueueReleased)
		}
		defer r.q.Unhold()
	}
	if err := r.q.EnqueueBarrier(events...); err != nil {
		return fmt.Errorf("mempool: ordering after the commands that may use a block: %w", err)
	}
	return nil
}

// retainMarker returns a handle of its own (the caller releases it) of a
// marker of qs that covers the commands enqueued before a block was given
// back when qs had started seq markers, enqueuing the marker first if
// there is none (marked 1); it returns nil if that marker is complete
// already.
func (qs *qstate) retainMarker(seq uint64) (m *cl.Event, marked int64, err error) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	defer qs.releaseIfClosed() // a handover racing the pool's Close keeps no marker
	if marked, err = qs.mark(seq); err != nil || qs.done {
		return nil, marked, err
	}
	if m, err = qs.marker.Retain(); err != nil {
		return nil, marked, fmt.Errorf("mempool: ordering after the commands that may use a block: %w", err)
	}
	return m, marked, nil
}

// mark makes qs.marker a marker that covers the commands enqueued
// on qs before a block was given back when qs had started seq markers,
// enqueuing (and flushing) one if the newest does not (marked 1), and
// sets qs.done if it is seen complete. A queue its owner released (an
// array's, which RecordQueue noted) has finished its commands: qs.done,
// with no marker to enqueue (s35b: every later request for the block
// failed). The queue is held (cl's Hold) while the pool calls on it, so
// that its owner's Release, which may come at any time (a queue per
// task), waits for those calls rather than racing them (s36a: requests
// failed on a queue released under them, and POCL aborted). qs.mu must
// be held.
func (qs *qstate) mark(seq uint64) (marked int64, err error) {
	if !qs.q.Hold() {
		if qs.q.Finished() {
			qs.done = true
			return 0, nil
		}
		return 0, fmt.Errorf("mempool: ordering after the commands that may use a block: its queue was released, and did not finish them: %w", cl.ErrInvalidCommandQueue)
	}
	defer qs.q.Unhold()
	if qs.marker == nil || qs.markerSeq <= seq {
		n := qs.seq.Add(1) // before the enqueue: see seq
		m, err := qs.q.EnqueueMarker()
		if err != nil {
			return 0, fmt.Errorf("mempool: ordering after the commands that may use a block: %w", err)
		}
		// Commands of other queues may wait on the marker only once
		// its queue has been flushed.
		if err := qs.q.Flush(); err != nil {
			_ = m.Release()
			return 0, fmt.Errorf("mempool: ordering after the commands that may use a block: %w", err)
		}
		if qs.marker != nil {
			_ = qs.marker.Release()
		}
		qs.marker, qs.markerSeq, qs.done, marked = m, n, false, 1
	}
	if !qs.done {
		qs.done, _ = qs.marker.Done()
	}
	return marked, nil
}

// release releases the queue's marker, at the pool's Close; a fence
// after it releases its own.
func (qs *qstate) release() error {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	qs.closed = true
	return qs.releaseIfClosed()
}

func (qs *qstate) releaseIfClosed() error {
	if !qs.closed || qs.marker == nil {
		return nil
	}
	err := qs.marker.Release()
	qs.marker = nil
	return err
}
