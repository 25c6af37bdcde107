package mempool

import (
	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
)

// This file is what the pool's memory is: one pool serves device buffers
// (New) and shared virtual memory (NewSVM), as PyOpenCL's mempool.hpp is
// one pool over a pointer type. Everything else in the pool (policies,
// limits, queues, hooks, statistics) sees a segment's memory only as a
// mem, and asks its source for more.

// mem is a segment's memory, or the sub-buffer kept with a block (see
// PooledBuffer.Buffer): a device buffer or an SVM allocation, never both.
// Its zero value is no memory.
type mem struct {
	buf *cl.Buffer
	svm *cl.SVM
}

// source is where a pool's segments come from and go back to: an
// allocator.Allocator or an allocator.SVMAllocator. Its methods are
// called outside the pool's lock.
type source interface {
	allocate(n int64) (mem, error)
	free(m mem) error
	// outer returns the allocator the pool was made over, for the walks
	// through wrappers (see walk).
	outer() any
}

// buffers is the source of a pool of device buffers.
type buffers struct{ a allocator.Allocator }

func (s buffers) allocate(n int64) (mem, error) {
	buf, err := s.a.Allocate(n)
	return mem{buf: buf}, err
}
func (s buffers) free(m mem) error { return s.a.Free(m.buf) }
func (s buffers) outer() any       { return s.a }

// svms is the source of a pool of SVM.
type svms struct{ a allocator.SVMAllocator }

func (s svms) allocate(n int64) (mem, error) {
	m, err := s.a.Allocate(n)
	return mem{svm: m}, err
}
func (s svms) free(m mem) error { return s.a.Free(m.svm) }
func (s svms) outer() any       { return s.a }
