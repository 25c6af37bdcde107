package array

import (
	"errors"
	"fmt"
	"math"
	"unsafe"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/nilptr"
)

// Staging is pinned host memory that GetPinned and SetPinned transfer
// through: the host bytes of buffers an allocator.Pinned allocated (see
// its doc), taken for the length of one transfer from an allocator of
// them. With a pool over the Pinned, transfers reuse the pool's blocks
// and make no OpenCL allocation once it is warm:
//
//	pinned, err := allocator.NewPinned(q)
//	pool, err := mempool.New(pinned)
//	stage, err := array.NewStaging(pinned, pool.Allocate)
//	err = x.GetPinned(stage, dst)
//
// With pinned.Allocate instead of pool.Allocate, each transfer allocates,
// maps, unmaps and releases a pinned buffer of its size, which costs more
// than the transfer on most runtimes. NewPinnedSlice takes a block for
// longer, for transfers without the copy between staging memory and Go
// memory that GetPinned and SetPinned make (GetInto, SetFrom). A Staging is safe for concurrent
// use if its allocator is (a pool is). The staging memory may be of
// another context than the arrays: a transfer uses only its host bytes.
type Staging struct {
	p     *allocator.Pinned
	alloc Alloc
}

// NewStaging returns the Staging that takes blocks from alloc, whose memory
// must be p's: p.Allocate, or the Allocate of a pool over p (or over
// wrappers of p, such as allocator.Counting). A nil p or alloc is an error.
func NewStaging[B Block](p *allocator.Pinned, alloc func(int64) (B, error)) (*Staging, error) {
	if p == nil || alloc == nil {
		return nil, errors.New("array: NewStaging: nil Pinned or allocator")
	}
	return &Staging{p: p, alloc: adapt(alloc)}, nil
}

// take returns size bytes of pinned host memory and the block they are
// part of, which the caller closes once the transfer is done.
func (s *Staging) take(size int64) ([]byte, Block, error) {
	b, err := callAlloc(s.alloc, size) // a panic is an error, as for arrays
	if err != nil {
		return nil, nil, fmt.Errorf("allocating %d bytes of staging memory: %w", size, err)
	}
	if nilptr.Is(b) {
		return nil, nil, errors.New("the staging allocator returned neither memory nor an error")
	}
	if buf, ok := b.(*cl.Buffer); ok {
		b = rawBlock{buf} // closed through allocator.Free, which unmaps it
	}
	base, off := b.Buffer(), int64(0)
	if bb, ok := b.(Based); ok {
		base, off = bb.Base(), bb.Offset()
	}
	if off < 0 {
		_ = b.Close()
		return nil, nil, fmt.Errorf("the staging allocator's block is at byte offset %d: %w", off, cl.ErrInvalidValue)
	}
	host := s.p.Host(base)
	if host == nil {
		_ = b.Close()
		return nil, nil, errors.New("the staging allocator's memory is not the pinned memory of the Staging's allocator.Pinned")
	}
	if has := ownBytes(b, int64(len(host))-off); has < size {
		_ = b.Close()
		return nil, nil, fmt.Errorf("the staging allocator's block has %d bytes, not the %d asked for: %w", max(has, 0), size, cl.ErrInvalidBufferSize)
	}
	return host[off : off+size], b, nil
}

// GetPinned copies the array into dst, which must have Len elements
// (else ErrLengthMismatch), through pinned staging memory from s: the
// device writes the staging bytes (a blocking read, after the operations
// before it on the array's queue), and the host copies them to dst. It is
// Get into memory of the caller's, for runtimes that transfer faster to
// pinned memory than to Go memory.
func (a *Array[T]) GetPinned(s *Staging, dst []T) error {
	host, block, err := a.stage("GetPinned", s, len(dst))
	if err != nil || host == nil {
		return err
	}
	err = a.read(host)
	if err == nil {
		copy(cl.Bytes(dst), host)
	}
	return a.unstage("GetPinned", block, err)
}

// SetPinned copies src, which must have Len elements (else
// ErrLengthMismatch), into the array through pinned staging memory from
// s: the host copies src to the staging bytes, and the device reads them
// (a blocking write, after the operations before it on the array's
// queue). src may be reused when it returns.
func (a *Array[T]) SetPinned(s *Staging, src []T) error {
	host, block, err := a.stage("SetPinned", s, len(src))
	if err != nil || host == nil {
		return err
	}
	copy(host, cl.Bytes(src))
	err = a.write(host)
	return a.unstage("SetPinned", block, err)
}

// stage checks the arguments of op, which transfers n elements, and takes
// the staging memory for it; nil bytes and no error for an empty array.
func (a *Array[T]) stage(op string, s *Staging, n int) ([]byte, Block, error) {
	if err := a.checkHost(op, n); err != nil {
		return nil, nil, err
	}
	switch {
	case s == nil:
		return nil, nil, fmt.Errorf("array: %s: nil Staging", op)
	case n == 0:
		return nil, nil, nil
	}
	host, block, err := s.take(int64(n) * elemSize[T]())
	if err != nil {
		return nil, nil, fmt.Errorf("array: %s: %w", op, err)
	}
	return host, block, nil
}

// unstage gives the staging block back and returns op's error: that of the
// transfer, else that of the block's Close.
func (a *Array[T]) unstage(op string, block Block, err error) error {
	if cerr := block.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("array: %s: %w", op, err)
	}
	return nil
}

// PinnedSlice is n elements of T in pinned host memory, a block of a
// Staging's allocator held until Close. Transfers between an array and its
// Data (GetInto, SetFrom) need no copy on the host: on a GPU runtime they
// run at the speed of pinned memory, where GetPinned and SetPinned add a
// copy between the staging bytes and Go memory. Data is a Go slice over
// memory the OpenCL runtime owns: it holds no Go pointers, must not be
// kept past Close, and is not moved or collected by the garbage collector.
// Nor does it keep the PinnedSlice alive: keep the PinnedSlice reachable
// (Close it when done) while Data is in use: a dropped PinnedSlice's
// memory may go back to the allocator (a pool's block does, with drop
// safety) and be handed out again.
type PinnedSlice[T Elem] struct {
	data  []T
	block Block
}

// NewPinnedSlice returns n elements of T of pinned host memory from s,
// whose contents are undefined. n must be positive.
func NewPinnedSlice[T Elem](s *Staging, n int) (*PinnedSlice[T], error) {
	switch {
	case s == nil:
		return nil, errors.New("array: NewPinnedSlice: nil Staging")
	case n <= 0:
		return nil, fmt.Errorf("array: NewPinnedSlice: %d elements: %w", n, cl.ErrInvalidBufferSize)
	case int64(n) > math.MaxInt64/elemSize[T]():
		return nil, fmt.Errorf("array: NewPinnedSlice: %d elements overflow: %w", n, cl.ErrInvalidBufferSize)
	}
	host, block, err := s.take(int64(n) * elemSize[T]())
	if err != nil {
		return nil, fmt.Errorf("array: NewPinnedSlice: %w", err)
	}
	ptr := unsafe.Pointer(unsafe.SliceData(host))
	if uintptr(ptr)%uintptr(elemSize[T]()) != 0 {
		_ = block.Close()
		return nil, fmt.Errorf("array: NewPinnedSlice: the staging memory at %#x is not aligned for %T", uintptr(ptr), *new(T))
	}
	data := unsafe.Slice((*T)(ptr), n)
	return &PinnedSlice[T]{data: data, block: block}, nil
}

// Data returns the elements; nil after Close, and for a nil PinnedSlice.
func (p *PinnedSlice[T]) Data() []T {
	if p == nil {
		return nil
	}
	return p.data
}

// Close gives the memory back to the Staging's allocator. The transfers
// that use Data must have completed (GetInto and SetFrom have, on return).
// A second Close returns ErrClosed; a nil PinnedSlice, ErrNilArray.
func (p *PinnedSlice[T]) Close() error {
	if p == nil {
		return fmt.Errorf("array: PinnedSlice.Close: nil PinnedSlice: %w", ErrNilArray)
	}
	if p.block == nil {
		return fmt.Errorf("array: PinnedSlice.Close: %w", ErrClosed)
	}
	b := p.block
	p.data, p.block = nil, nil
	if err := b.Close(); err != nil {
		return fmt.Errorf("array: PinnedSlice.Close: %w", err)
	}
	return nil
}

// GetInto copies the array into dst, which must have Len elements (else
// ErrLengthMismatch), waiting for the operations before it: Get into
// memory of the caller's. With dst the Data of a PinnedSlice, the device
// writes pinned memory directly.
func (a *Array[T]) GetInto(dst []T) error {
	if err := a.checkHost("GetInto", len(dst)); err != nil || a.n == 0 {
		return err
	}
	if err := a.read(cl.Bytes(dst)); err != nil {
		return fmt.Errorf("array: GetInto: %w", err)
	}
	return nil
}

// SetFrom copies src, which must have Len elements (else
// ErrLengthMismatch), into the array, after the operations before it; src
// may be reused on return. With src the Data of a PinnedSlice, the device
// reads pinned memory directly.
func (a *Array[T]) SetFrom(src []T) error {
	if err := a.checkHost("SetFrom", len(src)); err != nil || a.n == 0 {
		return err
	}
	if err := a.write(cl.Bytes(src)); err != nil {
		return fmt.Errorf("array: SetFrom: %w", err)
	}
	return nil
}

// checkHost checks the arguments of op, which transfers n elements
// between the array and the host.
func (a *Array[T]) checkHost(op string, n int) error {
	if err := check(op, self(a)); err != nil {
		return err
	}
	if n != a.n {
		return fmt.Errorf("array: %s: the host slice has %d elements, the array %d: %w", op, n, a.n, ErrLengthMismatch)
	}
	return nil
}
