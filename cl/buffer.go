package cl

/*
#include "clpool.h"

// The pool's hot calls. clCreateBuffer keeps no pointer it is given once it
// returns (this package never passes CL_MEM_USE_HOST_PTR with Go memory, and
// errcode_ret is written before return); neither call runs Go code.
#cgo noescape clCreateBuffer
#cgo nocallback clCreateBuffer
#cgo noescape clReleaseMemObject
#cgo nocallback clReleaseMemObject
*/
import "C"

import (
	"fmt"
	"math/bits"
	"runtime"
	"strings"
	"sync/atomic"
	"unsafe"
)

// MemFlags are the flags of a buffer (cl_mem_flags).
type MemFlags uint64

// Buffer flags of OpenCL 1.2.
const (
	MemReadWrite    MemFlags = C.CL_MEM_READ_WRITE
	MemWriteOnly    MemFlags = C.CL_MEM_WRITE_ONLY
	MemReadOnly     MemFlags = C.CL_MEM_READ_ONLY
	MemUseHostPtr   MemFlags = C.CL_MEM_USE_HOST_PTR
	MemAllocHostPtr MemFlags = C.CL_MEM_ALLOC_HOST_PTR
	MemCopyHostPtr  MemFlags = C.CL_MEM_COPY_HOST_PTR

	MemHostWriteOnly MemFlags = C.CL_MEM_HOST_WRITE_ONLY
	MemHostReadOnly  MemFlags = C.CL_MEM_HOST_READ_ONLY
	MemHostNoAccess  MemFlags = C.CL_MEM_HOST_NO_ACCESS
)

// String returns the flags as their names joined by "|".
func (f MemFlags) String() string {
	names := []string{"READ_WRITE", "WRITE_ONLY", "READ_ONLY", "USE_HOST_PTR", "ALLOC_HOST_PTR",
		"COPY_HOST_PTR", "(bit 6)", "HOST_WRITE_ONLY", "HOST_READ_ONLY", "HOST_NO_ACCESS"}
	var parts []string
	for i, n := range names {
		if f&(1<<i) != 0 {
			parts = append(parts, n)
			f &^= 1 << i
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

// memFlagsKnown is every flag bit of OpenCL 1.2.
const memFlagsKnown = memDeviceAccess | MemUseHostPtr | MemAllocHostPtr | MemCopyHostPtr | memHostAccess

// Validate returns an error wrapping ErrInvalidValue if f breaks the rules of
// clCreateBuffer: an unknown bit, more than one of the device-access flags
// (READ_WRITE, WRITE_ONLY, READ_ONLY), more than one of the host-access
// flags, or USE_HOST_PTR with ALLOC_HOST_PTR or COPY_HOST_PTR. Runtimes
// differ in how much of this they check (Oclgrind checks none of it), so
// CreateBuffer checks it here for all of them.
func (f MemFlags) Validate() error {
	if bad := f.problem(); bad != "" {
		return misuse("clCreateBuffer", ErrInvalidValue, fmt.Sprintf("flags %v: %s", f, bad))
	}
	return nil
}

// problem says which rule of Validate f breaks, or returns "".
func (f MemFlags) problem() string {
	switch {
	case f&^memFlagsKnown != 0:
		return fmt.Sprintf("unknown bits %#x", uint64(f&^memFlagsKnown))
	case bits.OnesCount64(uint64(f&memDeviceAccess)) > 1:
		return "more than one of READ_WRITE, WRITE_ONLY, READ_ONLY"
	case bits.OnesCount64(uint64(f&memHostAccess)) > 1:
		return "more than one of HOST_WRITE_ONLY, HOST_READ_ONLY, HOST_NO_ACCESS"
	case f&MemUseHostPtr != 0 && f&(MemAllocHostPtr|MemCopyHostPtr) != 0:
		return "USE_HOST_PTR with ALLOC_HOST_PTR or COPY_HOST_PTR"
	}
	return ""
}

// The flag groups of which a buffer may have at most one flag each.
const (
	memDeviceAccess = MemReadWrite | MemWriteOnly | MemReadOnly
	memHostAccess   = MemHostWriteOnly | MemHostReadOnly | MemHostNoAccess
)

// subBufferProblem says which rule of clCreateSubBuffer flags break for a
// sub-buffer of a buffer made with the flags parent, or returns "". Flags
// of a group left out are inherited from the parent.
func subBufferProblem(parent, flags MemFlags) string {
	if bad := flags.problem(); bad != "" {
		return bad
	}
	if flags&(MemUseHostPtr|MemAllocHostPtr|MemCopyHostPtr) != 0 {
		return "a sub-buffer takes no USE_HOST_PTR, ALLOC_HOST_PTR or COPY_HOST_PTR: it uses its parent's memory"
	}
	// A WRITE_ONLY or READ_ONLY parent allows only its own device access.
	pd, fd := parent&memDeviceAccess, flags&memDeviceAccess
	if pd != 0 && pd != MemReadWrite && fd != 0 && fd != pd {
		return fmt.Sprintf("the parent is %v, which a sub-buffer may not widen", pd)
	}
	// A host-access parent allows its own host access or HOST_NO_ACCESS.
	ph, fh := parent&memHostAccess, flags&memHostAccess
	if ph != 0 && fh != 0 && fh != ph && fh != MemHostNoAccess {
		return fmt.Sprintf("the parent is %v, which a sub-buffer may not widen", ph)
	}
	return ""
}

// checkSize refuses what the specification makes CL_INVALID_BUFFER_SIZE,
// beyond 0, which the runtime reports itself.
func (c *Context) checkSize(call string, size int64) error {
	if size < 0 {
		return misuse(call, ErrInvalidBufferSize, fmt.Sprintf("negative size %d", size))
	}
	if size > c.maxAlloc {
		return misuse(call, ErrInvalidBufferSize, fmt.Sprintf("%d bytes is over the device's max allocation of %d", size, c.maxAlloc))
	}
	return nil
}

// Buffer is an OpenCL buffer object. It is not freed by the garbage
// collector: Release it (or let a pool own it). Release is idempotent; any
// other use of a released buffer returns an error wrapping
// ErrInvalidMemObject, without reaching the driver.
type Buffer struct {
	mem      C.cl_mem
	size     int64
	flags    MemFlags
	ctx      *Context
	parent   *Buffer // for a sub-buffer
	origin   int64   // for a sub-buffer: offset in parent
	released atomic.Bool
	// wasMapped is set once MapBuffer mapped a region of the buffer: its
	// release then forgets the regions still mapped (forgetMappings).
	wasMapped atomic.Bool
}

// CreateBuffer makes a buffer of size bytes. Sizes that are 0, negative or
// over the context's MaxMemAllocSize return ErrInvalidBufferSize; flags that
// fail Validate return ErrInvalidValue. MemUseHostPtr and MemCopyHostPtr
// need host memory: the runtime answers ErrInvalidHostPtr here; use
// CreateBufferFromHost.
func (c *Context) CreateBuffer(flags MemFlags, size int64) (*Buffer, error) {
	cid, err := c.handle("clCreateBuffer")
	if err != nil {
		return nil, err
	}
	if err := c.checkSize("clCreateBuffer", size); err != nil {
		return nil, err
	}
	if err := flags.Validate(); err != nil {
		return nil, err
	}
	if c.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	var code C.cl_int
	mem := C.clCreateBuffer(cid, C.cl_mem_flags(flags), C.size_t(size), nil, &code)
	runtime.KeepAlive(c)
	if code != 0 {
		return nil, &CallError{Call: "clCreateBuffer", Status: Status(code), Detail: fmt.Sprintf("%d bytes, flags %v", size, flags)}
	}
	return &Buffer{mem: mem, size: size, flags: flags, ctx: c}, nil
}

// CreateBufferFromHost makes a buffer holding a copy of data
// (MemCopyHostPtr is added to flags). MemUseHostPtr is refused: the runtime
// would keep a pointer to Go memory.
func (c *Context) CreateBufferFromHost(flags MemFlags, data []byte) (*Buffer, error) {
	if flags&MemUseHostPtr != 0 {
		return nil, misuse("clCreateBuffer", ErrInvalidValue, "MemUseHostPtr with Go memory is not allowed; use MemCopyHostPtr")
	}
	if len(data) == 0 {
		return nil, misuse("clCreateBuffer", ErrInvalidBufferSize, "no data")
	}
	cid, err := c.handle("clCreateBuffer")
	if err != nil {
		return nil, err
	}
	if err := c.checkSize("clCreateBuffer", int64(len(data))); err != nil {
		return nil, err
	}
	flags |= MemCopyHostPtr
	if err := flags.Validate(); err != nil {
		return nil, err
	}
	if c.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	var code C.cl_int
	mem := C.clCreateBuffer(cid, C.cl_mem_flags(flags), C.size_t(len(data)), unsafe.Pointer(&data[0]), &code)
	runtime.KeepAlive(c)
	if err := callErr("clCreateBuffer", int32(code)); err != nil {
		return nil, err
	}
	return &Buffer{mem: mem, size: int64(len(data)), flags: flags, ctx: c}, nil
}

// CreateSubBuffer makes a buffer that is the region [origin, origin+size) of
// b, which must not be a sub-buffer itself (ErrInvalidMemObject). The
// origin must be a multiple of some device's MemBaseAddrAlign, or the
// result is ErrMisalignedSubBufferOffset; a size of 0 is
// ErrInvalidBufferSize; a region past the end of b is ErrInvalidValue, and
// so are flags that fail Validate, that hold a host-pointer flag
// (USE_HOST_PTR, ALLOC_HOST_PTR, COPY_HOST_PTR) or that allow an access b
// does not (READ_WRITE of a WRITE_ONLY b, HOST_READ_ONLY of a
// HOST_WRITE_ONLY b). Flags 0 inherit b's. All this is checked here, as
// not every runtime does. Release the sub-buffer before (or independently
// of) b; the runtime keeps b alive meanwhile.
func (b *Buffer) CreateSubBuffer(flags MemFlags, origin, size int64) (*Buffer, error) {
	const call = "clCreateSubBuffer"
	mem, err := b.handle(call)
	if err != nil {
		return nil, err
	}
	switch {
	case b.parent != nil:
		return nil, misuse(call, ErrInvalidMemObject, "the buffer is a sub-buffer")
	case origin < 0 || size < 0:
		return nil, misuse(call, ErrInvalidValue, fmt.Sprintf("negative origin %d or size %d", origin, size))
	case size == 0:
		return nil, misuse(call, ErrInvalidBufferSize, "size 0")
	case origin > b.size || size > b.size-origin:
		return nil, misuse(call, ErrInvalidValue, fmt.Sprintf("region [%d, %d) is past the end of a %d-byte buffer", origin, origin+size, b.size))
	case !b.ctx.aligned(origin):
		return nil, misuse(call, ErrMisalignedSubBufferOffset, fmt.Sprintf("origin %d is not a multiple of any device's base-address alignment", origin))
	}
	if bad := subBufferProblem(b.flags, flags); bad != "" {
		return nil, misuse(call, ErrInvalidValue, fmt.Sprintf("flags %v: %s", flags, bad))
	}
	if b.ctx.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	region := C.cl_buffer_region{origin: C.size_t(origin), size: C.size_t(size)}
	var code C.cl_int
	sub := C.clCreateSubBuffer(mem, C.cl_mem_flags(flags), C.CL_BUFFER_CREATE_TYPE_REGION, unsafe.Pointer(&region), &code)
	runtime.KeepAlive(b)
	if err := callErr(call, int32(code)); err != nil {
		return nil, err
	}
	return &Buffer{mem: sub, size: size, flags: flags, ctx: b.ctx, parent: b, origin: origin}, nil
}

// The accessors below answer the zero value for a nil Buffer: size 0,
// flags 0, no context or parent, handle 0, and not Released (it was never
// made). Release and every call that needs the buffer return an error
// matching ErrInvalidMemObject instead.

// Size returns the size in bytes the buffer was made with.
func (b *Buffer) Size() int64 {
	if b == nil {
		return 0
	}
	return b.size
}

// Flags returns the flags the buffer was made with.
func (b *Buffer) Flags() MemFlags {
	if b == nil {
		return 0
	}
	return b.flags
}

// Context returns the buffer's context.
func (b *Buffer) Context() *Context {
	if b == nil {
		return nil
	}
	return b.ctx
}

// Parent returns the buffer a sub-buffer was made from, and its origin in it;
// nil and 0 for a buffer that is not a sub-buffer.
func (b *Buffer) Parent() (*Buffer, int64) {
	if b == nil {
		return nil, 0
	}
	return b.parent, b.origin
}

// Buffer returns b itself. With Close, it lets a *Buffer stand wherever a
// pooled buffer does (package array takes either).
func (b *Buffer) Buffer() *Buffer { return b }

// Close is Release, under the name io.Closer and pooled buffers use.
func (b *Buffer) Close() error { return b.Release() }

// Handle returns the cl_mem handle as a number, for logs and hooks that
// identify buffers; it is not for passing back to C.
func (b *Buffer) Handle() uintptr {
	if b == nil {
		return 0
	}
	return uintptr(unsafe.Pointer(b.mem))
}

// Released reports whether Release has been called.
func (b *Buffer) Released() bool { return b != nil && b.released.Load() }

// BufferInfo is what the runtime reports of a buffer.
type BufferInfo struct {
	Size     int64    // CL_MEM_SIZE
	Flags    MemFlags // CL_MEM_FLAGS
	Offset   int64    // CL_MEM_OFFSET: origin in the parent, for a sub-buffer
	RefCount int      // CL_MEM_REFERENCE_COUNT (for debugging only, as the spec warns)
}

// Info asks the runtime about the buffer.
func (b *Buffer) Info() (BufferInfo, error) {
	mem, err := b.handle("clGetMemObjectInfo")
	if err != nil {
		return BufferInfo{}, err
	}
	if b.ctx.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	var size, offset C.size_t
	var flags C.cl_mem_flags
	var refs C.cl_uint
	for _, q := range []struct {
		param C.cl_mem_info
		size  uintptr
		p     unsafe.Pointer
	}{
		{C.CL_MEM_SIZE, unsafe.Sizeof(size), unsafe.Pointer(&size)},
		{C.CL_MEM_FLAGS, unsafe.Sizeof(flags), unsafe.Pointer(&flags)},
		{C.CL_MEM_OFFSET, unsafe.Sizeof(offset), unsafe.Pointer(&offset)},
		{C.CL_MEM_REFERENCE_COUNT, unsafe.Sizeof(refs), unsafe.Pointer(&refs)},
	} {
		if err := callErr("clGetMemObjectInfo", int32(C.clGetMemObjectInfo(mem, q.param, C.size_t(q.size), q.p, nil))); err != nil {
			return BufferInfo{}, err
		}
	}
	runtime.KeepAlive(b)
	return BufferInfo{Size: int64(size), Flags: MemFlags(flags), Offset: int64(offset), RefCount: int(refs)}, nil
}

// Release releases the buffer. It is idempotent: later calls return nil.
// A nil Buffer returns an error matching ErrInvalidMemObject. Regions
// MapBuffer mapped and UnmapBuffer did not give back are forgotten: unmap
// them first.
func (b *Buffer) Release() error {
	_, err := b.TryRelease()
	return err
}

// TryRelease releases the buffer unless a call already did, and reports
// whether this one did: of racing calls, exactly one does. A nil Buffer
// returns false and an error matching ErrInvalidMemObject.
func (b *Buffer) TryRelease() (bool, error) {
	if b == nil {
		return false, misuse("clReleaseMemObject", ErrInvalidMemObject, "buffer is nil")
	}
	if !b.released.CompareAndSwap(false, true) {
		return false, nil
	}
	if b.ctx.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	err := callErr("clReleaseMemObject", int32(C.clReleaseMemObject(b.mem)))
	runtime.KeepAlive(b)
	if b.wasMapped.Load() {
		forgetMappings(b)
	}
	return true, err
}

// aligned reports whether origin suits the base-address alignment of at
// least one of the context's devices, as a sub-buffer origin must.
func (c *Context) aligned(origin int64) bool {
	for _, d := range c.devices {
		if d.MemBaseAddrAlign > 0 && origin%d.MemBaseAddrAlign == 0 {
			return true
		}
	}
	return false
}

func (b *Buffer) handle(call string) (C.cl_mem, error) {
	if b == nil {
		return nil, misuse(call, ErrInvalidMemObject, "buffer is nil")
	}
	if b.released.Load() {
		return nil, misuse(call, ErrInvalidMemObject, "buffer is released")
	}
	return b.mem, nil
}
