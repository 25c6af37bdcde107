package cl

/*
#include "clpool.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// This file copies between shared virtual memory and Go memory:
// clEnqueueSVMMemcpy takes any host pointer on either side, so a coarse-
// grain SVM needs no map for a transfer, as a buffer needs none for
// clEnqueueReadBuffer.

// ReadSVM copies len(dst) bytes of s from offset into dst (a blocking
// clEnqueueSVMMemcpy to host memory), after the commands enqueued on q
// before it; dst holds them on return. It is ReadBuffer for SVM, and works
// on coarse- and fine-grain SVM alike, without a map. s must be live and
// of q's context (else ErrInvalidValue, or ErrInvalidContext), not mapped
// (EnqueueSVMMap; else ErrInvalidValue), and the region inside s and of
// at least one byte (else ErrInvalidValue); dst must not overlap the
// region (a fine-grain SVM's Bytes may; else ErrMemCopyOverlap).
func (q *CommandQueue) ReadSVM(s *SVM, offset int64, dst []byte) error {
	return q.copySVMHost(s, offset, dst, false)
}

// WriteSVM copies src into s from offset (a blocking clEnqueueSVMMemcpy
// from host memory), after the commands enqueued on q before it; src may
// be reused on return. It is WriteBuffer for SVM; the rules of ReadSVM
// apply.
func (q *CommandQueue) WriteSVM(s *SVM, offset int64, src []byte) error {
	return q.copySVMHost(s, offset, src, true)
}

// copySVMHost copies between host and s at offset: from host into s if
// write, else from s into host, blocking.
func (q *CommandQueue) copySVMHost(s *SVM, offset int64, host []byte, write bool) error {
	const call = "clEnqueueSVMMemcpy"
	qid, err := q.handle(call)
	if err != nil {
		return err
	}
	size := int64(len(host))
	p, err := s.hostCopyRegion(call, q.ctx, offset, size)
	if err != nil {
		return err
	}
	h := unsafe.Pointer(unsafe.SliceData(host))
	if hs, ps := uintptr(h), uintptr(p); hs < ps+uintptr(size) && ps < hs+uintptr(size) {
		return misuse(call, ErrMemCopyOverlap, fmt.Sprintf("the host slice overlaps [%d, %d) of the SVM", offset, offset+size))
	}
	dst, src, dir := h, p, "from"
	if write {
		dst, src, dir = p, h, "to"
	}
	if q.ctx.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	code := C.clEnqueueSVMMemcpy(qid, C.CL_TRUE, dst, src, C.size_t(size), 0, nil, nil)
	runtime.KeepAlive(q)
	runtime.KeepAlive(s)
	runtime.KeepAlive(host)
	if code != 0 {
		return &CallError{Call: call, Status: Status(code),
			Detail: fmt.Sprintf("host memory %s [%d, %d) of a %d-byte SVM", dir, offset, offset+size, s.size)}
	}
	return nil
}

// hostCopyRegion checks s for a copy of size bytes from offset between it
// and host memory on a queue of ctx, and returns the region's address. It
// holds s.mu for the checks only, not for the copy: a blocking copy may
// take long, and s may be a pool's segment whose other blocks belong to
// other goroutines. Freeing s during the copy is a misuse, as freeing it
// under any enqueued command is.
func (s *SVM) hostCopyRegion(call string, ctx *Context, offset, size int64) (unsafe.Pointer, error) {
	if s != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	p, err := s.at(call, ctx, offset, size)
	switch {
	case err != nil:
		return nil, err
	case size == 0:
		return nil, misuse(call, ErrInvalidValue, "size 0: the host slice is empty")
	case s.mapped:
		return nil, misuse(call, ErrInvalidValue, fmt.Sprintf("the SVM is mapped at [%d, %d): EnqueueSVMUnmap it first", s.mapOffset, s.mapOffset+s.mapSize))
	}
	return p, nil
}
