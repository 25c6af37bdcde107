package cl

/*
#include "clpool.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/cgo"
	"runtime/debug"
)

// This file is what orders commands across queues: markers and barriers
// with wait lists, event retain and callbacks, and memory migration.

// EnqueueMarker enqueues a marker and returns its event, which completes
// once the events of wait have, or, with no wait list, once every command
// enqueued on q before it has (on an out-of-order queue too). It does not
// stop later commands; see EnqueueBarrier. Release the event.
func (q *CommandQueue) EnqueueMarker(wait ...*Event) (*Event, error) {
	return q.enqueueSync("clEnqueueMarkerWithWaitList", false, wait)
}

// EnqueueBarrier enqueues a barrier: no command enqueued on q after it
// starts before the events of wait complete, or, with no wait list, before
// every command enqueued before it does. It returns no event.
//
// A barrier on an out-of-order queue also keeps the one before it, as the
// specification has it: POCL lets commands after a barrier with a wait
// list start before the barrier enqueued before it (of two barriers in a
// row, only the last holds), so there the barrier waits on a marker of
// wait, which, as any command, waits for the barrier before. The marker
// and its barrier are enqueued under the queue's lock, so that goroutines
// that enqueue barriers on one queue cannot interleave them (another's
// barrier on a marker enqueued before this one's would come last).
func (q *CommandQueue) EnqueueBarrier(wait ...*Event) error {
	if len(wait) > 0 && q != nil && q.props&QueueOutOfOrder != 0 {
		q.barrierMu.Lock()
		defer q.barrierMu.Unlock()
		m, err := q.enqueueSync("clEnqueueMarkerWithWaitList", false, wait)
		if err != nil {
			return err
		}
		_, err = q.enqueueSync("clEnqueueBarrierWithWaitList", true, []*Event{m})
		return errors.Join(err, m.Release())
	}
	_, err := q.enqueueSync("clEnqueueBarrierWithWaitList", true, wait)
	return err
}

func (q *CommandQueue) enqueueSync(call string, barrier bool, wait []*Event) (*Event, error) {
	qid, err := q.handle(call)
	if err != nil {
		return nil, err
	}
	list, n, err := waitList(call, q.ctx, wait)
	if err != nil {
		return nil, err
	}
	if mu := q.ctx.orderLock(); mu != nil {
		mu.Lock()
		defer mu.Unlock()
	}
	var ev C.cl_event
	var code C.cl_int
	if barrier {
		code = C.clEnqueueBarrierWithWaitList(qid, n, list, nil)
	} else {
		code = C.clEnqueueMarkerWithWaitList(qid, n, list, &ev)
	}
	runtime.KeepAlive(q)
	runtime.KeepAlive(wait)
	return q.finishEnqueue(call, code, ev, nil, !barrier)
}

// Retain returns a second handle of the same command (clRetainEvent):
// each handle is released on its own, and the command's event lives until
// both are. The new handle does not pin memory.
func (e *Event) Retain() (*Event, error) {
	if e == nil || e.released.Load() {
		return nil, misuse("clRetainEvent", ErrInvalidEvent, "event is nil or released")
	}
	if err := callErr("clRetainEvent", int32(C.clRetainEvent(e.id))); err != nil {
		return nil, err
	}
	runtime.KeepAlive(e)
	return &Event{id: e.id, profiling: e.profiling, serial: e.serial, ctx: e.ctx}, nil
}

// Done reports whether the command has completed (or ended with an
// error, which it returns), without waiting.
func (e *Event) Done() (bool, error) {
	s, err := e.Status()
	if err != nil {
		return false, err
	}
	if s < 0 {
		return true, callErr("clGetEventInfo", int32(s))
	}
	return s == Complete, nil
}

// OnComplete arranges for f to be called, on a new goroutine, once the
// command completes or ends with an error (the status says which). The
// event may be released meanwhile: the runtime keeps the command until it
// has called back. A panic in f is recovered and written to standard
// error with its stack, as net/http does for a handler's: on a goroutine
// the caller never started, it would end the program.
func (e *Event) OnComplete(f func(ExecStatus)) error {
	if e == nil || e.released.Load() {
		return misuse("clSetEventCallback", ErrInvalidEvent, "event is nil or released")
	}
	if f == nil {
		return misuse("clSetEventCallback", ErrInvalidValue, "nil callback")
	}
	h := cgo.NewHandle(f)
	if e.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	code := C.clpool_set_callback(e.id, C.uintptr_t(h))
	runtime.KeepAlive(e)
	if err := callErr("clSetEventCallback", int32(code)); err != nil {
		h.Delete()
		return err
	}
	return nil
}

//export clpoolEventDone
func clpoolEventDone(status C.cl_int, h C.uintptr_t) {
	handle := cgo.Handle(h)
	f := handle.Value().(func(ExecStatus))
	handle.Delete()
	go callBack(f, ExecStatus(status)) // not on the runtime's thread, which may hold its locks (or ours)
}

// callBack calls an OnComplete callback, and reports a panic in it.
func callBack(f func(ExecStatus), status ExecStatus) {
	defer func() {
		if v := recover(); v != nil {
			fmt.Fprintf(os.Stderr, "cl: an OnComplete callback panicked: %v\n%s", v, debug.Stack())
		}
	}()
	f(status)
}

// MigrationFlags say how EnqueueMigrate moves buffers (cl_mem_migration_flags).
type MigrationFlags uint64

// Migration flags.
const (
	// MigrateToHost moves the buffers to the host instead of q's device.
	MigrateToHost MigrationFlags = C.CL_MIGRATE_MEM_OBJECT_HOST
	// MigrateContentUndefined moves no content: the buffers' contents are
	// undefined afterwards, which costs nothing to keep.
	MigrateContentUndefined MigrationFlags = C.CL_MIGRATE_MEM_OBJECT_CONTENT_UNDEFINED
)

// EnqueueMigrate moves buffers to q's device (clEnqueueMigrateMemObjects),
// which makes a runtime that allocates lazily commit their memory. With
// MigrateContentUndefined it writes nothing a user could see. It returns
// the command's event if wantEvent.
func (q *CommandQueue) EnqueueMigrate(bufs []*Buffer, flags MigrationFlags, wantEvent bool, wait ...*Event) (*Event, error) {
	const call = "clEnqueueMigrateMemObjects"
	qid, err := q.handle(call)
	if err != nil {
		return nil, err
	}
	if len(bufs) == 0 {
		return nil, misuse(call, ErrInvalidValue, "no buffers")
	}
	if flags&^(MigrateToHost|MigrateContentUndefined) != 0 {
		return nil, misuse(call, ErrInvalidValue, "unknown migration flags")
	}
	mems := make([]C.cl_mem, len(bufs))
	for i, b := range bufs {
		if mems[i], err = b.handle(call); err != nil {
			return nil, err
		}
		if b.ctx != q.ctx {
			return nil, misuse(call, ErrInvalidContext, "a buffer of another context")
		}
	}
	list, n, err := waitList(call, q.ctx, wait)
	if err != nil {
		return nil, err
	}
	if mu := q.ctx.orderLock(); mu != nil {
		mu.Lock()
		defer mu.Unlock()
	}
	var ev C.cl_event
	evp := &ev
	if !wantEvent {
		evp = nil
	}
	code := C.clEnqueueMigrateMemObjects(qid, C.cl_uint(len(mems)), &mems[0], C.cl_mem_migration_flags(flags), n, list, evp)
	runtime.KeepAlive(q)
	runtime.KeepAlive(bufs)
	runtime.KeepAlive(wait)
	return q.finishEnqueue(call, code, ev, nil, wantEvent)
}
