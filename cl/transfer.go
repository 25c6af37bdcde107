package cl

/*
#include "clpool.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"
)

// Scalar is the element types that can be moved between host and device
// memory as raw bytes: fixed-size numbers, holding no Go pointers.
type Scalar interface {
	~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64
}

// Bytes returns the memory of s as a byte slice, without copying.
func Bytes[T Scalar](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}

// hostPtr returns the address of data for a transfer, and for a non-blocking
// one a Pinner that keeps it valid until the command completes.
func hostPtr(data []byte, blocking bool) (unsafe.Pointer, *runtime.Pinner) {
	if len(data) == 0 {
		return nil, nil
	}
	p := unsafe.Pointer(&data[0])
	if blocking {
		return p, nil
	}
	pin := new(runtime.Pinner)
	pin.Pin(p)
	return p, pin
}

// transferArgs checks what every read, write, fill and copy needs: a live
// queue, a live buffer of the queue's context and an offset that is not
// negative.
func (q *CommandQueue) transferArgs(call string, b *Buffer, offset int64) (C.cl_command_queue, C.cl_mem, error) {
	qid, err := q.handle(call)
	if err != nil {
		return nil, nil, err
	}
	mem, err := b.handle(call)
	if err != nil {
		return nil, nil, err
	}
	if b.ctx != q.ctx {
		return nil, nil, misuse(call, ErrInvalidContext, "the buffer belongs to another context than the queue")
	}
	if offset < 0 {
		return nil, nil, misuse(call, ErrInvalidValue, fmt.Sprintf("negative offset %d", offset))
	}
	return qid, mem, nil
}

// finishEnqueue turns the outcome of an enqueue into the returned event.
func (q *CommandQueue) finishEnqueue(call string, code C.cl_int, ev C.cl_event, pin *runtime.Pinner, wantEvent bool) (*Event, error) {
	if err := callErr(call, int32(code)); err != nil {
		if pin != nil {
			pin.Unpin()
		}
		return nil, err
	}
	if !wantEvent {
		return nil, nil
	}
	return q.newEvent(ev, pin), nil
}

// EnqueueWriteBuffer copies src into b at offset; b must belong to q's
// context (else ErrInvalidContext). A blocking write returns when src may
// be reused, and returns a nil Event. A non-blocking write returns an Event
// that pins src until the write completes: Wait for it or Release it, and
// leave src alone meanwhile.
func (q *CommandQueue) EnqueueWriteBuffer(b *Buffer, blocking bool, offset int64, src []byte, wait ...*Event) (*Event, error) {
	return q.enqueueTransfer("clEnqueueWriteBuffer", 1, b, blocking, offset, src, wait)
}

// EnqueueReadBuffer copies len(dst) bytes of b at offset into dst. Blocking
// and non-blocking reads behave as for EnqueueWriteBuffer.
func (q *CommandQueue) EnqueueReadBuffer(b *Buffer, blocking bool, offset int64, dst []byte, wait ...*Event) (*Event, error) {
	return q.enqueueTransfer("clEnqueueReadBuffer", 0, b, blocking, offset, dst, wait)
}

// enqueueTransfer enqueues a write (write 1) or read (write 0) of data.
func (q *CommandQueue) enqueueTransfer(call string, write C.int, b *Buffer, blocking bool, offset int64, data []byte, wait []*Event) (*Event, error) {
	qid, mem, err := q.transferArgs(call, b, offset)
	if err != nil {
		return nil, err
	}
	if err := region(call, b, offset, int64(len(data))); err != nil {
		return nil, err
	}
	list, n, err := waitList(call, q.ctx, wait)
	if err != nil {
		return nil, err
	}
	if q.ctx.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	p, pin := hostPtr(data, blocking)
	var ev C.cl_event
	evp := &ev
	if blocking {
		evp = nil
	}
	code := C.clpool_transfer(write, qid, mem, cBool(blocking), C.size_t(offset), C.size_t(len(data)), p, n, list, evp)
	runtime.KeepAlive(q)
	runtime.KeepAlive(b)
	runtime.KeepAlive(wait)
	return q.finishEnqueue(call, code, ev, pin, !blocking)
}

// WriteBuffer is a blocking EnqueueWriteBuffer.
func (q *CommandQueue) WriteBuffer(b *Buffer, offset int64, src []byte) error {
	_, err := q.EnqueueWriteBuffer(b, true, offset, src)
	return err
}

// ReadBuffer is a blocking EnqueueReadBuffer.
func (q *CommandQueue) ReadBuffer(b *Buffer, offset int64, dst []byte) error {
	_, err := q.EnqueueReadBuffer(b, true, offset, dst)
	return err
}

// EnqueueFillBuffer fills size bytes of b from offset with copies of
// pattern. The pattern's length must be 1, 2, 4, 8, 16, 32, 64 or 128
// bytes, offset and size multiples of it, and the region inside b; else
// the result is ErrInvalidValue. The pattern is copied at once; it may be
// reused on return.
func (q *CommandQueue) EnqueueFillBuffer(b *Buffer, pattern []byte, offset, size int64, wait ...*Event) (*Event, error) {
	const call = "clEnqueueFillBuffer"
	qid, mem, err := q.transferArgs(call, b, offset)
	if err != nil {
		return nil, err
	}
	plen := int64(len(pattern))
	switch {
	case plen < 1 || plen > 128 || plen&(plen-1) != 0:
		return nil, misuse(call, ErrInvalidValue, fmt.Sprintf("a pattern of %d bytes: it must have 1, 2, 4, 8, 16, 32, 64 or 128", plen))
	case size < 0:
		return nil, misuse(call, ErrInvalidValue, fmt.Sprintf("negative size %d", size))
	case offset%plen != 0 || size%plen != 0:
		return nil, misuse(call, ErrInvalidValue, fmt.Sprintf("offset %d and size %d must be multiples of the pattern's %d bytes", offset, size, plen))
	}
	if err := region(call, b, offset, size); err != nil {
		return nil, err
	}
	list, n, err := waitList(call, q.ctx, wait)
	if err != nil {
		return nil, err
	}
	if q.ctx.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	p, _ := hostPtr(pattern, true)
	var ev C.cl_event
	code := C.clEnqueueFillBuffer(qid, mem, p, C.size_t(len(pattern)), C.size_t(offset), C.size_t(size), n, list, &ev)
	runtime.KeepAlive(q)
	runtime.KeepAlive(b)
	runtime.KeepAlive(pattern)
	runtime.KeepAlive(wait)
	return q.finishEnqueue(call, code, ev, nil, true)
}

// EnqueueCopyBuffer copies size bytes from src at srcOffset to dst at
// dstOffset, on the device. Both buffers must belong to q's context (else
// ErrInvalidContext); a size of 0 is ErrInvalidValue. Ranges that overlap
// in one buffer (src and dst the same, or sub-buffers of one, or one a
// sub-buffer of the other) are ErrMemCopyOverlap, as the specification
// says, on every runtime (Oclgrind copies them).
func (q *CommandQueue) EnqueueCopyBuffer(src, dst *Buffer, srcOffset, dstOffset, size int64, wait ...*Event) (*Event, error) {
	const call = "clEnqueueCopyBuffer"
	qid, smem, err := q.transferArgs(call, src, srcOffset)
	if err != nil {
		return nil, err
	}
	_, dmem, err := q.transferArgs(call, dst, dstOffset)
	if err != nil {
		return nil, err
	}
	if size <= 0 {
		return nil, misuse(call, ErrInvalidValue, fmt.Sprintf("size %d", size))
	}
	if err := errors.Join(region(call, src, srcOffset, size), region(call, dst, dstOffset, size)); err != nil {
		return nil, err
	}
	if overlap(src, dst, srcOffset, dstOffset, size) {
		return nil, misuse(call, ErrMemCopyOverlap, fmt.Sprintf("%d bytes from %d to %d: the ranges overlap in one buffer", size, srcOffset, dstOffset))
	}
	list, n, err := waitList(call, q.ctx, wait)
	if err != nil {
		return nil, err
	}
	if q.ctx.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	var ev C.cl_event
	code := C.clEnqueueCopyBuffer(qid, smem, dmem, C.size_t(srcOffset), C.size_t(dstOffset), C.size_t(size), n, list, &ev)
	runtime.KeepAlive(q)
	runtime.KeepAlive(src)
	runtime.KeepAlive(dst)
	runtime.KeepAlive(wait)
	return q.finishEnqueue(call, code, ev, nil, true)
}

// Touch enqueues a non-blocking write of min(4, size) zero bytes to the start
// of b, from static C memory. Runtimes that allocate lazily commit the
// buffer's memory for it, so an out-of-memory shows here, at allocation time,
// rather than at the first kernel. It returns the enqueue's error.
func (q *CommandQueue) Touch(b *Buffer) error {
	const call = "clEnqueueWriteBuffer"
	qid, mem, err := q.transferArgs(call, b, 0)
	if err != nil {
		return err
	}
	if q.ctx.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	err = callErr(call, int32(C.clpool_touch(qid, mem, C.size_t(min(b.size, 4)))))
	runtime.KeepAlive(q)
	runtime.KeepAlive(b)
	return err
}

func cBool(b bool) C.cl_bool {
	if b {
		return C.CL_TRUE
	}
	return C.CL_FALSE
}

// region returns an error matching ErrInvalidValue, for call, if size
// bytes at offset (not negative) pass the end of b: not every runtime
// checks a sub-buffer's end (POCL reads, writes and copies its
// neighbour's bytes, which in a pool are another block's).
func region(call string, b *Buffer, offset, size int64) error {
	if offset > b.size || size > b.size-offset {
		return misuse(call, ErrInvalidValue, fmt.Sprintf("region [%d, %d) is past the end of a %d-byte buffer", offset, offset+size, b.size))
	}
	return nil
}

// overlap reports whether size bytes at srcOffset of src and at dstOffset
// of dst, each within its buffer, overlap in the memory of one buffer.
func overlap(src, dst *Buffer, srcOffset, dstOffset, size int64) bool {
	sr, s := src.root()
	dr, d := dst.root()
	return sr == dr && s+srcOffset < d+dstOffset+size && d+dstOffset < s+srcOffset+size
}

// root returns the buffer b is a sub-buffer of (b itself if none) and
// where b starts in it.
func (b *Buffer) root() (*Buffer, int64) {
	off := int64(0)
	for b.parent != nil {
		off += b.origin
		b = b.parent
	}
	return b, off
}
