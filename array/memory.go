package array

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/clpool/clpool/cl"
)

// memory is where an array's elements live: a device buffer or an SVM
// allocation, never both. It is the one place that tells the two apart:
// kernels, transfers and copies go through it, and the rest of the package
// sees only an array's ptr.
type memory struct {
	buf *cl.Buffer
	svm *cl.SVM
}

// memoryOf returns the memory of block b and the byte offset of b's first
// byte in it. SVMBased is asked first: a pooled block of an SVM pool is
// also Based, with a nil Base; and one of a buffer pool answers a nil SVM.
func memoryOf(b Block) (memory, int64) {
	if sb, ok := b.(SVMBased); ok && sb.SVM() != nil {
		return memory{svm: sb.SVM()}, sb.Offset()
	}
	if bb, ok := b.(Based); ok {
		return memory{buf: bb.Base()}, bb.Offset()
	}
	return memory{buf: b.Buffer()}, 0
}

// size returns the bytes of the memory.
func (m memory) size() int64 {
	if m.svm != nil {
		return m.svm.Size()
	}
	return m.buf.Size()
}

// check refuses memory that is neither a buffer nor SVM, or that is of
// another context than q (a default allocator set for one context, used on
// a queue of another).
func (m memory) check(q *cl.CommandQueue) error {
	var ctx *cl.Context
	switch {
	case m.svm != nil:
		ctx = m.svm.Context()
	case m.buf != nil:
		ctx = m.buf.Context()
	default:
		return errors.New("the allocator's block has neither a buffer nor SVM")
	}
	if ctx != q.Context() {
		return fmt.Errorf("the allocator's memory is not in the queue's context: %w", ErrContextMismatch)
	}
	return nil
}

// kernelArg is the memory as the __global T* argument of a kernel: the
// buffer, or the SVM, which cl.Kernel.SetArg passes as the pointer to its
// start (SetArgSVMPointer with offset 0). Either way the kernel adds the
// element index it gets next to it (see ptr).
func (m memory) kernelArg() any {
	if m.svm != nil {
		return m.svm
	}
	return m.buf
}

// read copies len(dst) bytes from offset into dst, blocking.
func (m memory) read(q *cl.CommandQueue, offset int64, dst []byte) error {
	if m.svm != nil {
		return q.ReadSVM(m.svm, offset, dst)
	}
	return q.ReadBuffer(m.buf, offset, dst)
}

// write copies src into the memory from offset, blocking.
func (m memory) write(q *cl.CommandQueue, offset int64, src []byte) error {
	if m.svm != nil {
		return q.WriteSVM(m.svm, offset, src)
	}
	return q.WriteBuffer(m.buf, offset, src)
}

// ptr is an array's elements as a kernel takes them: the memory, and the
// index of the array's first element there (a view's, or a block's at an
// offset in a larger buffer or SVM, is past 0). run passes each ptr as
// those two arguments, the kernels' (z, zo), (x, xo), ...
//
// keep is the storage whose block the memory is: a ptr keeps it
// reachable, so that an array its caller drops (allowed: the block goes
// back when the garbage collector finds the array) is not found before its
// command is enqueued. Whatever enqueues with a ptr keeps it alive until
// the enqueue returns (runtime.KeepAlive): then the block's queue orders
// its next owner after the command (s35b: a Scale whose operand was
// dropped read another owner's data).
type ptr struct {
	mem   memory
	index int64
	keep  *storage
}

// kernelArgs returns args with each ptr expanded into its two kernel
// arguments.
func kernelArgs(args []any) []any {
	out := make([]any, 0, len(args)+4)
	for _, a := range args {
		if p, ok := a.(ptr); ok {
			out = append(out, p.mem.kernelArg(), p.index)
		} else {
			out = append(out, a)
		}
	}
	return out
}

// copyElems enqueues the copy of n elements of T from src to dst on q,
// for the exported call op: a device copy between two buffers
// (clEnqueueCopyBuffer) or two SVM allocations (clEnqueueSVMMemcpy), and
// the copy kernel between a buffer and SVM, for which OpenCL has no copy
// command. None waits.
func copyElems[T Elem](op string, q *cl.CommandQueue, dst, src ptr, n int) error {
	size := int64(n) * elemSize[T]()
	dOff, sOff := dst.index*elemSize[T](), src.index*elemSize[T]()
	var ev *cl.Event
	var err error
	switch {
	case dst.mem.buf != nil && src.mem.buf != nil:
		ev, err = q.EnqueueCopyBuffer(src.mem.buf, dst.mem.buf, sOff, dOff, size)
	case dst.mem.svm != nil && src.mem.svm != nil:
		ev, err = q.EnqueueSVMMemcpy(false, dst.mem.svm, dOff, src.mem.svm, sOff, size)
	default:
		return run[T](op, q, "copy", n, nil, dst, src, int64(n))
	}
	runtime.KeepAlive(dst)
	runtime.KeepAlive(src)
	if err == nil {
		err = ev.Release()
	}
	if err != nil {
		return fmt.Errorf("array: %s: %w", op, err)
	}
	return nil
}
