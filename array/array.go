package array

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/nilptr"
)

// Elem is the element types an Array holds.
type Elem interface {
	float32 | float64 | int32 | int64 | uint32
}

// Block is the device memory an array lives in. Both *mempool.PooledBuffer
// and *cl.Buffer are Blocks, so pool.Allocate and a raw allocator's
// Allocate both pass as an array's allocator. An array closes a
// *cl.Buffer with allocator.Free rather than its own Close, so that the
// buffer goes back through the allocator.Budget or allocator.Counting
// that handed it out. A Block may instead be in shared virtual memory
// (SVMBased), as the blocks of SVMAlloc and of a pool over SVM are; its
// Buffer is then nil.
type Block interface {
	Buffer() *cl.Buffer
	Close() error
}

// Alloc is an allocator as arrays keep it. A nil Alloc, given to a
// constructor, stands for the default allocator (see SetDefaultAllocator).
// A call whose allocator panics, or returns a block of fewer bytes than
// it asked for (the block is closed), fails with an error.
type Alloc func(size int64) (Block, error)

// Sentinel errors of misused arrays. Match them with errors.Is. The
// errors that wrap them say "array:", the call that failed and, where
// it takes several arrays, the operand: "array: IAdd: y: array is closed".
var (
	ErrClosed          = errors.New("array is closed")
	ErrNilArray        = errors.New("nil array")
	ErrLengthMismatch  = errors.New("lengths differ")
	ErrContextMismatch = errors.New("arrays of different contexts")
	ErrQueueMismatch   = errors.New("arrays on different command queues")
	ErrEmpty           = errors.New("empty array")
	ErrOutOfRange      = errors.New("slice bounds out of range")
	ErrOverlap         = errors.New("an in-place result overlaps an operand at another offset")
)

// Array is a 1-D array of n elements of T in device memory, on a command
// queue. Operations enqueue kernels on that queue, and their results are new
// arrays on the same queue, allocated by the same allocator, temporaries
// included. An Array is not safe for concurrent use (as a slice is not);
// the kernels behind it are.
//
// An Array may be a view (see Slice): its elements are then a window of
// another array's memory, starting at Offset.
//
// A nil *Array is an error (ErrNilArray) for every call that returns one;
// its accessors (Len, Offset, Buffer, Queue, Allocator, Closed) return zero
// values.
type Array[T Elem] struct {
	q      *cl.CommandQueue
	n      int
	off    int      // the index of element 0 in the storage's block
	store  *storage // nil when n == 0
	alloc  Alloc
	closed bool
}

// storage is the block an array shares with its views. It goes back to
// the allocator when the last of them is closed.
type storage struct {
	block Block
	mem   memory       // what kernels get: the block's Base or SVM where it has one
	start int          // the index of the block's first element in mem
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

// SVMBased is a Block in shared virtual memory (cl.SVM, OpenCL 2.0): its
// bytes start at Offset in the SVM allocation. The blocks of SVMAlloc are
// (at offset 0), and so are those of a pool over SVM, whose Buffer and
// Base are nil. Arrays pass the SVM pointer and the offset to kernels, and
// transfer with clEnqueueSVMMemcpy, so coarse-grain SVM needs no map. A
// Block whose SVM is nil is taken as a buffer's (Based, or Buffer).
type SVMBased interface {
	SVM() *cl.SVM
	Offset() int64
}

// newStorage returns the storage of a new array over b on q, or the error
// of memory that cannot serve: none, of another context, or at an offset
// that is not a whole number of elements.
func newStorage[T Elem](b Block, q *cl.CommandQueue, size int64) (*storage, error) {
	mem, off := memoryOf(b)
	if err := mem.check(q); err != nil {
		return nil, err
	}
	if off < 0 || off%elemSize[T]() != 0 {
		return nil, fmt.Errorf("the allocator's block is at byte offset %d, not a multiple of the %d-byte %T elements", off, elemSize[T](), *new(T))
	}
	if has := blockBytes(b, mem, off); has < size {
		return nil, fmt.Errorf("the allocator's block has %d bytes, not the %d asked for: %w", has, size, cl.ErrInvalidBufferSize)
	}
	if err := onQueue(b, q); err != nil { // after check: RecordQueue refuses another context with its own error
		return nil, err
	}
	s := &storage{block: b, mem: mem, start: int(off / elemSize[T]())}
	s.refs.Store(1)
	return s, nil
}

// blockBytes returns the bytes block b, at offset off in mem, has for
// the array (see ownBytes).
func blockBytes(b Block, mem memory, off int64) int64 {
	return ownBytes(b, mem.size()-off)
}

// ownBytes returns the bytes block b has, of the n its memory holds past
// its offset: its own Size if it tells one (a pooled block), and at most
// n.
func ownBytes(b Block, n int64) int64 {
	if s, ok := b.(interface{ Size() int64 }); ok {
		n = min(n, s.Size())
	}
	return n
}

// adapt turns any allocator function into an Alloc; nil stays nil (the
// default allocator).
func adapt[B Block](alloc func(int64) (B, error)) Alloc {
	if alloc == nil {
		return nil
	}
	if a, ok := any(alloc).(func(int64) (Block, error)); ok {
		return a // an Alloc already: wrapping it again would only add a call
	}
	return func(size int64) (Block, error) {
		b, err := alloc(size)
		if err != nil {
			return nil, err
		}
		return b, nil
	}
}

// rawBlock is a *cl.Buffer from a raw allocator, as an array keeps it.
// Close frees it with allocator.Free, that is through the allocator.Budget
// or allocator.Counting that handed it out, if one did, so that the budget
// gets its bytes back and the count sees the free; releasing the buffer
// directly would go behind their back.
type rawBlock struct{ buf *cl.Buffer }

func (r rawBlock) Buffer() *cl.Buffer { return r.buf }
func (r rawBlock) Close() error       { return allocator.Free(r.buf) }

func elemSize[T Elem]() int64 {
	var z T
	return int64(unsafe.Sizeof(z))
}

// Empty returns an array of n elements whose contents are undefined.
// alloc is pool.Allocate, or a raw allocator's Allocate; nil means the
// default allocator (see SetDefaultAllocator). A negative n, or one whose
// bytes exceed the device's largest buffer (MaxMemAllocSize), is an
// error matching cl.ErrInvalidBufferSize, found before the allocator is
// asked. One whose bytes exceed the largest buffer also matches
// allocator.ErrOutOfMemory (and so mempool.ErrOutOfMemory, the same
// value), as a pool's refusal of that size does: no device could hold it.
func Empty[T Elem, B Block](q *cl.CommandQueue, n int, alloc func(int64) (B, error)) (*Array[T], error) {
	return newArray[T]("Empty", q, n, adapt(alloc))
}

// newArray makes an array of n elements for the exported call op, with
// memory from alloc (nil: the default allocator).
func newArray[T Elem](op string, q *cl.CommandQueue, n int, alloc Alloc) (*Array[T], error) {
	if q == nil {
		return nil, fmt.Errorf("array: %s: nil queue: %w", op, cl.ErrInvalidCommandQueue)
	}
	if q.Properties()&cl.QueueOutOfOrder != 0 {
		// Operations are enqueued one after the other with no events:
		// only an in-order queue runs them in that order.
		return nil, fmt.Errorf("array: %s: an out-of-order queue: arrays need an in-order one: %w", op, cl.ErrInvalidCommandQueue)
	}
	size, err := byteSize[T](q, n)
	if err != nil {
		return nil, fmt.Errorf("array: %s: %w", op, err)
	}
	if alloc == nil {
		alloc = defaultFor(q)
	}
	a := &Array[T]{q: q, n: n, alloc: alloc}
	if n == 0 {
		return a, nil
	}
	b, err := allocate(alloc, size, q)
	if err != nil {
		return nil, fmt.Errorf("array: %s: allocating %d %T elements (%d bytes): %w", op, n, *new(T), size, err)
	}
	if a.store, err = newStorage[T](b, q, size); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("array: %s: %w", op, err)
	}
	return a, nil
}

// byteSize returns the bytes of n elements of T, or an error matching
// cl.ErrInvalidBufferSize for a negative n, or for one whose bytes exceed
// the largest buffer of q's device; the latter also matches
// allocator.ErrOutOfMemory. The comparison divides rather than
// multiplies: n·size can overflow int64 (n = 1<<61 float64 elements is 0
// bytes in int64 arithmetic).
func byteSize[T Elem](q *cl.CommandQueue, n int) (int64, error) {
	if n < 0 {
		return 0, fmt.Errorf("negative length %d: %w", n, cl.ErrInvalidBufferSize)
	}
	largest := int64(math.MaxInt64)
	if d := q.Device(); d != nil && d.MaxMemAllocSize > 0 {
		largest = d.MaxMemAllocSize
	}
	if int64(n) > largest/elemSize[T]() {
		return 0, outOfMemory{fmt.Errorf("%d %T elements are more than the device's largest buffer (%d bytes) holds: %w",
			n, *new(T), largest, cl.ErrInvalidBufferSize)}
	}
	return int64(n) * elemSize[T](), nil
}

// outOfMemory is byteSize's error for a length too large for the device:
// err, with its message, that also matches allocator.ErrOutOfMemory (and
// so mempool.ErrOutOfMemory, the same value), as pool.Allocate's refusal
// of the same size does.
type outOfMemory struct{ err error }

func (e outOfMemory) Error() string        { return e.err.Error() }
func (e outOfMemory) Unwrap() error        { return e.err }
func (e outOfMemory) Is(target error) bool { return target == allocator.ErrOutOfMemory }

// allocate asks alloc for size bytes for an array on q, and returns the
// block as the array keeps it.
func allocate(alloc Alloc, size int64, q *cl.CommandQueue) (Block, error) {
	b, err := callAlloc(alloc, size)
	if err != nil {
		return nil, err
	}
	if nilptr.Is(b) {
		return nil, errors.New("the allocator returned neither memory nor an error")
	}
	if buf, ok := b.(*cl.Buffer); ok {
		b = rawBlock{buf}
	}
	return b, nil
}

// callAlloc calls alloc, and turns a panic in it into an error.
func callAlloc(alloc Alloc, size int64) (b Block, err error) {
	defer func() {
		if v := recover(); v != nil {
			b, err = nil, fmt.Errorf("the allocator panicked: %v", v)
		}
	}()
	return alloc(size)
}

// queued is a Block that knows the queue it was allocated for and can
// record another, as *mempool.PooledBuffer does.
type queued interface {
	Queue() *cl.CommandQueue
	RecordQueue(q *cl.CommandQueue) error
}

// onQueue makes a block of q's context, allocated for another queue than
// q (pool.Allocate on the allocator's queue, say), safe to use on q, both
// ways: q waits for the commands already enqueued on the block's queue (a
// marker there, a barrier on q), which may still use the block's memory
// for its previous owner; and the block records q (RecordQueue, as
// torch's record_stream), so that the pool reuses it only after the
// array's commands on q.
func onQueue(b Block, q *cl.CommandQueue) error {
	qb, ok := b.(queued)
	if !ok || qb.Queue() == q {
		return nil
	}
	if err := qb.RecordQueue(q); err != nil {
		return err
	}
	bq := qb.Queue()
	if bq == nil {
		return nil // a pool of no queue waits on the host before it reuses a block
	}
	m, err := bq.EnqueueMarker()
	if err != nil {
		return fmt.Errorf("ordering after the block's queue: %w", err)
	}
	// Another queue may wait on the marker only once its queue has been
	// flushed (the OpenCL specification; mempool's markers are too).
	if err = bq.Flush(); err == nil {
		err = q.EnqueueBarrier(m)
	}
	if rerr := m.Release(); err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("ordering after the block's queue: %w", err)
	}
	return nil
}

// Zeros returns an array of n zeros. alloc and n are as for Empty.
func Zeros[T Elem, B Block](q *cl.CommandQueue, n int, alloc func(int64) (B, error)) (*Array[T], error) {
	return full[T]("Zeros", q, n, 0, adapt(alloc))
}

// Full returns an array of n copies of v. alloc and n are as for Empty.
func Full[T Elem, B Block](q *cl.CommandQueue, n int, v T, alloc func(int64) (B, error)) (*Array[T], error) {
	return full[T]("Full", q, n, v, adapt(alloc))
}

func full[T Elem](op string, q *cl.CommandQueue, n int, v T, alloc Alloc) (*Array[T], error) {
	a, err := newArray[T](op, q, n, alloc)
	if err != nil {
		return nil, err
	}
	if err := a.fill(op, v); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// Arange returns start, start+step, ..., n elements. alloc and n are as
// for Empty.
func Arange[T Elem, B Block](q *cl.CommandQueue, n int, start, step T, alloc func(int64) (B, error)) (*Array[T], error) {
	a, err := newArray[T]("Arange", q, n, adapt(alloc))
	if err != nil || n == 0 {
		return a, err
	}
	if err := run[T]("Arange", q, "arange", n, nil, a.ptr(), start, step, int64(n)); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// FromHost returns an array holding a copy of data. alloc is as for Empty.
func FromHost[T Elem, B Block](q *cl.CommandQueue, data []T, alloc func(int64) (B, error)) (*Array[T], error) {
	a, err := newArray[T]("FromHost", q, len(data), adapt(alloc))
	if err != nil || len(data) == 0 {
		return a, err
	}
	if err := a.write(cl.Bytes(data)); err != nil {
		a.Close()
		return nil, fmt.Errorf("array: FromHost: %w", err)
	}
	return a, nil
}

// Len returns the number of elements.
func (a *Array[T]) Len() int {
	if a == nil {
		return 0
	}
	return a.n
}

// Queue returns the queue the array's operations run on.
func (a *Array[T]) Queue() *cl.CommandQueue {
	if a == nil {
		return nil
	}
	return a.q
}

// Allocator returns the allocator the array and its results use: the one
// it was made with, or for an array made with nil, the default allocator
// in effect then.
func (a *Array[T]) Allocator() Alloc {
	if a == nil {
		return nil
	}
	return a.alloc
}

// Buffer returns the device buffer (nil for an empty or closed array, and
// for one in SVM: see SVM). The array's elements are Len elements from
// Offset on; the buffer may be longer (a pool's block, the segment an
// arena's block is part of, or the memory of the array a view was sliced
// from).
func (a *Array[T]) Buffer() *cl.Buffer {
	if a == nil || a.closed || a.store == nil {
		return nil
	}
	return a.store.mem.buf
}

// SVM returns the shared virtual memory the array is in: nil for an
// empty or closed array, and for one in a buffer. As for Buffer, the
// array's elements are Len elements from Offset on.
func (a *Array[T]) SVM() *cl.SVM {
	if a == nil || a.closed || a.store == nil {
		return nil
	}
	return a.store.mem.svm
}

// Offset returns the index in Buffer (or SVM) of the array's first
// element: 0 but for views and arrays in a block at an offset (see Based
// and SVMBased).
func (a *Array[T]) Offset() int {
	switch {
	case a == nil:
		return 0
	case a.store == nil:
		return a.off
	}
	return a.store.start + a.off
}

// ptr is the array as kernels take it: its memory, and the index of its
// first element there.
func (a *Array[T]) ptr() ptr { return ptr{a.store.mem, int64(a.store.start + a.off), a.store} }

// read copies the array's elements into dst, which holds Len of them, and
// write copies src, as many, into the array; both block.
func (a *Array[T]) read(dst []byte) error {
	err := a.store.mem.read(a.q, a.ptr().index*elemSize[T](), dst)
	runtime.KeepAlive(a) // its block stays its own until the read is done (see ptr)
	return err
}
func (a *Array[T]) write(src []byte) error {
	err := a.store.mem.write(a.q, a.ptr().index*elemSize[T](), src)
	runtime.KeepAlive(a)
	return err
}

// Slice returns a view of the elements lo to hi-1, as a[lo:hi] is of a Go
// slice: an array over the same memory, so that each sees what the other
// writes. Results of operations on a view are new arrays, as for any array.
// The memory goes back to the allocator when a and all views of it are
// closed, in any order. Bounds outside 0 <= lo <= hi <= Len are an error
// (ErrOutOfRange).
func (a *Array[T]) Slice(lo, hi int) (*Array[T], error) {
	if err := check("Slice", self(a)); err != nil {
		return nil, err
	}
	if lo < 0 || hi < lo || hi > a.n {
		return nil, fmt.Errorf("array: Slice: [%d:%d] of %d elements: %w", lo, hi, a.n, ErrOutOfRange)
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
	if err := check("Get", self(a)); err != nil {
		return nil, err
	}
	return a.get("Get")
}

// get is Get, for the exported call op.
func (a *Array[T]) get(op string) ([]T, error) {
	out := make([]T, a.n)
	if a.n == 0 {
		return out, nil
	}
	if err := a.read(cl.Bytes(out)); err != nil {
		return nil, fmt.Errorf("array: %s: %w", op, err)
	}
	return out, nil
}

// Copy returns a new array with the same elements, from the same allocator.
func (a *Array[T]) Copy() (*Array[T], error) {
	if err := check("Copy", self(a)); err != nil {
		return nil, err
	}
	c, err := newArray[T]("Copy", a.q, a.n, a.alloc)
	if err != nil || a.n == 0 {
		return c, err
	}
	if err := copyElems[T]("Copy", a.q, c.ptr(), a.ptr(), a.n); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close gives the array's memory back to its allocator (to the pool, for a
// pooled one; through allocator.Free, for a raw allocator's *cl.Buffer),
// once no view of it remains open. Commands already enqueued on the
// array's in-order queue still see the memory: the queue runs them before
// any later user of the block. A second Close returns ErrClosed.
func (a *Array[T]) Close() error {
	if err := check("Close", self(a)); err != nil {
		return err
	}
	a.closed = true
	if a.store == nil || a.store.refs.Add(-1) > 0 {
		return nil
	}
	if err := a.store.block.Close(); err != nil {
		return fmt.Errorf("array: Close: %w", err)
	}
	return nil
}

// Closed reports whether Close has been called.
func (a *Array[T]) Closed() bool { return a != nil && a.closed }

// operand is an array an operation takes, with the name the operation's
// documentation gives it ("x", "y"), for its errors.
type operand[T Elem] struct {
	name string
	a    *Array[T]
}

// self is the only operand of a method that takes no other array; its
// errors need no name.
func self[T Elem](a *Array[T]) operand[T] { return operand[T]{a: a} }

// check returns an error unless every operand is an open array, and all
// are on one queue and of one length. Operands on different queues are
// refused (ErrQueueMismatch) rather than ordered: a kernel on one queue
// would race with the pending work of the other. The error names op and,
// when there are several operands, the failing one.
func check[T Elem](op string, operands ...operand[T]) error {
	for _, o := range operands {
		var err error
		switch {
		case o.a == nil:
			err = ErrNilArray
		case o.a.closed:
			err = ErrClosed
		default:
			continue
		}
		if len(operands) == 1 {
			return fmt.Errorf("array: %s: %w", op, err)
		}
		return fmt.Errorf("array: %s: %s: %w", op, o.name, err)
	}
	first := operands[0]
	for _, o := range operands[1:] {
		switch {
		case o.a.q.Context() != first.a.q.Context():
			return fmt.Errorf("array: %s: %s and %s: %w", op, first.name, o.name, ErrContextMismatch)
		case o.a.q != first.a.q:
			return fmt.Errorf("array: %s: %s and %s: %w", op, first.name, o.name, ErrQueueMismatch)
		case o.a.n != first.a.n:
			return fmt.Errorf("array: %s: %s has %d elements, %s has %d: %w", op, o.name, o.a.n, first.name, first.a.n, ErrLengthMismatch)
		}
	}
	return nil
}

// checkInPlace is check for an update of z from z and the other operands:
// it also refuses, with ErrOverlap, an operand that shares z's memory at
// another offset and overlaps it, since an element-wise kernel would then
// read elements that other work-items have already overwritten.
func checkInPlace[T Elem](op string, z operand[T], others ...operand[T]) error {
	if err := check(op, append([]operand[T]{z}, others...)...); err != nil {
		return err
	}
	for _, x := range others {
		zs, xs := z.a, x.a
		if xs.store == zs.store && xs.off != zs.off && xs.off < zs.off+zs.n && zs.off < xs.off+xs.n {
			return fmt.Errorf("array: %s: %s is [%d:%d] and %s is [%d:%d] of the same memory: %w",
				op, z.name, zs.off, zs.off+zs.n, x.name, xs.off, xs.off+xs.n, ErrOverlap)
		}
	}
	return nil
}
