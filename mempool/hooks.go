package mempool

import (
	"errors"
	"reflect"

	"github.com/clpool/clpool/cl"
)

// EventKind says what a hook is told of.
type EventKind uint8

// The six events of CuPy's MemoryHook, and one of a segment freed. Alloc
// events surround a device allocation of a segment (a miss, and each retry
// after an out-of-memory); malloc events surround every Allocate of a
// block, hit or miss; free events surround every block given back to the
// pool (Close, or the collector's reclaim). SegmentFree follows each
// segment the pool gives back to its allocator (the out-of-memory ladder,
// FreeHeld and the like, Close of the pool): with AllocAfter, it tells a
// hook the pool's managed bytes as they change. CuPy has no such event.
// Both are told outside the pool's lock: SegmentFree after the pool
// stopped counting the segment and before the allocator's Free is called,
// AllocAfter after the device allocation and once the pool counts the
// segment. So the segments a sum of these events has live are at every
// moment among those the device holds, from any number of goroutines: a
// segment allocated in the room of one being freed is told after that
// one's SegmentFree (its sum stays within a device's memory, or an
// allocator.Budget). It can pass the pool's managed bytes (Stats'
// ManagedBytes) for a moment, as a segment freed on one goroutine is
// still on the device, and told live, while another's is counted. From
// one goroutine the events are in the pool's order, and their sum is the
// pool's managed bytes at each alloc_after and once a call's segment_free
// events are all told: a call that frees several segments (FreeHeld,
// SetLimit, Close, the out-of-memory ladder) stops counting them all
// before it tells the first, so at its other segment_free events the sum
// is still above the managed bytes, by the segments yet to be told.
// These hold for a hook registered while no request is under way and not
// removed meanwhile: one added during a request may miss its alloc_after
// and be told that segment's segment_free, and one removed during a
// request may be told an alloc_after after its remove returned.
const (
	AllocBefore EventKind = iota
	AllocAfter
	MallocBefore
	MallocAfter
	FreeBefore
	FreeAfter
	SegmentFree
)

var eventNames = [...]string{"alloc_before", "alloc_after", "malloc_before", "malloc_after", "free_before", "free_after", "segment_free"}

// String returns the event's name, such as "malloc_after".
func (k EventKind) String() string {
	if int(k) < len(eventNames) {
		return eventNames[k]
	}
	return "unknown"
}

// Event is what a hook is told.
//
// A segment_free event's Size and AllocSize are the segment's bytes, and
// its Buffer or SVM the allocation given back, the same pointer as the
// alloc_after event of the segment had: it is being freed, and is there
// to match the two, not to be used. Its Err is nil: it is told before the
// allocator's Free, whose error Stats counts (FreeErrors) and a FreeHeld,
// SetLimit or Close that freed the segment returns (a request's
// out-of-memory ladder does not fail for it); the pool forgets the
// segment all the same. SVM or
// pinned memory that the pool leaks rather than free, as it could not
// wait for the commands that may use it, is told with the error of that
// wait.
type Event struct {
	Kind      EventKind
	Device    *cl.Device // the pool's device; nil if its allocator does not say
	Size      int64      // bytes requested (for alloc events: the bytes asked of the device)
	AllocSize int64      // the block's size (for alloc events: the segment's)
	Buffer    *cl.Buffer // the device buffer (for block events: the segment's, see Offset); nil before an allocation, after a failed one, and in an SVM pool
	SVM       *cl.SVM    // the SVM allocation, as Buffer is the buffer, in a pool made by NewSVM; nil otherwise
	Offset    int64      // where the block starts in Buffer or SVM (block events)
	BlockID   uint64     // the PooledBuffer's ID (malloc_after and free events); 0 otherwise
	Err       error      // for after events: the failure, if any

	// Queue is the queue the block is for (Pool.On's, or the allocator's)
	// in malloc and free events, and the request's in alloc events; nil
	// for none, and in segment_free events.
	Queue *cl.CommandQueue
}

// Hook is told of a pool's events. A pool calls its hooks on the goroutine
// that allocates or frees, synchronously, outside the pool's lock: a hook
// must be safe for concurrent use and quick, and may call the pool's
// read-only methods (Stats), but not Allocate. A hook that panics makes the
// pool's method return a *PanicError (ErrPanicked) once the pool has put
// its accounts in order: an Allocate fails and its block goes back to the
// pool; a Close still gives its block back. When a malloc_after hook
// panics, the hooks have all been told of the block's allocation: they
// are told of its free too (free_before, free_after), so that every hook
// sees each block it saw allocated freed.
//
// CuPy installs hooks per thread, for the span of a with block. Go has no
// goroutine-local state, and a pool is usually shared by goroutines, so a
// hook is registered on a pool, for all its users, until removed.
type Hook interface {
	Handle(Event)
}

// HookFunc lets a function be a Hook.
type HookFunc func(Event)

// Handle calls f.
func (f HookFunc) Handle(e Event) { f(e) }

// AddHook registers h and returns the function that removes it. Hooks are
// called in the order they were added. With no hook registered, the pool's
// hot path pays one atomic load per event site and nothing else. A nil h
// panics here, as http.Handle's nil handler does: a nil interface, a nil
// HookFunc, or a nil pointer (a *memhooks.TraceRecorder never made), which
// registered would fail every later request.
//
// A hook registered already (the same pointer, or an equal comparable
// value) is not registered again: it is told of each event once, where it
// was first added, and stays until each remove function AddHook returned
// for it has been called (a recorder told twice would count each
// allocation twice). A HookFunc cannot be compared, nor a value of a type
// that is not comparable or that is not equal to itself (a NaN field):
// each AddHook of one is a registration of its own.
func (p *Pool) AddHook(h Hook) (remove func()) {
	if isNil(h) {
		panic("mempool: AddHook of a nil hook")
	}
	p.hooksMu.Lock()
	defer p.hooksMu.Unlock()
	var hs []*hookEntry
	if old := p.hooks.Load(); old != nil {
		for _, e := range *old {
			if sameHook(e.h, h) {
				e.adds++
				return p.removeHook(e)
			}
		}
		hs = append(hs, *old...)
	}
	entry := &hookEntry{h: h, adds: 1} // its address is the registration's identity
	hs = append(hs, entry)
	p.hooks.Store(&hs)
	return p.removeHook(entry)
}

// removeHook returns a remove function of AddHook for entry: the first
// call takes one of entry's adds back, and entry off the list with the
// last; later calls do nothing.
func (p *Pool) removeHook(entry *hookEntry) func() {
	done := false
	return func() {
		p.hooksMu.Lock()
		defer p.hooksMu.Unlock()
		if done {
			return
		}
		done = true
		if entry.adds--; entry.adds > 0 {
			return
		}
		old := p.hooks.Load()
		if old == nil {
			return
		}
		var next []*hookEntry
		for _, e := range *old {
			if e != entry {
				next = append(next, e)
			}
		}
		if len(next) == 0 {
			p.hooks.Store(nil)
		} else {
			p.hooks.Store(&next)
		}
	}
}

// hookEntry is one registration of a hook.
type hookEntry struct {
	h    Hook
	adds int // the AddHooks of h not yet removed; p.hooksMu protects it
}

// sameHook reports whether a and b are the same hook: of one comparable
// type and equal. A value whose comparison panics (a struct holding a
// func in an interface field) is no other's.
func sameHook(a, b Hook) (same bool) {
	t := reflect.TypeOf(a)
	if t != reflect.TypeOf(b) || !t.Comparable() {
		return false
	}
	defer func() {
		if recover() != nil {
			same = false
		}
	}()
	return a == b
}

// hookList is what the hot path loads: nil when no hook is registered.
type hookList = *[]*hookEntry

// emit tells every hook of e. A hook that panics does not stop the others:
// emit returns the first panic as a *PanicError, for the caller to return
// once the pool's accounts are in order again.
func (p *Pool) emit(hooks hookList, e Event) (err error) {
	e.Device = p.device
	for _, entry := range *hooks {
		if perr := callHook(entry.h, e); err == nil {
			err = perr
		}
	}
	return err
}

// callHook calls h, recovering a panic into a *PanicError.
func callHook(h Hook, e Event) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = recovered(v, e.Kind.String()+" hook")
		}
	}()
	h.Handle(e)
	return nil
}

// mallocFailed tells the hooks of a failed Allocate and returns its error
// (joined with a hook's panic, if one panicked).
func (p *Pool) mallocFailed(req *request, err error) error {
	if req.hooks != nil {
		if herr := p.emit(req.hooks, Event{Kind: MallocAfter, Size: req.size, AllocSize: p.blockSize(req.size), Queue: queueOf(req.q), Err: err}); herr != nil {
			return errors.Join(err, herr)
		}
	}
	return err
}

func (b *PooledBuffer) event(k EventKind, blk *block) Event {
	return Event{Kind: k, Size: b.Size(), AllocSize: blk.Size, Buffer: blk.Seg.Data.buf, SVM: blk.Seg.Data.svm, Offset: blk.Off, BlockID: b.ID(), Queue: queueOf(b.q)}
}

// segmentFreed tells the hooks, if any, that segment s is given back to
// the allocator (before the allocator's Free: see SegmentFree), or leaked
// for err; it returns a hook's panic.
func (p *Pool) segmentFreed(hooks hookList, s *segment, err error) error {
	if hooks == nil {
		return nil
	}
	return p.emit(hooks, Event{Kind: SegmentFree, Size: s.Size, AllocSize: s.Size, Buffer: s.Data.buf, SVM: s.Data.svm, Err: err})
}

// isNil reports whether h is nil or holds a nil func, pointer, map,
// channel or slice.
func isNil(h Hook) bool {
	if h == nil {
		return true
	}
	switch v := reflect.ValueOf(h); v.Kind() {
	case reflect.Func, reflect.Pointer, reflect.Map, reflect.Chan, reflect.Slice:
		return v.IsNil()
	}
	return false
}

// queueOf returns qs's queue: nil for the pool's host (no queue), and for
// a request that has none.
func queueOf(qs *qstate) *cl.CommandQueue {
	if qs == nil {
		return nil
	}
	return qs.q
}
