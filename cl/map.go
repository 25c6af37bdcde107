package cl

/*
#include "clpool.h"

// clpool_unmap_wait enqueues the unmap of p and waits for it, so that the
// region is given back to the device when UnmapBuffer returns.
static cl_int clpool_unmap_wait(cl_command_queue q, cl_mem m, void *p) {
	cl_event ev;
	cl_int err = clEnqueueUnmapMemObject(q, m, p, 0, NULL, &ev);
	if (err != CL_SUCCESS)
		return err;
	err = clWaitForEvents(1, &ev);
	clReleaseEvent(ev);
	return err;
}
*/
import "C"

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// MapFlags say what the host does with a mapped region (cl_map_flags).
type MapFlags uint64

// Map flags of OpenCL 1.2. MapRead and MapWrite may be combined;
// MapWriteInvalidateRegion stands alone: the host overwrites the whole
// region, so the runtime need not copy the buffer's contents to it.
const (
	MapRead                  MapFlags = C.CL_MAP_READ
	MapWrite                 MapFlags = C.CL_MAP_WRITE
	MapWriteInvalidateRegion MapFlags = C.CL_MAP_WRITE_INVALIDATE_REGION
)

// String returns the flags as their names joined by "|".
func (f MapFlags) String() string {
	var parts []string
	for _, n := range []struct {
		bit  MapFlags
		name string
	}{{MapRead, "READ"}, {MapWrite, "WRITE"}, {MapWriteInvalidateRegion, "WRITE_INVALIDATE_REGION"}} {
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

// mapProblem says which rule of clEnqueueMapBuffer f breaks for a buffer
// whose host access flags are host, and with which Status; "" if none.
func mapProblem(f MapFlags, host MemFlags) (Status, string) {
	const known = MapRead | MapWrite | MapWriteInvalidateRegion
	switch {
	case f&^known != 0:
		return ErrInvalidValue, fmt.Sprintf("unknown bits %#x", uint64(f&^known))
	case f == 0:
		return ErrInvalidValue, "no flags: give MapRead, MapWrite or MapWriteInvalidateRegion"
	case f&MapWriteInvalidateRegion != 0 && f&(MapRead|MapWrite) != 0:
		return ErrInvalidValue, "WRITE_INVALIDATE_REGION with READ or WRITE"
	case host == MemHostNoAccess:
		return ErrInvalidOperation, "the buffer was made with HOST_NO_ACCESS"
	case host == MemHostWriteOnly && f&MapRead != 0:
		return ErrInvalidOperation, "a READ map of a buffer made with HOST_WRITE_ONLY"
	case host == MemHostReadOnly && f&(MapWrite|MapWriteInvalidateRegion) != 0:
		return ErrInvalidOperation, "a write map of a buffer made with HOST_READ_ONLY"
	}
	return 0, ""
}

// hostAccess returns the host access flag that rules b: its own, or for a
// sub-buffer made without one, its parent's.
func hostAccess(b *Buffer) MemFlags {
	if h := b.flags & memHostAccess; h != 0 || b.parent == nil {
		return h
	}
	return b.parent.flags & memHostAccess
}

// mapping is a region MapBuffer returned and UnmapBuffer has not taken back.
type mapping struct {
	ptr  unsafe.Pointer // C memory, from clEnqueueMapBuffer
	size int64
}

// mapped records the outstanding mappings of each buffer, so that
// UnmapBuffer refuses a slice that is not one, on every runtime, before
// the driver sees it.
var mapped = struct {
	sync.Mutex // protects by
	by         map[*Buffer][]mapping
}{by: make(map[*Buffer][]mapping)}

// MapBuffer maps size bytes of buf from offset into host memory
// (clEnqueueMapBuffer, blocking) and returns them as a slice over that
// memory, which the runtime owns: no copy is made. The host reads it if
// flags hold MapRead and writes it if they hold MapWrite or
// MapWriteInvalidateRegion (after which the region's old contents are
// undefined). The slice is valid until UnmapBuffer(buf, slice), and must
// not be used after; keep it (not a reslice of it) for the unmap.
//
// While a region is mapped for writing, no command may use buf; while it
// is mapped for reading, no command may write it. The host's writes reach
// the device at the unmap, and the device's writes reach the host at the
// map: those are the only points where the two views agree (OpenCL 1.2,
// 5.4.3).
//
// These are checked before the C call, so every runtime answers the same:
// a nil or released buffer or queue (ErrInvalidMemObject,
// ErrInvalidCommandQueue), a buffer of another context (ErrInvalidContext),
// a negative offset, a size of 0 or a region past the end of buf, flags of
// unknown bits, flags 0 (stricter than the specification, which leaves
// them to the runtime), and MapWriteInvalidateRegion with another flag
// (ErrInvalidValue), and a map the buffer's host access flags forbid
// (ErrInvalidOperation). A buffer may have several regions mapped at once.
func (q *CommandQueue) MapBuffer(buf *Buffer, flags MapFlags, offset, size int64) ([]byte, error) {
	const call = "clEnqueueMapBuffer"
	qid, mem, err := q.transferArgs(call, buf, offset)
	if err != nil {
		return nil, err
	}
	if size <= 0 {
		return nil, misuse(call, ErrInvalidValue, fmt.Sprintf("size %d", size))
	}
	if err := region(call, buf, offset, size); err != nil {
		return nil, err
	}
	if st, bad := mapProblem(flags, hostAccess(buf)); bad != "" {
		return nil, misuse(call, st, fmt.Sprintf("flags %v: %s", flags, bad))
	}
	if q.ctx.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	var code C.cl_int
	p := C.clEnqueueMapBuffer(qid, mem, C.CL_TRUE, C.cl_map_flags(flags), C.size_t(offset), C.size_t(size), 0, nil, nil, &code)
	runtime.KeepAlive(q)
	runtime.KeepAlive(buf)
	if code != 0 {
		return nil, &CallError{Call: call, Status: Status(code), Detail: fmt.Sprintf("[%d, %d) of a %d-byte buffer, flags %v", offset, offset+size, buf.size, flags)}
	}
	if p == nil {
		return nil, &CallError{Call: call, Status: ErrMapFailure, Detail: "the runtime returned NULL and no error"}
	}
	buf.wasMapped.Store(true)
	mapped.Lock()
	mapped.by[buf] = append(mapped.by[buf], mapping{ptr: p, size: size})
	mapped.Unlock()
	return unsafe.Slice((*byte)(p), size), nil
}

// UnmapBuffer gives back a region MapBuffer mapped
// (clEnqueueUnmapMemObject) and waits until the unmap has completed, so
// that commands enqueued afterwards, on any queue, see the host's writes.
// region must be the very slice MapBuffer returned for buf (same start and
// length), else the result is ErrInvalidValue; so is a second unmap. A nil
// or released buffer returns ErrInvalidMemObject (a buffer's release
// forgets its outstanding regions: release a buffer only once unmapped).
// The slice must not be used after the call.
func (q *CommandQueue) UnmapBuffer(buf *Buffer, region []byte) error {
	const call = "clEnqueueUnmapMemObject"
	qid, mem, err := q.transferArgs(call, buf, 0)
	if err != nil {
		if buf != nil && buf.Released() {
			forgetMappings(buf)
		}
		return err
	}
	if len(region) == 0 {
		return misuse(call, ErrInvalidValue, "empty region")
	}
	m, ok := takeMapping(buf, unsafe.Pointer(unsafe.SliceData(region)), int64(len(region)))
	if !ok {
		return misuse(call, ErrInvalidValue, fmt.Sprintf("%d bytes that are not a region MapBuffer returned for this buffer and that are still mapped", len(region)))
	}
	if q.ctx.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	code := C.clpool_unmap_wait(qid, mem, m.ptr)
	runtime.KeepAlive(q)
	runtime.KeepAlive(buf)
	if err := callErr(call, int32(code)); err != nil {
		if code != C.CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST {
			// The unmap was not enqueued: the region is still mapped.
			mapped.Lock()
			mapped.by[buf] = append(mapped.by[buf], m)
			mapped.Unlock()
		}
		return err
	}
	return nil
}

// takeMapping removes and returns buf's mapping at p of size bytes, if
// there is one.
// forgetMappings drops the regions of buf, released, from mapped: none
// can be unmapped now, and the record would keep buf reachable for good.
func forgetMappings(buf *Buffer) {
	mapped.Lock()
	delete(mapped.by, buf)
	mapped.Unlock()
}

func takeMapping(buf *Buffer, p unsafe.Pointer, size int64) (mapping, bool) {
	mapped.Lock()
	defer mapped.Unlock()
	ms := mapped.by[buf]
	for i, m := range ms {
		if m.ptr == p && m.size == size {
			ms = append(ms[:i], ms[i+1:]...)
			if len(ms) == 0 {
				delete(mapped.by, buf)
			} else {
				mapped.by[buf] = ms
			}
			return m, true
		}
	}
	return mapping{}, false
}
