package array

import (
	"errors"
	"fmt"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/nilptr"
)

// SVMAlloc returns the Alloc that puts arrays in shared virtual memory
// from a raw SVM allocator (allocator.NewSVM, NewImmediateSVM, an
// SVMBudget over them): each array, result and temporary gets an
// allocation of its own, which goes back through a.Free at the array's
// last Close. It is the adapter a raw SVM allocator needs, where a
// buffer allocator's Allocate passes as it is: a *cl.SVM is not a Block.
// A pool over SVM (mempool.NewSVM) needs none: pass its Allocate.
//
//	svm, err := allocator.NewSVM(q.Context(), false)  // coarse grain
//	x, err := array.Zeros[float32](q, n, array.SVMAlloc(svm))
//
// clSVMFree does not wait for the commands that use the memory, as
// releasing a buffer does: the Close that frees an allocation first waits
// for the array's queue (clFinish), so that closing an array right after
// its last operation is enqueued stays legal. Where that wait costs too
// much, pool the SVM. An allocation whose queue cannot be finished (a
// queue released before the array's Close) is not freed: Close returns the
// error, and the memory leaks rather than being freed under a command that
// may still use it.
//
// The name is of what it returns, an Alloc over SVM, as
// cl.Context.SVMAlloc's is of clSVMAlloc. A nil a is an error at the
// first allocation, as is a nil pointer of an allocator type.
func SVMAlloc(a allocator.SVMAllocator) Alloc {
	return func(size int64) (Block, error) {
		if nilptr.Is(a) { // nil, or a nil pointer in the interface
			return nil, errors.New("SVMAlloc: nil allocator.SVMAllocator")
		}
		s, err := a.Allocate(size)
		if err != nil || s == nil {
			return nil, err // nil and no error: allocate reports it
		}
		return &svmBlock{svm: s, a: a}, nil
	}
}

// svmBlock is an allocation of SVMAlloc's: a Block at offset 0 of its own
// SVM, freed through the allocator that made it, once the queues the
// arrays over it used (RecordQueue, called as the array is made) have
// finished.
type svmBlock struct {
	svm    *cl.SVM
	a      allocator.SVMAllocator
	queues []*cl.CommandQueue
}

func (b *svmBlock) Buffer() *cl.Buffer { return nil }
func (b *svmBlock) SVM() *cl.SVM       { return b.svm }
func (b *svmBlock) Offset() int64      { return 0 }

// Queue returns the first queue recorded; nil before any.
func (b *svmBlock) Queue() *cl.CommandQueue {
	if len(b.queues) == 0 {
		return nil
	}
	return b.queues[0]
}

// RecordQueue adds q to the queues Close waits for.
func (b *svmBlock) RecordQueue(q *cl.CommandQueue) error {
	b.queues = append(b.queues, q)
	return nil
}

// Close waits for the recorded queues, then frees the allocation.
func (b *svmBlock) Close() error {
	for _, q := range b.queues {
		if err := q.Finish(); err != nil {
			return fmt.Errorf("waiting for the array's queue before freeing its SVM (not freed): %w", err)
		}
	}
	return b.a.Free(b.svm)
}
