package cl

/*
#include "clpool.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// This file is shared virtual memory (SVM, OpenCL 2.0): memory the host and
// the devices address with the same pointers. The 2.0 functions are called
// only on contexts whose every device reports SVM (Device.SVMCapabilities);
// elsewhere, on OpenCL 1.2 platforms such as Oclgrind, the calls return an
// error matching ErrSVMNotSupported before reaching the ICD loader, whose
// dispatch table for a 1.2 platform may not hold them.

// ErrSVMNotSupported is matched (errors.Is) by the error of an SVM call on
// a context whose devices do not all support what it asks: SVM at all, or
// the fine-grain buffers or atomics its flags ask for. The error is also a
// *CallError, with the Status ErrInvalidOperation (no SVM at all) or
// ErrInvalidValue (a flag the devices do not support).
var ErrSVMNotSupported = errors.New("shared virtual memory not supported")

// unsupportedError is a CallError that also matches ErrSVMNotSupported.
type unsupportedError struct{ err *CallError }

func (e *unsupportedError) Error() string        { return e.err.Error() }
func (e *unsupportedError) Unwrap() error        { return e.err }
func (e *unsupportedError) Is(target error) bool { return target == ErrSVMNotSupported }

func unsupported(call string, s Status, detail string) error {
	return &unsupportedError{&CallError{Call: call, Status: s, Detail: detail}}
}

// SVMFlags are the flags of an SVM allocation (cl_svm_mem_flags).
type SVMFlags uint64

// SVM allocation flags. At most one of the three access flags may be given;
// none means SVMReadWrite. SVMFineGrain needs devices with the capability
// SVMFineGrainBuffer; SVMAtomic needs SVMFineGrain too, and devices with
// SVMAtomics.
const (
	SVMReadWrite SVMFlags = C.CL_MEM_READ_WRITE
	SVMWriteOnly SVMFlags = C.CL_MEM_WRITE_ONLY
	SVMReadOnly  SVMFlags = C.CL_MEM_READ_ONLY
	// SVMFineGrain makes a fine-grain allocation (CL_MEM_SVM_FINE_GRAIN_BUFFER):
	// the host reads and writes it without mapping, once the commands
	// that use it have completed.
	SVMFineGrain SVMFlags = C.CL_MEM_SVM_FINE_GRAIN_BUFFER
	// SVMAtomic (CL_MEM_SVM_ATOMICS) lets host and device share atomic
	// operations on a fine-grain allocation.
	SVMAtomic SVMFlags = C.CL_MEM_SVM_ATOMICS
)

const svmAccess = SVMReadWrite | SVMWriteOnly | SVMReadOnly

// String returns the flags as their names joined by "|".
func (f SVMFlags) String() string {
	var parts []string
	for _, n := range []struct {
		bit  SVMFlags
		name string
	}{{SVMReadWrite, "READ_WRITE"}, {SVMWriteOnly, "WRITE_ONLY"}, {SVMReadOnly, "READ_ONLY"},
		{SVMFineGrain, "SVM_FINE_GRAIN_BUFFER"}, {SVMAtomic, "SVM_ATOMICS"}} {
		if f&n.bit != 0 {
			parts = append(parts, n.name)
			f &^= n.bit
		}
	}
	if f != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint64(f)))
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, "|")
}

// svmFlagsProblem says which rule of clSVMAlloc f breaks, or returns "".
func svmFlagsProblem(f SVMFlags) string {
	switch {
	case f&^(svmAccess|SVMFineGrain|SVMAtomic) != 0:
		return fmt.Sprintf("unknown bits %#x", uint64(f&^(svmAccess|SVMFineGrain|SVMAtomic)))
	case bits.OnesCount64(uint64(f&svmAccess)) > 1:
		return "more than one of READ_WRITE, WRITE_ONLY, READ_ONLY"
	case f&SVMAtomic != 0 && f&SVMFineGrain == 0:
		return "SVM_ATOMICS without SVM_FINE_GRAIN_BUFFER"
	}
	return ""
}

// svmSupportProblem says what of flags devices with the capabilities caps
// do not support, or returns "". The Status is ErrInvalidOperation for no
// SVM at all, else ErrInvalidValue.
func svmSupportProblem(caps SVMCapabilities, f SVMFlags) (Status, string) {
	switch {
	case caps&SVMCoarseGrainBuffer == 0:
		return ErrInvalidOperation, fmt.Sprintf("the context's devices do not all support shared virtual memory (capabilities: %v)", caps)
	case f&SVMFineGrain != 0 && caps&SVMFineGrainBuffer == 0:
		return ErrInvalidValue, fmt.Sprintf("a fine-grain allocation on devices that support only %v", caps)
	case f&SVMAtomic != 0 && caps&SVMAtomics == 0:
		return ErrInvalidValue, fmt.Sprintf("SVM atomics on devices that support only %v", caps)
	}
	return 0, ""
}

// SVMCapabilities returns what shared virtual memory every device of the
// context supports: the intersection of their SVMCapabilities. It is 0
// where any device is of OpenCL 1.x, and for a nil Context.
func (c *Context) SVMCapabilities() SVMCapabilities {
	if c == nil || len(c.devices) == 0 {
		return 0
	}
	caps := c.devices[0].SVMCapabilities
	for _, d := range c.devices[1:] {
		caps &= d.SVMCapabilities
	}
	return caps
}

// SVM is an allocation of shared virtual memory. It is not freed by the
// garbage collector: Free it, once, after the commands that use it have
// completed. Using a freed SVM returns an error matching ErrInvalidValue
// without reaching the driver. The allocation holds a reference to its
// context, given back by Free, so that Free works after Context.Release.
type SVM struct {
	ptr   unsafe.Pointer // C memory, from clSVMAlloc
	size  int64
	flags SVMFlags
	ctx   *Context

	// mu protects the fields below. The calls that pass the SVM to the
	// runtime hold it from their checks (see at) through the call, so that
	// Free cannot come between; a blocking copy to or from host memory
	// holds it for the checks only (see hostCopyRegion).
	mu        sync.Mutex
	freed     bool
	mapped    bool  // a map of the host is outstanding (EnqueueSVMMap)
	mapOffset int64 // its region
	mapSize   int64
}

// MaxSVMAlignment is the largest alignment SVMAlloc may ask of every
// device: the size of long16, the largest OpenCL C type (the embedded
// profile without 64-bit integers has int16, 64 bytes, as its largest).
const MaxSVMAlignment = 128

// SVMAlloc allocates size bytes of shared virtual memory (clSVMAlloc) with
// the given flags, aligned to alignment bytes (0: the runtime's default,
// which suits any OpenCL C type; else a power of two).
//
// Every check clSVMAlloc leaves to its NULL result is made here first, so
// that each says what is wrong: a context whose devices do not all support
// SVM, or the fine-grain buffers or atomics flags ask for, returns an error
// matching ErrSVMNotSupported; flags that break the rules of SVMFlags or an
// alignment that is negative or not a power of two ErrInvalidValue; a size
// of 0 or less, or over MaxMemAllocSize, ErrInvalidBufferSize, as for
// CreateBuffer. A NULL from the runtime after all those checks is an
// allocation failure: the error matches ErrMemObjectAllocationFailure
// (Status.IsOutOfMemory holds), so that a pool treats it as out of memory;
// but for an alignment over MaxSVMAlignment, which a runtime may or may
// not support (POCL does not), a NULL matches ErrInvalidValue, saying so.
func (c *Context) SVMAlloc(flags SVMFlags, size int64, alignment int) (*SVM, error) {
	const call = "clSVMAlloc"
	cid, err := c.handle(call)
	if err != nil {
		return nil, err
	}
	if st, bad := svmSupportProblem(c.SVMCapabilities(), flags); bad != "" {
		return nil, unsupported(call, st, bad)
	}
	if bad := svmFlagsProblem(flags); bad != "" {
		return nil, misuse(call, ErrInvalidValue, fmt.Sprintf("flags %v: %s", flags, bad))
	}
	if alignment < 0 || alignment&(alignment-1) != 0 || int64(alignment) > 1<<31 {
		return nil, misuse(call, ErrInvalidValue, fmt.Sprintf("alignment %d: it must be 0 or a power of two of at most 2^31", alignment))
	}
	if size == 0 {
		return nil, misuse(call, ErrInvalidBufferSize, "size 0")
	}
	if err := c.checkSize(call, size); err != nil {
		return nil, err
	}
	if c.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	ptr := C.clSVMAlloc(cid, C.cl_svm_mem_flags(flags), C.size_t(size), C.cl_uint(alignment))
	if ptr == nil {
		runtime.KeepAlive(c)
		if alignment > MaxSVMAlignment {
			return nil, &CallError{Call: call, Status: ErrInvalidValue,
				Detail: fmt.Sprintf("the runtime returned NULL for alignment %d, past the %d bytes every device supports: an alignment it does not support", alignment, MaxSVMAlignment)}
		}
		return nil, &CallError{Call: call, Status: ErrMemObjectAllocationFailure,
			Detail: fmt.Sprintf("the runtime returned NULL for %d bytes, flags %v, alignment %d", size, flags, alignment)}
	}
	if err := callErr("clRetainContext", int32(C.clRetainContext(cid))); err != nil {
		C.clSVMFree(cid, ptr)
		runtime.KeepAlive(c)
		return nil, err
	}
	runtime.KeepAlive(c)
	return &SVM{ptr: ptr, size: size, flags: flags, ctx: c}, nil
}

// Free frees the allocation (clSVMFree) and gives back its reference to
// the context. clSVMFree does not wait for commands: call it only once
// those that use the memory have completed (CommandQueue.Finish). A
// second Free, a nil SVM, and a coarse-grain SVM still mapped (unmap it
// first) return an error matching ErrInvalidValue and free nothing.
func (s *SVM) Free() error {
	freed, err := s.TryFree()
	if !freed && err == nil {
		return misuse("clSVMFree", ErrInvalidValue, "SVM already freed")
	}
	return err
}

// TryFree frees the SVM as Free does, unless a call already did, and
// reports whether this one did: of racing calls, exactly one does. It
// returns false and no error if the SVM was freed already; false and
// Free's error for a nil or mapped SVM.
func (s *SVM) TryFree() (bool, error) {
	const call = "clSVMFree"
	if s == nil {
		return false, misuse(call, ErrInvalidValue, "SVM is nil")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.freed:
		return false, nil
	case s.mapped:
		return false, misuse(call, ErrInvalidValue, "SVM is mapped: EnqueueSVMUnmap it first")
	}
	s.freed = true
	if s.ctx.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	C.clSVMFree(s.ctx.id, s.ptr)
	err := callErr("clReleaseContext", int32(C.clReleaseContext(s.ctx.id)))
	runtime.KeepAlive(s)
	return true, err
}

// The accessors below answer the zero value for a nil SVM.

// Size returns the size in bytes the SVM was allocated with.
func (s *SVM) Size() int64 {
	if s == nil {
		return 0
	}
	return s.size
}

// Flags returns the flags the SVM was allocated with.
func (s *SVM) Flags() SVMFlags {
	if s == nil {
		return 0
	}
	return s.flags
}

// FineGrain reports whether the SVM is fine-grain (SVMFineGrain).
func (s *SVM) FineGrain() bool { return s != nil && s.flags&SVMFineGrain != 0 }

// Context returns the SVM's context.
func (s *SVM) Context() *Context {
	if s == nil {
		return nil
	}
	return s.ctx
}

// Pointer returns the SVM's address as a number, for logs; device and host
// share it.
func (s *SVM) Pointer() uintptr {
	if s == nil {
		return 0
	}
	return uintptr(s.ptr)
}

// Freed reports whether Free has been called.
func (s *SVM) Freed() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.freed
}

// Bytes returns the memory the host may read and write now, without
// copying: all of a fine-grain SVM (while no command that uses it runs);
// the mapped region of a coarse-grain SVM while it is mapped
// (EnqueueSVMMap); nil otherwise, and once freed. The slice must not be
// used after the unmap or Free.
func (s *SVM) Bytes() []byte {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.freed:
		return nil
	case s.flags&SVMFineGrain != 0:
		return unsafe.Slice((*byte)(s.ptr), s.size)
	case s.mapped:
		return unsafe.Slice((*byte)(unsafe.Add(s.ptr, s.mapOffset)), s.mapSize)
	}
	return nil
}

// at returns the address offset bytes into the SVM, checking that s is
// live, of ctx, and that [offset, offset+size) lies inside it. The caller
// holds s.mu.
func (s *SVM) at(call string, ctx *Context, offset, size int64) (unsafe.Pointer, error) {
	switch {
	case s == nil:
		return nil, misuse(call, ErrInvalidValue, "SVM is nil")
	case s.freed:
		return nil, misuse(call, ErrInvalidValue, "SVM is freed")
	case s.ctx != ctx:
		return nil, misuse(call, ErrInvalidContext, "the SVM belongs to another context")
	case offset < 0 || size < 0 || offset > s.size || size > s.size-offset:
		return nil, misuse(call, ErrInvalidValue, fmt.Sprintf("region [%d, %d) is not inside a %d-byte SVM", offset, offset+size, s.size))
	}
	return unsafe.Add(s.ptr, offset), nil
}

// SetArgSVMPointer sets argument i, a global pointer of the kernel, to the
// address offset bytes into s (clSetKernelArgSVMPointer). SetArg(i, s) is
// SetArgSVMPointer(i, s, 0). s must be live and of the kernel's context,
// and offset within [0, s.Size()], else ErrInvalidValue (ErrInvalidContext
// for another context).
func (k *Kernel) SetArgSVMPointer(i int, s *SVM, offset int64) error {
	const call = "clSetKernelArgSVMPointer"
	if k == nil || k.released.Load() {
		return misuse(call, ErrInvalidKernel, "kernel is nil or released")
	}
	if i < 0 || i > math.MaxUint32 { // a cl_uint would wrap it to another argument
		return misuse(call, ErrInvalidArgIndex, fmt.Sprintf("argument %d of %s", i, k.name))
	}
	if err := k.checkQualifier(call, i, s); err != nil {
		return err
	}
	if s != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	p, err := s.at(call, k.ctx, offset, 0)
	if err != nil {
		return err
	}
	if k.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	code := C.clSetKernelArgSVMPointer(k.id, C.cl_uint(i), p)
	runtime.KeepAlive(k)
	if code != 0 {
		return &CallError{Call: call, Status: Status(code), Detail: fmt.Sprintf("argument %d of %s", i, k.name)}
	}
	k.noteArg(i, s, offset)
	return nil
}

// EnqueueSVMMap maps size bytes of s from offset for the host
// (clEnqueueSVMMap), blocking until the host may use them, and returns
// them; s.Bytes() returns them too until EnqueueSVMUnmap. write maps for
// reading and writing, else for reading only (host writes are then
// undefined). A coarse-grain SVM needs the map before the host touches it;
// a fine-grain one may be mapped as a point of synchronization. One map of
// an SVM may be outstanding at a time: a second returns ErrInvalidValue,
// as do a freed SVM and a region of 0 bytes or outside s.
func (q *CommandQueue) EnqueueSVMMap(s *SVM, write bool, offset, size int64) ([]byte, error) {
	const call = "clEnqueueSVMMap"
	qid, err := q.handle(call)
	if err != nil {
		return nil, err
	}
	if s != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	p, err := s.at(call, q.ctx, offset, size)
	if err != nil {
		return nil, err
	}
	switch {
	case size == 0:
		return nil, misuse(call, ErrInvalidValue, "size 0")
	case s.mapped:
		return nil, misuse(call, ErrInvalidValue, fmt.Sprintf("the SVM is already mapped at [%d, %d): unmap it first", s.mapOffset, s.mapOffset+s.mapSize))
	}
	flags := C.cl_map_flags(C.CL_MAP_READ)
	if write {
		flags |= C.CL_MAP_WRITE
	}
	if q.ctx.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	code := C.clEnqueueSVMMap(qid, C.CL_TRUE, flags, p, C.size_t(size), 0, nil, nil)
	runtime.KeepAlive(q)
	if code != 0 {
		return nil, &CallError{Call: call, Status: Status(code), Detail: fmt.Sprintf("[%d, %d) of a %d-byte SVM", offset, offset+size, s.size)}
	}
	s.mapped, s.mapOffset, s.mapSize = true, offset, size
	return unsafe.Slice((*byte)(p), size), nil
}

// EnqueueSVMUnmap enqueues the unmap of the region EnqueueSVMMap mapped
// (clEnqueueSVMUnmap), after which the host must not touch it: the slice
// the map returned is stale, and s.Bytes() of a coarse-grain SVM is nil.
// Commands enqueued after it on q see the host's writes. An SVM that is
// not mapped returns ErrInvalidValue.
func (q *CommandQueue) EnqueueSVMUnmap(s *SVM) error {
	const call = "clEnqueueSVMUnmap"
	qid, err := q.handle(call)
	if err != nil {
		return err
	}
	if s != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	p, err := s.at(call, q.ctx, 0, 0)
	if err != nil {
		return err
	}
	if !s.mapped {
		return misuse(call, ErrInvalidValue, "the SVM is not mapped")
	}
	p = unsafe.Add(p, s.mapOffset)
	if q.ctx.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	code := C.clEnqueueSVMUnmap(qid, p, 0, nil, nil)
	runtime.KeepAlive(q)
	if err := callErr(call, int32(code)); err != nil {
		return err
	}
	s.mapped = false
	return nil
}

// EnqueueSVMMemFill fills size bytes of s from offset with copies of
// pattern (clEnqueueSVMMemFill) and returns the command's event; release
// it. The pattern's length must be a power of two from 1 to 128 bytes,
// offset and size multiples of it, size above 0 and the region inside s;
// else the result is ErrInvalidValue. The pattern may be reused on return.
func (q *CommandQueue) EnqueueSVMMemFill(s *SVM, pattern []byte, offset, size int64, wait ...*Event) (*Event, error) {
	const call = "clEnqueueSVMMemFill"
	qid, err := q.handle(call)
	if err != nil {
		return nil, err
	}
	if s != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	p, err := s.at(call, q.ctx, offset, size)
	if err != nil {
		return nil, err
	}
	plen := int64(len(pattern))
	switch {
	case plen < 1 || plen > 128 || plen&(plen-1) != 0:
		return nil, misuse(call, ErrInvalidValue, fmt.Sprintf("a pattern of %d bytes: it must have 1, 2, 4, 8, 16, 32, 64 or 128", plen))
	case size == 0:
		return nil, misuse(call, ErrInvalidValue, "size 0")
	case offset%plen != 0 || size%plen != 0:
		return nil, misuse(call, ErrInvalidValue, fmt.Sprintf("offset %d and size %d must be multiples of the pattern's %d bytes", offset, size, plen))
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
	code := C.clEnqueueSVMMemFill(qid, p, unsafe.Pointer(&pattern[0]), C.size_t(plen), C.size_t(size), n, list, &ev)
	runtime.KeepAlive(q)
	runtime.KeepAlive(pattern)
	runtime.KeepAlive(wait)
	return q.finishEnqueue(call, code, ev, nil, true)
}

// EnqueueSVMMemcpy copies size bytes from src at srcOffset to dst at
// dstOffset (clEnqueueSVMMemcpy), both SVM of q's context, and returns the
// command's event (nil when blocking, which returns once the copy is
// done). Regions outside their SVM, or of 0 bytes, are ErrInvalidValue;
// overlapping ones of the same SVM ErrMemCopyOverlap.
func (q *CommandQueue) EnqueueSVMMemcpy(blocking bool, dst *SVM, dstOffset int64, src *SVM, srcOffset, size int64, wait ...*Event) (*Event, error) {
	const call = "clEnqueueSVMMemcpy"
	qid, err := q.handle(call)
	if err != nil {
		return nil, err
	}
	unlock := lockPair(dst, src)
	defer unlock()
	dp, err := dst.at(call, q.ctx, dstOffset, size)
	if err != nil {
		return nil, err
	}
	sp, err := src.at(call, q.ctx, srcOffset, size)
	if err != nil {
		return nil, err
	}
	switch {
	case size == 0:
		return nil, misuse(call, ErrInvalidValue, "size 0")
	case src == dst && srcOffset < dstOffset+size && dstOffset < srcOffset+size:
		return nil, misuse(call, ErrMemCopyOverlap, fmt.Sprintf("[%d, %d) and [%d, %d) of one SVM overlap", srcOffset, srcOffset+size, dstOffset, dstOffset+size))
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
	evp := &ev
	if blocking {
		evp = nil
	}
	code := C.clEnqueueSVMMemcpy(qid, cBool(blocking), dp, sp, C.size_t(size), n, list, evp)
	runtime.KeepAlive(q)
	runtime.KeepAlive(wait)
	return q.finishEnqueue(call, code, ev, nil, !blocking)
}

// lockPair locks the SVMs a and b (either may be nil, or both the same)
// in the order of their addresses, so that two copies between the same
// SVMs in opposite directions cannot deadlock, and returns the unlock.
func lockPair(a, b *SVM) (unlock func()) {
	if a == b || b == nil {
		b = nil
	} else if a == nil || uintptr(unsafe.Pointer(b)) < uintptr(unsafe.Pointer(a)) {
		a, b = b, a
	}
	for _, s := range []*SVM{a, b} {
		if s != nil {
			s.mu.Lock()
		}
	}
	return func() {
		for _, s := range []*SVM{a, b} {
			if s != nil {
				s.mu.Unlock()
			}
		}
	}
}
