package mempool

import (
	"errors"
	"fmt"
	"sync"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/nilptr"
)

// This file is Set: a pool per context, as CuPy's MemoryPool keeps a pool
// per device. The set only routes; each pool keeps its own lock, limit and
// statistics. The set's mu protects its pools, their order, the limits and
// closed; it is held while a pool is made (and its allocator with it), but
// never while a pool is called.

// NewAllocFunc makes the allocator of a Set's pool, at the first request on
// a context; q is the queue of that request. The allocator must allocate in
// q's context.
type NewAllocFunc func(q *cl.CommandQueue) (allocator.Allocator, error)

// Set is a set of pools, one per OpenCL context, that routes each request to
// the pool of the context of the queue it is made on, as CuPy's MemoryPool
// keeps a pool per device. A context's pool is made at the first request on
// one of its queues, with the Set's options; each pool has its own lock,
// limit and statistics. A Set is safe for concurrent use.
//
// The first queue a Set is asked on for a context must stay unreleased
// until the Set is closed: it is the queue of that context's pool's
// allocator, which probes new buffers there (allocator.Immediate). Other
// queues may be released before, as with Pool.On (see
// PooledBuffer.RecordQueue).
//
// # Several devices
//
// Give each device a context of its own (cl.CreateContext(dev)) and its
// queues: the Set then keeps a pool per device, and a limit set for a
// context (SetLimit) is that device's. WithLimitFraction among the Set's
// options gives each pool that fraction of its own device's memory. A
// context of several devices gets one pool, whose blocks are valid on
// each of its devices: the arena aligns them to the largest base-address
// alignment of the devices, and the largest block is the least of their
// largest buffers; a block given back on one device's queue is ordered
// before another device's queue reuses it, as between any two queues.
// Pool.Device and the memory size in errors are the first device's.
type Set struct {
	newSource func(q *cl.CommandQueue) (source, error) // the allocator of q's context's pool
	ctor      string                                   // "New" or "NewSVM": the kind of pools
	opts      []Option

	// limitMu serializes SetLimit (it protects no fields), so that the
	// limit a pool keeps is the last call's: without it, two calls could
	// record their limits in one order and set them in the other.
	limitMu sync.Mutex

	mu     sync.Mutex // protects the fields below; never held while a pool is called
	pools  map[*cl.Context]*Pool
	order  []setEntry // the pools in order of first use: Stats' and MemoryStats' indices
	limits map[*cl.Context]int64
	closed bool
}

// setEntry is a pool of a Set and its context.
type setEntry struct {
	ctx  *cl.Context
	pool *Pool
}

// NewSet returns an empty set of pools. Each pool is made with opts, over
// the allocator newAlloc makes for it; a nil newAlloc makes an
// allocator.Immediate of cl.MemReadWrite buffers on the first queue asked.
// The options are checked when the first pool is made: a bad one fails the
// first request. newAlloc is called with the set's lock held, and must not
// call the Set; if it panics, the request fails with an error matching
// ErrPanicked, and no pool is made.
func NewSet(newAlloc NewAllocFunc, opts ...Option) *Set {
	if newAlloc == nil {
		newAlloc = func(q *cl.CommandQueue) (allocator.Allocator, error) {
			return allocator.NewImmediate(q, cl.MemReadWrite)
		}
	}
	return newSet("New", func(q *cl.CommandQueue) (source, error) {
		a, err := newAlloc(q)
		if err != nil || a == nil {
			return nil, err
		}
		return buffers{a}, nil
	}, opts)
}

// NewSVMAllocFunc makes the SVM allocator of a Set's pool, as NewAllocFunc
// makes a buffer allocator.
type NewSVMAllocFunc func(q *cl.CommandQueue) (allocator.SVMAllocator, error)

// NewSVMSet returns an empty set of SVM pools (see NewSVM), one per
// context, as NewSet does for buffers. A nil newAlloc makes an
// allocator.ImmediateSVM of coarse-grain SVM on the first queue asked; a
// context whose devices have no SVM fails its first request with an error
// matching cl.ErrSVMNotSupported.
func NewSVMSet(newAlloc NewSVMAllocFunc, opts ...Option) *Set {
	if newAlloc == nil {
		newAlloc = func(q *cl.CommandQueue) (allocator.SVMAllocator, error) {
			return allocator.NewImmediateSVM(q, false)
		}
	}
	return newSet("NewSVM", func(q *cl.CommandQueue) (source, error) {
		a, err := newAlloc(q)
		if err != nil || a == nil {
			return nil, err
		}
		return svms{a}, nil
	}, opts)
}

func newSet(ctor string, newSource func(q *cl.CommandQueue) (source, error), opts []Option) *Set {
	return &Set{
		newSource: newSource,
		ctor:      ctor,
		opts:      append([]Option(nil), opts...),
		pools:     make(map[*cl.Context]*Pool),
		limits:    make(map[*cl.Context]int64),
	}
}

// On returns an allocator of the memory of q's context's pool for use on q
// (see Pool.On), making the pool first if q's context has none. A nil
// queue, a closed Set, or a pool that cannot be made (a released queue
// makes none) give an allocator whose Allocate and FreeHeld return the
// error.
func (s *Set) On(q *cl.CommandQueue) *QueueAllocator {
	p, err := s.poolOf("On", q)
	if err != nil {
		return &QueueAllocator{err: err}
	}
	return p.On(q)
}

// Pool returns the pool of q's context, making it if there is none yet;
// a released queue makes none (an error matching
// cl.ErrInvalidCommandQueue). After Close it returns ErrPoolClosed.
func (s *Set) Pool(q *cl.CommandQueue) (*Pool, error) { return s.poolOf("Pool", q) }

// poolOf returns the pool of q's context, made at its first use; call
// names the method asked, for errors.
// callNewSource calls s.newSource, and turns a panic in it (the user's
// function that makes an allocator) into an error matching ErrPanicked.
func (s *Set) callNewSource(q *cl.CommandQueue) (src source, err error) {
	defer func() {
		if v := recover(); v != nil {
			src, err = nil, recovered(v, "Set's allocator function")
		}
	}()
	return s.newSource(q)
}

func (s *Set) poolOf(call string, q *cl.CommandQueue) (*Pool, error) {
	if q == nil {
		return nil, fmt.Errorf("mempool: Set.%s(nil): %w", call, cl.ErrInvalidCommandQueue)
	}
	ctx := q.Context()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrPoolClosed
	}
	if p := s.pools[ctx]; p != nil {
		return p, nil
	}
	// q is held while its pool is made: a pool made over a queue
	// released, or being released, would allocate (or probe) on a queue
	// that is gone, for every queue of the context, for good.
	if !q.TryHold() {
		return nil, fmt.Errorf("mempool: Set.%s of a released queue (or one being released) makes no pool: %w", call, cl.ErrInvalidCommandQueue)
	}
	defer q.Unhold()
	src, err := s.callNewSource(q)
	switch {
	case err != nil:
		return nil, fmt.Errorf("mempool: Set.%s: making the allocator of %v's pool: %w", call, q.Device(), err)
	case src == nil || nilptr.Is(src.outer()):
		return nil, fmt.Errorf("mempool: Set.%s: the allocator made for %v is nil", call, q.Device())
	}
	if ac := allocator.ContextOf(src.outer()); ac != nil && ac != ctx {
		return nil, fmt.Errorf("mempool: Set.%s: the allocator made for %v allocates in another context: %w", call, q.Device(), ErrQueueMismatch)
	}
	if aq := allocator.QueueOf(src.outer()); aq != nil && aq.Context() != ctx {
		return nil, fmt.Errorf("mempool: Set.%s: the allocator made for %v allocates in another context: %w", call, q.Device(), ErrQueueMismatch)
	}
	opts := s.opts
	if limit, ok := s.limits[ctx]; ok {
		// After the Set's options, so that it overrides theirs.
		opts = append(opts[:len(opts):len(opts)], WithLimit(limit))
	}
	p, err := newPool(s.ctor, src, opts)
	if err != nil {
		return nil, fmt.Errorf("mempool: Set.%s: making the pool of %v: %w", call, q.Device(), err)
	}
	s.pools[ctx] = p
	s.order = append(s.order, setEntry{ctx, p})
	return p, nil
}

// SetLimit sets the limit of ctx's pool (see Pool.SetLimit): at once if the
// pool exists, else when it is made, in place of the limit of the Set's
// options. With one context per device, it is that device's limit, as
// CuPy's MemoryPool.set_limit is the current device's. 0 removes the limit;
// a negative limit or a nil context is an error that changes nothing.
// After Close it returns ErrPoolClosed.
func (s *Set) SetLimit(ctx *cl.Context, bytes int64) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("mempool: Set.SetLimit(nil, %d): %w", bytes, cl.ErrInvalidContext)
	case bytes < 0:
		return fmt.Errorf("mempool: Set.SetLimit(%d): negative limit", bytes)
	}
	s.limitMu.Lock()
	defer s.limitMu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrPoolClosed
	}
	s.limits[ctx] = bytes
	p := s.pools[ctx]
	s.mu.Unlock()
	if p == nil {
		return nil // New applies it
	}
	return p.SetLimit(bytes)
}

// entries returns the pools made so far, in order of first use.
func (s *Set) entries() []setEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]setEntry(nil), s.order...)
}

// FreeHeld frees what every pool holds (see Pool.FreeHeld), and returns
// their errors, joined.
func (s *Set) FreeHeld() error {
	var errs []error
	for _, e := range s.entries() {
		errs = append(errs, e.pool.FreeHeld())
	}
	return errors.Join(errs...)
}

// Close closes every pool (see Pool.Close) and refuses further requests
// with ErrPoolClosed; buffers still active stay valid, and each is freed
// when closed. It returns the pools' errors, joined. A second Close does
// nothing and returns nil.
func (s *Set) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	entries := append([]setEntry(nil), s.order...)
	s.mu.Unlock()
	var errs []error
	for _, e := range entries {
		errs = append(errs, e.pool.Close())
	}
	return errors.Join(errs...)
}

// DeviceStats are the statistics of one pool of a Set.
type DeviceStats struct {
	Context *cl.Context
	Device  *cl.Device // the context's first device (Pool.Device)
	Stats   Stats
}

// SetStats are the statistics of a Set: each pool's, and their sums.
//
// Each pool's Stats are read at one moment and agree with each other, but
// the pools are read one after the other, so the sums may mix moments.
// There are no peaks across pools: each pool counts its peaks on its own,
// at its own moments, and no sum of them is the peak of the total; read
// them in Devices.
type SetStats struct {
	// Devices has each pool's statistics, in order of first use: the
	// indices of MemoryStats.
	Devices []DeviceStats

	// The sums over the pools of the fields of Stats of the same names.
	ActiveBlocks, HeldBlocks                int
	ActiveBytes, HeldBytes, ManagedBytes    int64
	Hits, Misses, DeviceAllocs, DeviceFrees int64
	OOMs                                    int64
}

// Stats returns the statistics of every pool and their sums.
func (s *Set) Stats() SetStats {
	var st SetStats
	for _, e := range s.entries() {
		ps := e.pool.Stats()
		st.Devices = append(st.Devices, DeviceStats{Context: e.ctx, Device: e.pool.Device(), Stats: ps})
		st.ActiveBlocks += ps.ActiveBlocks
		st.HeldBlocks += ps.HeldBlocks
		st.ActiveBytes += ps.ActiveBytes
		st.HeldBytes += ps.HeldBytes
		st.ManagedBytes += ps.ManagedBytes
		st.Hits += ps.Hits
		st.Misses += ps.Misses
		st.DeviceAllocs += ps.DeviceAllocs
		st.DeviceFrees += ps.DeviceFrees
		st.OOMs += ps.OOMs
	}
	return st
}

// MemoryStats returns every pool's MemoryStats, each key prefixed with
// "device.<i>.", i being the pool's index in Stats().Devices (order of
// first use): "device.0.allocated_bytes.all.current".
func (s *Set) MemoryStats() map[string]int64 {
	m := make(map[string]int64)
	for i, e := range s.entries() {
		for k, v := range e.pool.MemoryStats() {
			m[fmt.Sprintf("device.%d.%s", i, k)] = v
		}
	}
	return m
}
