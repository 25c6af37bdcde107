package array

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/clpool/clpool/cl"
)

// Elem is the element types an Array holds.
type Elem interface {
	float32 | float64 | int32 | int64 | uint32
}

// Block is the device memory an array lives in. Both *mempool.PooledBuffer
// and *cl.Buffer are Blocks, so pool.Allocate and a raw allocator's
// Allocate both pass as an array's allocator.
type Block interface {
	Buffer() *cl.Buffer
	Close() error
}

// Alloc is an allocator as arrays keep it.
type Alloc func(size int64) (Block, error)

// Sentinel errors of misused arrays.
var (
	ErrClosed          = errors.New("array: array is closed")
	ErrLengthMismatch  = errors.New("array: lengths differ")
	ErrContextMismatch = errors.New("array: arrays of different contexts")
	ErrQueueMismatch   = errors.New("array: arrays on different command queues")
	ErrEmpty           = errors.New("array: empty array")
	ErrOutOfRange      = errors.New("array: slice bounds out of range")
	ErrOverlap         = errors.New("array: an in-place result overlaps an operand at another offset")
)

// Array is a 1-D array of n elements of T in device memory, on a command
// queue. Operations enqueue kernels on that queue, and their results are new
// arrays on the same queue, allocated by the same allocator, temporaries
// included. An Array is not safe for concurrent use (as a slice is not);
// the kernels behind it are.
//
// An Array may be a view (see Slice): its elements are then a window of
// another array's memory, starting at Offset.
type Array[T Elem] struct {
	q      *cl.CommandQueue
	n      int
	off    int      // the index of element 0 in the storage's buffer
	store  *storage // nil when n == 0
	alloc  Alloc
	closed bool
}

// storage is the block an array shares with its views. It goes back to
// the allocator when the last of them is closed.
type storage struct {
	block Block
	base  *cl.Buffer   // the buffer kernels get: the block's Base where it has one
	start int          // the index of the block's first element in base
	refs  atomic.Int32 // the open arrays over it
}

// Based is a Block that is part of a larger buffer, as a
// *mempool.PooledBuffer of an arena is: its bytes start at Offset in Base.
// Arrays pass Base and the offset to kernels, so they never need a
// sub-buffer.
type Based interface {
	Base() *cl.Buffer
	Offset() int64
}

func newStorage[T Elem](b Block) *storage {
	s := &storage{block: b, base: b.Buffer()}
	if bb, ok := b.(Based); ok {
		s.base, s.start = bb.Base(), int(bb.Offset()/elemSize[T]())
	}
	s.refs.Store(1)
	return s
}

// adapt turns any allocator function into an Alloc.
func adapt[B Block](alloc func(int64) (B, error)) Alloc {
	return func(size int64) (Block, error) {
		b, err := alloc(size)
		if err != nil {
			return nil, err
		}
		return b, nil
	}
}

func elemSize[T Elem]() int64 {
	var z T
	return int64(unsafe.Sizeof(z))
}

// Empty returns an array of n elements whose contents are undefined.
// alloc is pool.Allocate, or a raw allocator's Allocate.
func Empty[T Elem, B Block](q *cl.CommandQueue, n int, alloc func(int64) (B, error)) (*Array[T], error) {
	return newArray[T](q, n, adapt(alloc))
}

func newArray[T Elem](q *cl.CommandQueue, n int, alloc Alloc) (*Array[T], error) {
	if q == nil {
		return nil, fmt.Errorf("array: nil queue: %w", cl.ErrInvalidCommandQueue)
	}
	if n < 0 {
		return nil, fmt.Errorf("array: negative length %d: %w", n, cl.ErrInvalidBufferSize)
	}
	a := &Array[T]{q: q, n: n, alloc: alloc}
	if n == 0 {
		return a, nil
	}
	b, err := alloc(int64(n) * elemSize[T]())
	if err != nil {
		return nil, fmt.Errorf("array: allocating %d elements: %w", n, err)
	}
	if err := onQueue(b, q); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("array: allocating %d elements: %w", n, err)
	}
	a.store = newStorage[T](b)
	return a, nil
}

// queued is a Block that knows the queue it was allocated for and can
// record another, as *mempool.PooledBuffer does.
type queued interface {
	Queue() *cl.CommandQueue
	RecordQueue(q *cl.CommandQueue) error
}

// onQueue makes sure a pool orders the block's reuse after the array's
// commands on q: a block allocated for another queue (pool.Allocate on
// the allocator's queue, say) records q too, as torch's record_stream.
func onQueue(b Block, q *cl.CommandQueue) error {
	if qb, ok := b.(queued); ok && qb.Queue() != q {
		return qb.RecordQueue(q)
	}
	return nil
}

// Zeros returns an array of n zeros.
func Zeros[T Elem, B Block](q *cl.CommandQueue, n int, alloc func(int64) (B, error)) (*Array[T], error) {
	return Full[T](q, n, 0, alloc)
}

// Full returns an array of n copies of v.
func Full[T Elem, B Block](q *cl.CommandQueue, n int, v T, alloc func(int64) (B, error)) (*Array[T], error) {
	a, err := Empty[T](q, n, alloc)
	if err != nil {
		return nil, err
	}
	if err := a.Fill(v); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// Arange returns start, start+step, ..., n elements.
func Arange[T Elem, B Block](q *cl.CommandQueue, n int, start, step T, alloc func(int64) (B, error)) (*Array[T], error) {
	a, err := Empty[T](q, n, alloc)
	if err != nil || n == 0 {
		return a, err
	}
	if err := run[T](q, "arange", n, nil, a.buf(), a.offset(), start, step, int64(n)); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// FromHost returns an array holding a copy of data.
func FromHost[T Elem, B Block](q *cl.CommandQueue, data []T, alloc func(int64) (B, error)) (*Array[T], error) {
	a, err := Empty[T](q, len(data), alloc)
	if err != nil || len(data) == 0 {
		return a, err
	}
	if err := q.WriteBuffer(a.buf(), a.offset()*elemSize[T](), cl.Bytes(data)); err != nil {
		a.Close()
		return nil, fmt.Errorf("array: upload: %w", err)
	}
	return a, nil
}

// Len returns the number of elements.
func (a *Array[T]) Len() int { return a.n }

// Queue returns the queue the array's operations run on.
func (a *Array[T]) Queue() *cl.CommandQueue { return a.q }

// Allocator returns the allocator the array and its results use.
func (a *Array[T]) Allocator() Alloc { return a.alloc }

// Buffer returns the device buffer (nil for an empty or closed array). The
// array's elements are Len elements from Offset on; the buffer may be
// longer (a pool's block, the segment an arena's block is part of, or the
// memory of the array a view was sliced from).
func (a *Array[T]) Buffer() *cl.Buffer {
	if a.closed || a.store == nil {
		return nil
	}
	return a.store.base
}

// Offset returns the index in Buffer of the array's first element: 0 but
// for views and arrays in an arena's block (see Based).
func (a *Array[T]) Offset() int {
	if a.store == nil {
		return a.off
	}
	return a.store.start + a.off
}

// buf and offset are a kernel's arguments for the array: its buffer, and
// the index of its first element there.
func (a *Array[T]) buf() *cl.Buffer { return a.store.base }
func (a *Array[T]) offset() int64   { return int64(a.store.start + a.off) }

// Slice returns a view of the elements lo to hi-1, as a[lo:hi] is of a Go
// slice: an array over the same memory, so that each sees what the other
// writes. Results of operations on a view are new arrays, as for any array.
// The memory goes back to the allocator when a and all views of it are
// closed, in any order. Bounds outside 0 <= lo <= hi <= Len are an error
// (ErrOutOfRange).
func (a *Array[T]) Slice(lo, hi int) (*Array[T], error) {
	if a.closed {
		return nil, fmt.Errorf("array: slice: %w", ErrClosed)
	}
	if lo < 0 || hi < lo || hi > a.n {
		return nil, fmt.Errorf("array: slice [%d:%d] of %d elements: %w", lo, hi, a.n, ErrOutOfRange)
	}
	v := &Array[T]{q: a.q, n: hi - lo, alloc: a.alloc}
	if v.n > 0 {
		v.store, v.off = a.store, a.off+lo
		a.store.refs.Add(1)
	}
	return v, nil
}

// Get downloads the array, waiting for the operations before it.
func (a *Array[T]) Get() ([]T, error) {
	if a.closed {
		return nil, ErrClosed
	}
	out := make([]T, a.n)
	if a.n == 0 {
		return out, nil
	}
	if err := a.q.ReadBuffer(a.buf(), a.offset()*elemSize[T](), cl.Bytes(out)); err != nil {
		return nil, fmt.Errorf("array: download: %w", err)
	}
	return out, nil
}

// Copy returns a new array with the same elements, from the same allocator.
func (a *Array[T]) Copy() (*Array[T], error) {
	if a.closed {
		return nil, ErrClosed
	}
	c, err := newArray[T](a.q, a.n, a.alloc)
	if err != nil || a.n == 0 {
		return c, err
	}
	ev, err := a.q.EnqueueCopyBuffer(a.buf(), c.buf(), a.offset()*elemSize[T](), c.offset()*elemSize[T](), int64(a.n)*elemSize[T]())
	if err == nil {
		err = ev.Release()
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("array: copy: %w", err)
	}
	return c, nil
}

// Close gives the array's memory back to its allocator (to the pool, for a
// pooled one), once no view of it remains open. Commands already enqueued
// on the array's in-order queue still see the memory: the queue runs them
// before any later user of the block. A second Close returns ErrClosed.
func (a *Array[T]) Close() error {
	if a.closed {
		return ErrClosed
	}
	a.closed = true
	if a.store == nil || a.store.refs.Add(-1) > 0 {
		return nil
	}
	return a.store.block.Close()
}

// Closed reports whether Close has been called.
func (a *Array[T]) Closed() bool { return a.closed }

// check returns an error unless a and every other array are open, on one
// queue and, when sameLen, of a's length. Operands on different queues
// are refused (ErrQueueMismatch) rather than ordered: a kernel on one
// queue would race with the pending work of the other.
func (a *Array[T]) check(op string, others ...*Array[T]) error {
	if a.closed {
		return fmt.Errorf("array: %s: %w", op, ErrClosed)
	}
	for _, o := range others {
		switch {
		case o.closed:
			return fmt.Errorf("array: %s: %w", op, ErrClosed)
		case o.q.Context() != a.q.Context():
			return fmt.Errorf("array: %s: %w", op, ErrContextMismatch)
		case o.q != a.q:
			return fmt.Errorf("array: %s: %w", op, ErrQueueMismatch)
		case o.n != a.n:
			return fmt.Errorf("array: %s: lengths %d and %d: %w", op, a.n, o.n, ErrLengthMismatch)
		}
	}
	return nil
}

// checkInto is check for an update of z from operands (z may be one of
// them): it also refuses, with ErrOverlap, an operand that shares z's
// memory at another offset and overlaps it, since an element-wise kernel
// would then read elements that other work-items have already overwritten.
func (z *Array[T]) checkInto(op string, operands ...*Array[T]) error {
	if err := z.check(op, operands...); err != nil {
		return err
	}
	for _, x := range operands {
		if x.store == z.store && x.off != z.off && x.off < z.off+z.n && z.off < x.off+x.n {
			return fmt.Errorf("array: %s: [%d:%d] and [%d:%d]: %w", op, z.off, z.off+z.n, x.off, x.off+x.n, ErrOverlap)
		}
	}
	return nil
}
