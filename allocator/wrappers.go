package allocator

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/nilptr"
)

// Budget wraps an Allocator and refuses allocations that would take the
// bytes it has live past a budget. A refusal matches
// cl.ErrMemObjectAllocationFailure, as a device out of memory would, so a
// pool above reacts to it as to a real out-of-memory; it also matches
// ErrOutOfMemory, and unwraps to a *cl.CallError. Use it to give a
// program a share of a device, and to test out-of-memory handling on CPU
// runtimes, which never report it.
type Budget struct {
	inner  Allocator
	budget int64
	live   atomic.Int64
	bufs   books // the buffers handed out and not freed
}

// NewBudget wraps a with a budget of the given bytes.
func NewBudget(a Allocator, budget int64) *Budget {
	return &Budget{inner: a, budget: budget}
}

// Allocate reserves size bytes of the budget and allocates from the
// wrapped allocator. The check cannot overflow: a request near
// math.MaxInt64 is refused like any other that does not fit. If the
// wrapped Allocate fails or panics, the bytes go back to the budget (and
// the panic goes on).
func (b *Budget) Allocate(size int64) (*cl.Buffer, error) {
	if nilptr.Is(b.inner) {
		return nil, errNoInner("Budget")
	}
	if size <= 0 {
		return b.inner.Allocate(size)
	}
	if err := b.reserve(size); err != nil {
		return nil, err
	}
	buf, err, pv := allocateInner(b.inner, size)
	if err != nil || pv != nil {
		b.live.Add(-size)
		repanic(pv)
		return nil, err
	}
	b.bufs.add(buf)
	own(buf, b)
	return buf, nil
}

// errNoInner is the error of a wrapper made over a nil allocator.
func errNoInner(wrapper string) error {
	return fmt.Errorf("allocator: %s wraps a nil allocator: %w", wrapper, cl.ErrInvalidValue)
}

// books are a budget wrapper's objects handed out and not freed (key ->
// whether a Free of it is under way).
type books struct{ m sync.Map }

// add enters key, handed out.
func (k *books) add(key any) { k.m.Store(key, false) }

// claim marks key, of size bytes, as being freed by the caller, who ends
// the claim with keep or drop; if it cannot, it returns the error of the
// wrapper's Free: ErrBeingFreed, or ErrFreed if key is not in the books.
func (k *books) claim(key any, wrapper string, size int64) error {
	if k.m.CompareAndSwap(key, false, true) {
		return nil
	}
	if being, ok := k.m.Load(key); ok && being == true {
		return errBeingFreed(wrapper, size)
	}
	return errNotHere(wrapper, size)
}

// keep ends a claim whose Free failed: key stays, for a retry.
func (k *books) keep(key any) { k.m.Store(key, false) }

// drop ends a claim whose Free freed key.
func (k *books) drop(key any) { k.m.Delete(key) }

// errBeingFreed is the error of a wrapper's Free of a buffer while
// another Free of it is under way.
func errBeingFreed(wrapper string, size int64) error {
	return fmt.Errorf("allocator: %s.Free of a %d-byte buffer: %w", wrapper, size, ErrBeingFreed)
}

// errNotHere is the error of a Free of a buffer the wrapper did not hand
// out, or has freed.
func errNotHere(wrapper string, size int64) error {
	return fmt.Errorf("allocator: %s.Free: the %d-byte buffer is not one it handed out, or was freed: %w", wrapper, size, ErrFreed)
}

// reserve takes size bytes of b's budget; see the function reserve.
func (b *Budget) reserve(size int64) error {
	return reserve(&b.live, b.budget, size, "clCreateBuffer", "allocator.Budget")
}

// reserve adds size (> 0) to the live bytes if they stay within the
// budget, else returns the out-of-memory error of call, as the wrapper who
// refused. It compares size with the room left rather than live+size with
// the budget, a sum that can wrap past math.MaxInt64; and it adds with a
// compare-and-swap, so that concurrent requests never take the count past
// the budget, even for a moment.
func reserve(liveBytes *atomic.Int64, budget, size int64, call, who string) error {
	for {
		live := liveBytes.Load()
		if room := budget - max(live, 0); size > room {
			return &refusal{&cl.CallError{Call: call, Status: cl.ErrMemObjectAllocationFailure,
				Detail: fmt.Sprintf("%s: %d bytes would exceed the budget of %d (%d in use)", who, size, budget, live)}}
		}
		if liveBytes.CompareAndSwap(live, live+size) {
			return nil
		}
	}
}

// refusal is the error of a Budget or an SVMBudget refusing a request:
// the *cl.CallError of a device out of memory, with its message, which it
// unwraps to (and so to cl.ErrMemObjectAllocationFailure), and a match for
// ErrOutOfMemory.
type refusal struct{ err *cl.CallError }

func (r *refusal) Error() string        { return r.err.Error() }
func (r *refusal) Unwrap() error        { return r.err }
func (r *refusal) Is(target error) bool { return target == ErrOutOfMemory }

// Free frees buf and returns its bytes to the budget. A buffer b did not
// hand out, or has freed, is refused with an error matching ErrFreed, and
// changes nothing; of racing Frees of one buffer, one frees it, and one
// made while another is under way is refused with ErrBeingFreed. If the
// wrapped allocator's Free fails, buf stays b's for a retry, unless
// it was released all the same: then its bytes go back, and the error is
// returned. A Free that panics (or ends its goroutine) is a failure too:
// b's books are set so, and the panic goes on.
func (b *Budget) Free(buf *cl.Buffer) error {
	if buf == nil {
		return nil
	}
	if err := b.bufs.claim(buf, "Budget", buf.Size()); err != nil {
		return err
	}
	ended := false
	defer func() {
		if !ended { // the wrapped Free ended its goroutine (runtime.Goexit)
			b.end(buf, buf.Released())
		}
	}()
	err, pv := freeInner(b.inner, buf)
	ended = true
	b.end(buf, (err == nil && pv == nil) || buf.Released())
	repanic(pv)
	return err
}

// end ends a Free's claim of buf: freed (or released by a Free that
// failed on the way: its bytes are no one's now), or kept for a retry.
func (b *Budget) end(buf *cl.Buffer, freed bool) {
	if !freed {
		b.bufs.keep(buf)
		return
	}
	b.bufs.drop(buf)
	disown(buf)
	b.live.Add(-buf.Size())
}

// allocateInner calls a.Allocate(size), a wrapped allocator's (of
// buffers or SVM: M), and returns its results, or, if it panics, the
// panic's value as pv (not nil): the wrapper sets its books right for
// what the call did, then panics again with pv (repanic), so that a
// panicking allocator beneath a wrapper leaves the wrapper's counts true
// (a mempool.Pool recovers the panic and goes on). freeInner is the same
// for Free. (No closure: the wrappers' path allocates nothing more.)
func allocateInner(a Allocator, size int64) (m *cl.Buffer, err error, pv any) {
	defer func() {
		if v := recover(); v != nil { // panic(nil) recovers a *runtime.PanicNilError
			pv = v
		}
	}()
	m, err = a.Allocate(size)
	return m, err, nil
}

// freeInner is allocateInner for a.Free(m).
func freeInner(a Allocator, m *cl.Buffer) (err error, pv any) {
	defer func() {
		if v := recover(); v != nil {
			pv = v
		}
	}()
	return a.Free(m), nil
}

// repanic panics again with pv, allocateInner's (or freeInner's)
// recovered panic, if any.
func repanic(pv any) {
	if pv != nil {
		panic(pv)
	}
}

// Live returns the bytes allocated and not yet freed.
func (b *Budget) Live() int64 { return b.live.Load() }

// Limit returns the budget.
func (b *Budget) Limit() int64 { return b.budget }

// Counting wraps an Allocator and keeps count of what it allocates and
// frees, by buffer, so tests (and leak hunts) can prove that every
// allocation is freed exactly once. A buffer freed twice, or never
// allocated here, is refused with ErrFreed and counted as a bad free.
type Counting struct {
	inner Allocator

	mu    sync.Mutex         // protects the fields below
	live  map[*cl.Buffer]int // handed out and not freed -> 0, or -1-n while a Free of it is under way (n: the Frees refused meanwhile)
	stats CountingStats
}

// CountingStats are a Counting allocator's counts at one moment.
type CountingStats struct {
	Allocs    int64 // successful allocations of a buffer
	Frees     int64 // frees that released the buffer (with an error on the way, too)
	Failures  int64 // allocations the wrapped allocator refused
	BadFrees  int64 // frees of a buffer already freed or not allocated here
	Live      int   // buffers allocated and not freed
	LiveBytes int64 // their bytes
}

// NewCounting wraps a.
func NewCounting(a Allocator) *Counting {
	return &Counting{inner: a, live: make(map[*cl.Buffer]int)}
}

// Allocate allocates from the wrapped allocator and counts the buffer.
func (c *Counting) Allocate(size int64) (*cl.Buffer, error) {
	if nilptr.Is(c.inner) {
		return nil, errNoInner("Counting")
	}
	buf, err := c.inner.Allocate(size)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.stats.Failures++
		return nil, err
	}
	if buf != nil {
		c.live[buf] = 0 // no Free under way
		c.stats.Allocs++
		c.stats.Live++
		c.stats.LiveBytes += buf.Size()
		own(buf, c)
	}
	return buf, nil
}

// Free frees buf through the wrapped allocator, once (a Free made while
// another is under way is refused with ErrBeingFreed, and counted a bad
// free if the other frees buf). A free the wrapped allocator fails leaves buf counted
// live, for a retry, unless buf was released all the same: then it counts
// as freed, or as a bad free if the wrapped allocator found it released
// already (ErrFreed: released behind c's back, so this is its second
// free), and the error is returned. A Free that panics (or ends its
// goroutine) is a failure too: c counts it so, and the panic goes on.
func (c *Counting) Free(buf *cl.Buffer) error {
	if buf == nil {
		return nil
	}
	c.mu.Lock()
	n, ok := c.live[buf]
	switch {
	case !ok:
		c.stats.BadFrees++
		c.mu.Unlock()
		return ErrFreed
	case n < 0: // a Free of buf under way: a bad free if that one frees it (see end)
		c.live[buf] = n - 1
		c.mu.Unlock()
		return errBeingFreed("Counting", buf.Size())
	}
	c.live[buf] = -1 // claimed
	c.mu.Unlock()
	ended := false
	defer func() {
		if !ended { // the wrapped Free ended its goroutine (runtime.Goexit)
			c.end(buf, buf.Released(), nil)
		}
	}()
	err, pv := freeInner(c.inner, buf)
	ended = true
	c.end(buf, (err == nil && pv == nil) || buf.Released(), err)
	repanic(pv)
	return err
}

// end ends a Free's claim of buf, whose wrapped Free returned err: freed
// (a bad free if the wrapped allocator found it released already,
// ErrFreed: released behind c's back, so this is its second free), or
// kept for a retry.
func (c *Counting) end(buf *cl.Buffer, freed bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	refused := int64(-1 - c.live[buf]) // the Frees refused while this one was under way
	if !freed {
		c.live[buf] = 0 // they were no double frees: the buffer is still c's
		return
	}
	delete(c.live, buf)
	disown(buf)
	c.stats.BadFrees += refused // each raced a Free that freed buf: a second free
	if errors.Is(err, ErrFreed) {
		c.stats.BadFrees++
	} else {
		c.stats.Frees++
	}
	c.stats.Live--
	c.stats.LiveBytes -= buf.Size()
}

// Stats returns the counts now.
func (c *Counting) Stats() CountingStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stats
}

// Unwrap returns the wrapped allocator.
func (b *Budget) Unwrap() Allocator { return b.inner }

// Unwrap returns the wrapped allocator.
func (c *Counting) Unwrap() Allocator { return c.inner }

// DeviceOf returns the device an allocator allocates on: the first device
// of its context (see ContextOf); nil if there is none to find.
func DeviceOf(a Allocator) *cl.Device {
	if ds := ContextOf(a).Devices(); len(ds) > 0 {
		return ds[0]
	}
	return nil
}

// ContextOf returns the context allocator a (an Allocator or an
// SVMAllocator) allocates in: that of a Deferred, Immediate, Pinned, SVM
// or ImmediateSVM, found through wrappers that have an Unwrap method
// (Budget, Counting, SVMBudget); nil if none says.
func ContextOf(a any) (ctx *cl.Context) {
	walk(a, func(a any) bool {
		if c, ok := a.(interface{ Context() *cl.Context }); ok {
			ctx = c.Context()
			return true
		}
		return false
	})
	return ctx
}

// QueueOf returns the queue of allocator a (an Allocator or an
// SVMAllocator), or of one it wraps: the queue an Immediate, Pinned or
// ImmediateSVM enqueues on; nil if none has one.
func QueueOf(a any) (q *cl.CommandQueue) {
	walk(a, func(a any) bool {
		if c, ok := a.(interface{ Queue() *cl.CommandQueue }); ok {
			q = c.Queue()
			return true
		}
		return false
	})
	return q
}

// walk calls found with a and, while found returns false, with each
// allocator it wraps, through an Unwrap method returning an Allocator or
// an SVMAllocator; it stops at a nil one (or a nil pointer).
func walk(a any, found func(a any) bool) {
	for !nilptr.Is(a) && !found(a) {
		switch u := a.(type) {
		case interface{ Unwrap() Allocator }:
			a = u.Unwrap()
		case interface{ Unwrap() SVMAllocator }:
			a = u.Unwrap()
		default:
			return
		}
	}
}
