package cl

/*
#include "clpool.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// Event is the handle of one enqueued command. Release it when done; Release
// is idempotent.
//
// An event of a non-blocking read or write from Go memory keeps that memory
// pinned (runtime.Pinner) until Wait sees the command complete or Release
// waits for it: the memory stays valid, and unmoved, for the device.
type Event struct {
	id        C.cl_event
	ctx       *Context
	profiling bool // the queue was made with QueueProfiling
	serial    bool // see serialMu
	pin       atomic.Pointer[runtime.Pinner]
	released  atomic.Bool
}

// ExecStatus is a command's execution status (CL_EVENT_COMMAND_EXECUTION_STATUS).
// Negative values are errors the command ended with.
type ExecStatus int32

// Execution statuses.
const (
	Complete  ExecStatus = C.CL_COMPLETE
	Running   ExecStatus = C.CL_RUNNING
	Submitted ExecStatus = C.CL_SUBMITTED
	Queued    ExecStatus = C.CL_QUEUED
)

// String names the status; an error status prints as its Status.
func (s ExecStatus) String() string {
	switch s {
	case Complete:
		return "complete"
	case Running:
		return "running"
	case Submitted:
		return "submitted"
	case Queued:
		return "queued"
	}
	return Status(s).Error()
}

func (q *CommandQueue) newEvent(id C.cl_event, pin *runtime.Pinner) *Event {
	e := &Event{id: id, ctx: q.ctx, profiling: q.props&QueueProfiling != 0, serial: q.ctx.serial}
	if pin != nil {
		e.pin.Store(pin)
	}
	return e
}

// Wait blocks until the command completes. It returns the command's error if
// it ended with one.
func (e *Event) Wait() error {
	if e == nil || e.released.Load() {
		return misuse("clWaitForEvents", ErrInvalidEvent, "event is nil or released")
	}
	if e.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	err := callErr("clWaitForEvents", int32(C.clWaitForEvents(1, &e.id)))
	runtime.KeepAlive(e)
	if err == nil {
		e.unpin()
	}
	return err
}

// Status returns the command's execution status.
func (e *Event) Status() (ExecStatus, error) {
	if e == nil || e.released.Load() {
		return 0, misuse("clGetEventInfo", ErrInvalidEvent, "event is nil or released")
	}
	if e.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	var s C.cl_int
	err := callErr("clGetEventInfo", int32(C.clGetEventInfo(e.id, C.CL_EVENT_COMMAND_EXECUTION_STATUS, C.size_t(unsafe.Sizeof(s)), unsafe.Pointer(&s), nil)))
	runtime.KeepAlive(e)
	if err == nil && s == C.CL_COMPLETE {
		e.unpin()
	}
	return ExecStatus(s), err
}

// Profile is a command's profiling times: device timestamps in nanoseconds.
type Profile struct {
	Queued, Submit, Start, End uint64
}

// Duration returns End - Start: how long the command ran on the device.
func (p Profile) Duration() time.Duration { return time.Duration(p.End - p.Start) }

// Profile returns the command's profiling times. The queue must have been
// made with QueueProfiling and the command must be complete, else
// ErrProfilingInfoNotAvailable.
func (e *Event) Profile() (Profile, error) {
	if e == nil || e.released.Load() {
		return Profile{}, misuse("clGetEventProfilingInfo", ErrInvalidEvent, "event is nil or released")
	}
	if !e.profiling {
		// Some runtimes (Oclgrind) answer anyway; the specification does not.
		return Profile{}, misuse("clGetEventProfilingInfo", ErrProfilingInfoNotAvailable, "the queue was made without QueueProfiling")
	}
	// Not complete (or ended in an error): Oclgrind answers zeros, where
	// the specification gives CL_PROFILING_INFO_NOT_AVAILABLE.
	if st, err := e.Status(); err != nil {
		return Profile{}, err
	} else if st != Complete {
		return Profile{}, misuse("clGetEventProfilingInfo", ErrProfilingInfoNotAvailable, fmt.Sprintf("the command is not complete (%v)", st))
	}
	if e.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	var t [4]C.cl_ulong
	params := [4]C.cl_profiling_info{C.CL_PROFILING_COMMAND_QUEUED, C.CL_PROFILING_COMMAND_SUBMIT, C.CL_PROFILING_COMMAND_START, C.CL_PROFILING_COMMAND_END}
	for i, p := range params {
		code := C.clGetEventProfilingInfo(e.id, p, C.size_t(unsafe.Sizeof(t[i])), unsafe.Pointer(&t[i]), nil)
		if err := callErr("clGetEventProfilingInfo", int32(code)); err != nil {
			return Profile{}, err
		}
	}
	runtime.KeepAlive(e)
	return Profile{Queued: uint64(t[0]), Submit: uint64(t[1]), Start: uint64(t[2]), End: uint64(t[3])}, nil
}

// Release releases the event. If it still pins Go memory, it first waits for
// the command, so the memory is never unpinned while the device uses it.
// It is idempotent: later calls return nil. A nil Event returns an error
// matching ErrInvalidEvent.
func (e *Event) Release() error {
	if e == nil {
		return misuse("clReleaseEvent", ErrInvalidEvent, "event is nil")
	}
	if !e.released.CompareAndSwap(false, true) {
		return nil
	}
	if e.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	var err error
	if e.pin.Load() != nil {
		err = callErr("clWaitForEvents", int32(C.clWaitForEvents(1, &e.id)))
		e.unpin()
	}
	if rerr := callErr("clReleaseEvent", int32(C.clReleaseEvent(e.id))); err == nil {
		err = rerr
	}
	runtime.KeepAlive(e)
	return err
}

func (e *Event) unpin() {
	if p := e.pin.Swap(nil); p != nil {
		p.Unpin()
	}
}

// WaitAll waits for all the events, which must belong to one context.
func WaitAll(events ...*Event) error {
	list, n, err := waitList("clWaitForEvents", nil, events)
	if err != nil || n == 0 {
		return err
	}
	if events[0].serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	err = callErr("clWaitForEvents", int32(C.clWaitForEvents(n, list)))
	runtime.KeepAlive(events)
	if err == nil {
		for _, e := range events {
			e.unpin()
		}
	}
	return err
}

// waitList turns events into the C array an enqueue call takes. Every event
// must be live and belong to ctx, the queue's context; a nil ctx stands for
// the context of the first event.
func waitList(call string, ctx *Context, events []*Event) (*C.cl_event, C.cl_uint, error) {
	if len(events) == 0 {
		return nil, 0, nil
	}
	ids := make([]C.cl_event, len(events))
	for i, e := range events {
		if e == nil || e.released.Load() {
			return nil, 0, misuse(call, ErrInvalidEventWaitList, "wait list holds a nil or released event")
		}
		if ctx == nil {
			ctx = e.ctx
		}
		if e.ctx != ctx {
			return nil, 0, misuse(call, ErrInvalidContext, "an event of the wait list belongs to another context")
		}
		ids[i] = e.id
	}
	return &ids[0], C.cl_uint(len(ids)), nil
}
