package allocator

import (
	"errors"
	"fmt"

	"github.com/clpool/clpool/cl"
)

// Allocator hands out device buffers and takes them back.
// Implementations are safe for concurrent use.
type Allocator interface {
	// Allocate returns a new buffer of size bytes: never one it handed
	// out before (Budget and Counting keep books by the *cl.Buffer, and a
	// buffer handed out again before its Free returned would take the
	// place of the one being freed). Size 0 returns a nil buffer and no
	// error; a negative size is an error.
	Allocate(size int64) (*cl.Buffer, error)
	// Free releases a buffer Allocate returned. Free(nil) does nothing.
	Free(buf *cl.Buffer) error
}

// ErrFreed is returned by Free for a buffer that was already freed.
var ErrFreed = errors.New("allocator: buffer already freed")

// ErrBeingFreed is the error of a Free by Budget, SVMBudget or Counting of
// a buffer while another Free of it is under way (on another goroutine, or
// the wrapped allocator's Free calling Free of it again): that one may yet
// fail and leave the buffer the wrapper's, for a retry, so this one is not
// ErrFreed. Counting counts it a bad free once the other frees the buffer.
var ErrBeingFreed = errors.New("allocator: buffer being freed by another call")

// ErrOutOfMemory matches every out-of-memory refusal of clpool, whichever
// package refused: match it with errors.Is. Those are
//
//   - a pool's (mempool's) refusal, a *mempool.OutOfMemoryError: its
//     limit refused the request, or the device still refused it after the
//     pool had freed what it held (its ladder), or the request is larger
//     than the device's largest buffer; mempool.ErrOutOfMemory is this
//     same value;
//   - a Budget's or an SVMBudget's refusal, which also matches
//     cl.ErrMemObjectAllocationFailure and unwraps to a *cl.CallError;
//   - an array (package array) whose bytes exceed the device's largest
//     buffer (MaxMemAllocSize) or int64, which also matches
//     cl.ErrInvalidBufferSize.
//
// The raw allocators (Deferred, Immediate, Pinned, SVM, ImmediateSVM)
// return the runtime's error as it is, a *cl.CallError whose Status says
// what failed (cl.Status.IsOutOfMemory tells an exhausted device), which
// does not match ErrOutOfMemory: a pool above may still cure it by
// freeing what it holds, and refuses with an OutOfMemoryError only if
// that fails. Errors that are not about memory, a negative size say, never
// match it.
var ErrOutOfMemory = errors.New("clpool: out of memory")

// checkFlags refuses the flags a pooled buffer cannot have.
func checkFlags(flags cl.MemFlags) error {
	if flags&(cl.MemUseHostPtr|cl.MemCopyHostPtr) != 0 {
		return fmt.Errorf("allocator: flags %v: a pooled buffer cannot use or copy host memory: %w", flags, cl.ErrInvalidValue)
	}
	if err := flags.Validate(); err != nil {
		return fmt.Errorf("allocator: %w", err)
	}
	return nil
}

// checkSize refuses negative sizes with an error matching cl.ErrInvalidBufferSize.
func checkSize(size int64) error {
	if size < 0 {
		return fmt.Errorf("allocator: Allocate(%d): negative size: %w", size, cl.ErrInvalidBufferSize)
	}
	return nil
}

// Deferred allocates with plain clCreateBuffer. Runtimes may delay the real
// allocation to the buffer's first use; see Immediate.
type Deferred struct {
	ctx   *cl.Context
	flags cl.MemFlags
}

// NewDeferred returns an allocator of buffers with the given flags in ctx.
func NewDeferred(ctx *cl.Context, flags cl.MemFlags) (*Deferred, error) {
	if ctx == nil {
		return nil, fmt.Errorf("allocator: nil context: %w", cl.ErrInvalidContext)
	}
	if err := checkFlags(flags); err != nil {
		return nil, err
	}
	return &Deferred{ctx: ctx, flags: flags}, nil
}

// Context returns the context the buffers are made in.
func (d *Deferred) Context() *cl.Context { return d.ctx }

// Flags returns the flags the buffers are made with.
func (d *Deferred) Flags() cl.MemFlags { return d.flags }

// Allocate returns a new buffer of size bytes; see the package doc for 0.
// Sizes over the device's max allocation return cl.ErrInvalidBufferSize.
func (d *Deferred) Allocate(size int64) (*cl.Buffer, error) {
	if size == 0 {
		return nil, nil
	}
	if err := checkSize(size); err != nil {
		return nil, err
	}
	return d.ctx.CreateBuffer(d.flags, size)
}

// Free releases buf. Freeing a buffer twice returns ErrFreed.
func (d *Deferred) Free(buf *cl.Buffer) error {
	if buf == nil {
		return nil
	}
	if buf.Released() {
		return ErrFreed
	}
	if buf.Context() != d.ctx {
		return fmt.Errorf("allocator: Free: the %d-byte buffer was made in another context: %w", buf.Size(), cl.ErrInvalidContext)
	}
	return releaseOnce(buf)
}

// releaseOnce releases buf, or returns ErrFreed if another call did:
// of two racing Frees of one buffer, one releases it.
func releaseOnce(buf *cl.Buffer) error {
	released, err := buf.TryRelease()
	if !released && err == nil {
		return ErrFreed
	}
	return err
}

// Immediate allocates like Deferred, then probes each new buffer by
// migrating it to its queue's device with undefined content
// (clEnqueueMigrateMemObjects with cl.MigrateContentUndefined, as
// PyOpenCL's ImmediateAllocator does), which makes the runtime commit the
// memory now and writes nothing: data written to the buffer through
// another queue, before or after the probe, stays as written. The probe's
// error is the allocation's error, and the buffer is released. The probe
// is not waited for: errors an asynchronous runtime reports only on
// completion still surface later.
type Immediate struct {
	Deferred
	q *cl.CommandQueue
}

// NewImmediate returns an allocator of buffers with the given flags in q's
// context, probed on q.
func NewImmediate(q *cl.CommandQueue, flags cl.MemFlags) (*Immediate, error) {
	if q == nil {
		return nil, fmt.Errorf("allocator: nil queue: %w", cl.ErrInvalidCommandQueue)
	}
	d, err := NewDeferred(q.Context(), flags)
	if err != nil {
		return nil, err
	}
	return &Immediate{Deferred: *d, q: q}, nil
}

// Queue returns the queue the probes are enqueued on.
func (a *Immediate) Queue() *cl.CommandQueue { return a.q }

// Allocate returns a new, probed buffer of size bytes; see the package doc
// for 0.
func (a *Immediate) Allocate(size int64) (*cl.Buffer, error) {
	buf, err := a.Deferred.Allocate(size)
	if buf == nil || err != nil {
		return nil, err
	}
	if _, err := a.q.EnqueueMigrate([]*cl.Buffer{buf}, cl.MigrateContentUndefined, false); err != nil {
		_ = buf.Release()
		return nil, fmt.Errorf("allocator: probing a new %d-byte buffer: %w", size, err)
	}
	return buf, nil
}
