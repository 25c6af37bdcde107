package allocator

import (
	"fmt"
	"sync/atomic"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/nilptr"
)

// SVMAllocator hands out shared virtual memory (cl.SVM) and takes it back.
// It is the SVM counterpart of Allocator, which is about *cl.Buffer.
// Implementations are safe for concurrent use.
type SVMAllocator interface {
	// Allocate returns a new allocation of size bytes. Size 0 returns nil
	// and no error; a negative size is an error.
	Allocate(size int64) (*cl.SVM, error)
	// Free frees an allocation Allocate returned. Free(nil) does nothing.
	Free(s *cl.SVM) error
}

// SVM allocates shared virtual memory with plain clSVMAlloc
// (cl.Context.SVMAlloc), read-write, at the runtime's default alignment,
// fine-grain or coarse-grain. A failure of clSVMAlloc shows at once, as an
// error matching cl.ErrMemObjectAllocationFailure; a runtime that commits
// memory lazily may still fail later, at first use: see ImmediateSVM.
type SVM struct {
	ctx   *cl.Context
	flags cl.SVMFlags
}

// NewSVM returns an allocator of SVM in ctx: fine-grain (cl.SVMFineGrain)
// if fine, else coarse-grain. A context whose devices do not all support
// that returns an error matching cl.ErrSVMNotSupported; a nil context one
// matching cl.ErrInvalidContext.
func NewSVM(ctx *cl.Context, fine bool) (*SVM, error) { return newSVM("NewSVM", ctx, fine) }

// newSVM is NewSVM for the constructor called call, whose name its errors
// carry.
func newSVM(call string, ctx *cl.Context, fine bool) (*SVM, error) {
	if ctx == nil {
		return nil, fmt.Errorf("allocator: %s: nil context: %w", call, cl.ErrInvalidContext)
	}
	flags, need := cl.SVMReadWrite, cl.SVMCoarseGrainBuffer
	if fine {
		flags, need = flags|cl.SVMFineGrain, need|cl.SVMFineGrainBuffer
	}
	if have := ctx.SVMCapabilities(); have&need != need {
		return nil, fmt.Errorf("allocator: %s: %w: it needs %v, the context's devices support %v", call, cl.ErrSVMNotSupported, need, have)
	}
	return &SVM{ctx: ctx, flags: flags}, nil
}

// Context returns the context the SVM is allocated in.
func (a *SVM) Context() *cl.Context { return a.ctx }

// Flags returns the flags the SVM is allocated with.
func (a *SVM) Flags() cl.SVMFlags { return a.flags }

// Allocate returns a new allocation of size bytes. Size 0 returns nil and
// no error; negative sizes and sizes over the device's max allocation
// return cl.ErrInvalidBufferSize; a failure of the runtime
// cl.ErrMemObjectAllocationFailure.
func (a *SVM) Allocate(size int64) (*cl.SVM, error) {
	if size == 0 {
		return nil, nil
	}
	if err := checkSize(size); err != nil {
		return nil, err
	}
	return a.ctx.SVMAlloc(a.flags, size, 0)
}

// Free frees s. Freeing it twice returns ErrFreed; an SVM of another
// context, which this allocator cannot have handed out, an error matching
// cl.ErrInvalidContext, and s stays allocated. The commands that use s
// must have completed (see cl.SVM.Free).
func (a *SVM) Free(s *cl.SVM) error {
	if s == nil {
		return nil
	}
	if s.Freed() {
		return ErrFreed
	}
	if s.Context() != a.ctx {
		return fmt.Errorf("allocator: SVM.Free: the %d-byte SVM was allocated in another context: %w", s.Size(), cl.ErrInvalidContext)
	}
	freed, err := s.TryFree() // of two racing Frees, one frees s; the other gets ErrFreed
	if !freed && err == nil {
		return ErrFreed
	}
	return err
}

// ImmediateSVM allocates like SVM, then probes each new allocation so that
// a runtime that commits memory lazily must commit it now, and an
// out-of-memory is the allocation's error (the allocation is freed). The
// probe fills the first byte with zero on the device
// (clEnqueueSVMMemFill) and waits for it: a new allocation's contents are
// undefined and no one else holds it yet, so the probe changes no data a
// user could see, and waiting means that errors reported on completion
// surface too, and that the host's first writes to a fine-grain
// allocation cannot race with the probe.
type ImmediateSVM struct {
	SVM
	q *cl.CommandQueue
}

// NewImmediateSVM returns an allocator of SVM in q's context, probed on q;
// see NewSVM for fine and the errors.
func NewImmediateSVM(q *cl.CommandQueue, fine bool) (*ImmediateSVM, error) {
	if q == nil {
		return nil, fmt.Errorf("allocator: NewImmediateSVM: nil queue: %w", cl.ErrInvalidCommandQueue)
	}
	a, err := newSVM("NewImmediateSVM", q.Context(), fine)
	if err != nil {
		return nil, err
	}
	return &ImmediateSVM{SVM: *a, q: q}, nil
}

// Queue returns the queue the probes are enqueued on.
func (a *ImmediateSVM) Queue() *cl.CommandQueue { return a.q }

// Allocate returns a new, probed allocation of size bytes; see SVM.Allocate.
func (a *ImmediateSVM) Allocate(size int64) (*cl.SVM, error) {
	s, err := a.SVM.Allocate(size)
	if s == nil || err != nil {
		return nil, err
	}
	if err := a.probe(s); err != nil {
		_ = a.q.Finish() // the fill may have been enqueued: it must end before the free
		_ = s.Free()
		return nil, fmt.Errorf("allocator: probing a new %d-byte SVM: %w", size, err)
	}
	return s, nil
}

func (a *ImmediateSVM) probe(s *cl.SVM) error {
	ev, err := a.q.EnqueueSVMMemFill(s, []byte{0}, 0, 1)
	if err != nil {
		return err
	}
	defer ev.Release()
	return ev.Wait()
}

// SVMBudget wraps an SVMAllocator and refuses allocations that would take
// the bytes it has live past a budget, as Budget does for buffers. A
// refusal matches cl.ErrMemObjectAllocationFailure, as a device out of
// memory would: CPU runtimes such as POCL never report one for SVM. It
// also matches ErrOutOfMemory, as a Budget's does.
type SVMBudget struct {
	inner  SVMAllocator
	budget int64
	live   atomic.Int64
	allocs books // the allocations handed out and not freed
}

// NewSVMBudget wraps a with a budget of the given bytes.
func NewSVMBudget(a SVMAllocator, budget int64) *SVMBudget {
	return &SVMBudget{inner: a, budget: budget}
}

// Allocate reserves size bytes of the budget and allocates from the
// wrapped allocator.
func (b *SVMBudget) Allocate(size int64) (*cl.SVM, error) {
	if nilptr.Is(b.inner) {
		return nil, errNoInner("SVMBudget")
	}
	if size <= 0 {
		return b.inner.Allocate(size)
	}
	if err := reserve(&b.live, b.budget, size, "clSVMAlloc", "allocator.SVMBudget"); err != nil {
		return nil, err
	}
	s, err, pv := allocateSVMInner(b.inner, size)
	if err != nil || pv != nil {
		b.live.Add(-size)
		repanic(pv)
		return nil, err
	}
	b.allocs.add(s)
	return s, nil
}

// Free frees s and returns its bytes to the budget. An allocation b did
// not hand out, or has freed, is refused with an error matching ErrFreed,
// and changes nothing; of racing Frees of one allocation, one frees it,
// and one made while another is under way is refused with ErrBeingFreed. A wrapped
// Free that fails (or panics, or ends its goroutine) leaves s b's for a
// retry, unless s was freed all the same.
func (b *SVMBudget) Free(s *cl.SVM) error {
	if s == nil {
		return nil
	}
	if err := b.allocs.claim(s, "SVMBudget", s.Size()); err != nil {
		return err
	}
	ended := false
	defer func() {
		if !ended { // the wrapped Free ended its goroutine (runtime.Goexit)
			b.end(s, s.Freed())
		}
	}()
	err, pv := freeSVMInner(b.inner, s)
	ended = true
	b.end(s, (err == nil && pv == nil) || s.Freed())
	repanic(pv)
	return err
}

// end ends a Free's claim of s: freed (or by a Free that failed on the
// way), or kept for a retry.
func (b *SVMBudget) end(s *cl.SVM, freed bool) {
	if !freed {
		b.allocs.keep(s)
		return
	}
	b.allocs.drop(s)
	b.live.Add(-s.Size())
}

// Live returns the bytes allocated and not yet freed.
func (b *SVMBudget) Live() int64 { return b.live.Load() }

// Limit returns the budget.
func (b *SVMBudget) Limit() int64 { return b.budget }

// Unwrap returns the wrapped allocator.
func (b *SVMBudget) Unwrap() SVMAllocator { return b.inner }

// allocateSVMInner is allocateInner for an SVM allocator.
func allocateSVMInner(a SVMAllocator, size int64) (s *cl.SVM, err error, pv any) {
	defer func() {
		if v := recover(); v != nil {
			pv = v
		}
	}()
	s, err = a.Allocate(size)
	return s, err, nil
}

// freeSVMInner is freeInner for an SVM allocator.
func freeSVMInner(a SVMAllocator, s *cl.SVM) (err error, pv any) {
	defer func() {
		if v := recover(); v != nil {
			pv = v
		}
	}()
	return a.Free(s), nil
}
