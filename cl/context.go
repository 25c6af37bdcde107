package cl

/*
#include "clpool.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// Context is an OpenCL context: the devices, buffers, programs and queues
// that work together. Release it when done; Release is idempotent.
type Context struct {
	id       C.cl_context
	devices  []*Device
	maxAlloc int64 // the least MaxMemAllocSize of the devices
	align    int64 // the largest MemBaseAddrAlign of the devices, bytes
	serial   bool  // the runtime is not thread-safe: calls take serialMu
	// orderSerial: the runtime crashes on concurrent calls that order
	// queues; they take orderMu (see orderLock)
	orderSerial bool
	released    atomic.Bool

	relMu     sync.Mutex // protects onRelease
	onRelease []func()   // OnRelease's functions, taken by the first Release
}

// CreateContext makes a context on the given devices: at least one, all of
// one platform. A nil device, or devices of different platforms, return
// ErrInvalidDevice without reaching the driver. A device given twice counts
// once, as the specification says (Oclgrind would refuse the repeat), so
// Devices lists each device once, in the order given.
//
// In a context of several devices a buffer is valid on each of them: a
// queue of any of the devices may use it, the runtime moving the contents
// where they are needed (EnqueueMigrateMemObjects does it ahead of time),
// and commands of different queues are ordered by their events. Buffers
// are placed for all the devices at once: see MemBaseAddrAlign and
// MaxMemAllocSize.
func CreateContext(devices ...*Device) (*Context, error) {
	const call = "clCreateContext"
	if len(devices) == 0 {
		return nil, misuse(call, ErrInvalidValue, "no device given")
	}
	var (
		ids  []C.cl_device_id
		devs []*Device
	)
	for i, d := range devices {
		if d == nil || d.id == nil || d.Platform == nil {
			return nil, misuse(call, ErrInvalidDevice, fmt.Sprintf("device %d is nil or was not listed by Platform.Devices", i))
		}
		if d.Platform.id != devices[0].Platform.id {
			return nil, misuse(call, ErrInvalidDevice, fmt.Sprintf("devices of different platforms, %v and %v: a context holds devices of one platform", devices[0], d))
		}
		if !slices.Contains(ids, d.id) {
			ids = append(ids, d.id)
			devs = append(devs, d)
		}
	}
	var code C.cl_int
	id := C.clCreateContext(nil, C.cl_uint(len(ids)), &ids[0], nil, nil, &code)
	if err := callErr(call, int32(code)); err != nil {
		return nil, err
	}
	c := &Context{id: id, devices: devs, maxAlloc: devs[0].MaxMemAllocSize, serial: needsSerial(devs), orderSerial: needsOrderSerial(devs)}
	for _, d := range devs {
		c.maxAlloc = min(c.maxAlloc, d.MaxMemAllocSize)
		c.align = max(c.align, d.MemBaseAddrAlign)
	}
	return c, nil
}

// MaxMemAllocSize returns the largest buffer every device of the context
// can hold: the least of their MaxMemAllocSize. A nil Context returns 0.
func (c *Context) MaxMemAllocSize() int64 {
	if c == nil {
		return 0
	}
	return c.maxAlloc
}

// MemBaseAddrAlign returns, in bytes like Device.MemBaseAddrAlign, the
// largest CL_DEVICE_MEM_BASE_ADDR_ALIGN of the context's devices (the API
// reports bits). A sub-buffer whose origin is a multiple of it can be used
// by a queue of any of the devices; CreateSubBuffer needs an origin aligned
// for one device only, and a queue of a device for which it is not aligned
// fails with ErrMisalignedSubBufferOffset. A nil Context returns 0.
func (c *Context) MemBaseAddrAlign() int64 {
	if c == nil {
		return 0
	}
	return c.align
}

// Devices returns the context's devices; none for a nil Context.
func (c *Context) Devices() []*Device {
	if c == nil {
		return nil
	}
	return append([]*Device(nil), c.devices...)
}

// Release releases the context. It is idempotent: later calls return nil.
// Objects made in the context hold their own references, so buffers and
// queues stay usable until they are released too. The first Release runs
// the functions OnRelease registered, last first, before it releases the
// context. A nil Context returns an error matching ErrInvalidContext.
func (c *Context) Release() error {
	if c == nil {
		return misuse("clReleaseContext", ErrInvalidContext, "context is nil")
	}
	if !c.released.CompareAndSwap(false, true) {
		return nil
	}
	c.relMu.Lock()
	fs := c.onRelease
	c.onRelease = nil
	c.relMu.Unlock()
	var panics []error
	i, done := len(fs)-1, false
	defer func() {
		if done {
			return
		}
		// fs[i] called runtime.Goexit (t.FailNow, say), which recover
		// does not stop: run the rest and release the context on the way
		// out all the same.
		for i--; i >= 0; i-- {
			_ = runOnRelease(fs[i])
		}
		_ = c.releaseID()
	}()
	for ; i >= 0; i-- {
		if err := runOnRelease(fs[i]); err != nil {
			panics = append(panics, err)
		}
	}
	done = true
	err := c.releaseID()
	if len(panics) == 0 {
		return err // a *CallError, as the package doc says, not joined
	}
	return errors.Join(append(panics, err)...)
}

// releaseID calls clReleaseContext.
func (c *Context) releaseID() error {
	if c.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	err := callErr("clReleaseContext", int32(C.clReleaseContext(c.id)))
	runtime.KeepAlive(c)
	return err
}

// runOnRelease runs f, turning a panic into an error.
func runOnRelease(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("clReleaseContext: a function OnRelease registered panicked: %v", r)
		}
	}()
	f()
	return nil
}

// OnRelease registers f to run when the context is released: the first
// Release runs the functions registered, last first, before it releases
// the context. A cache of objects made in the context (programs, kernels:
// each holds a reference to it, which keeps it alive) lets go of them
// there, so that the runtime can destroy the context. f runs on the
// goroutine that calls Release (a DefaultQueue's Release, for its
// context), with no lock of the context or of its queues held; a panic
// in f is recovered, the context is released all the same, and Release
// returns the panic as an error (f calling runtime.Goexit still releases
// the context, and runs the other functions, on the goroutine's way out).
// A nil or released Context registers nothing and returns an error
// matching ErrInvalidContext; a nil f, one matching ErrInvalidValue.
func (c *Context) OnRelease(f func()) error {
	if f == nil {
		return misuse("OnRelease", ErrInvalidValue, "function is nil")
	}
	if c == nil {
		return misuse("OnRelease", ErrInvalidContext, "context is nil")
	}
	c.relMu.Lock()
	defer c.relMu.Unlock()
	if c.released.Load() {
		return misuse("OnRelease", ErrInvalidContext, "context is released")
	}
	c.onRelease = append(c.onRelease, f)
	return nil
}

func (c *Context) handle(call string) (C.cl_context, error) {
	if c == nil || c.released.Load() {
		return nil, misuse(call, ErrInvalidContext, "context is nil or released")
	}
	return c.id, nil
}

// QueueProperties selects command-queue behaviour (cl_command_queue_properties).
type QueueProperties uint64

// Queue properties. The zero value is an in-order queue without profiling.
const (
	QueueOutOfOrder QueueProperties = C.CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE
	QueueProfiling  QueueProperties = C.CL_QUEUE_PROFILING_ENABLE
)

// CommandQueue is an OpenCL command queue on one device of a context.
// A queue is safe for concurrent use: the OpenCL runtime serializes enqueues.
type CommandQueue struct {
	id          C.cl_command_queue
	ctx         *Context
	device      *Device
	props       QueueProperties
	ownsContext bool // made by DefaultQueue: Release releases the context too
	released    atomic.Bool
	finished    atomic.Bool  // Release finished the queue's commands (see Finished)
	releasing   sync.RWMutex // held by Release while it runs, for Finished to wait on; read-held by Hold
	barrierMu   sync.Mutex   // out of order: keeps a barrier's marker and the barrier on it together (EnqueueBarrier)
}

// NewCommandQueue makes a queue on dev, which must be one of ctx's devices
// (else ErrInvalidDevice).
func NewCommandQueue(ctx *Context, dev *Device, props QueueProperties) (*CommandQueue, error) {
	cid, err := ctx.handle("clCreateCommandQueue")
	if err != nil {
		return nil, err
	}
	if dev == nil {
		return nil, misuse("clCreateCommandQueue", ErrInvalidDevice, "device is nil")
	}
	if props&^(QueueOutOfOrder|QueueProfiling) != 0 {
		// Oclgrind makes a queue with any bits; the specification refuses them.
		return nil, misuse("clCreateCommandQueue", ErrInvalidValue, fmt.Sprintf("properties %#x: only QueueOutOfOrder and QueueProfiling are queue properties", uint64(props)))
	}
	if ctx.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	var code C.cl_int
	id := C.clCreateCommandQueue(cid, dev.id, C.cl_command_queue_properties(props), &code)
	runtime.KeepAlive(ctx)
	if err := callErr("clCreateCommandQueue", int32(code)); err != nil {
		return nil, err
	}
	return &CommandQueue{id: id, ctx: ctx, device: dev, props: props}, nil
}

// DefaultQueue returns a new context and in-order queue on the device that
// SelectDevice picks: the one CLPOOL_DEVICE names, else the first device
// that is not a simulator, and a simulator (Oclgrind) only if it is the
// only device there is. The queue owns its context: Release releases both.
func DefaultQueue() (*CommandQueue, error) {
	return DefaultQueueWith(0)
}

// DefaultQueueWith is DefaultQueue with queue properties, such as
// QueueProfiling or QueueOutOfOrder.
func DefaultQueueWith(props QueueProperties) (*CommandQueue, error) {
	dev, err := SelectDevice()
	if err != nil {
		return nil, err
	}
	ctx, err := CreateContext(dev)
	if err != nil {
		return nil, err
	}
	q, err := NewCommandQueue(ctx, dev, props)
	if err != nil {
		_ = ctx.Release()
		return nil, err
	}
	q.ownsContext = true
	return q, nil
}

// Context returns the queue's context; nil for a nil queue.
func (q *CommandQueue) Context() *Context {
	if q == nil {
		return nil
	}
	return q.ctx
}

// Device returns the queue's device; nil for a nil queue.
func (q *CommandQueue) Device() *Device {
	if q == nil {
		return nil
	}
	return q.device
}

// Properties returns the properties the queue was made with; 0 for a nil
// queue.
func (q *CommandQueue) Properties() QueueProperties {
	if q == nil {
		return 0
	}
	return q.props
}

// Finish blocks until every command enqueued so far has completed.
func (q *CommandQueue) Finish() error {
	id, err := q.handle("clFinish")
	if err != nil {
		return err
	}
	if q.ctx.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	err = callErr("clFinish", int32(C.clFinish(id)))
	runtime.KeepAlive(q)
	return err
}

// Flush submits every command enqueued so far to the device, without waiting.
func (q *CommandQueue) Flush() error {
	id, err := q.handle("clFlush")
	if err != nil {
		return err
	}
	if mu := q.ctx.orderLock(); mu != nil {
		mu.Lock()
		defer mu.Unlock()
	}
	err = callErr("clFlush", int32(C.clFlush(id)))
	runtime.KeepAlive(q)
	return err
}

// Release waits for the queue's commands (clReleaseCommandQueue flushes and
// the runtime finishes them) and releases it, and its context if the queue
// came from DefaultQueue, once every Hold of it has ended. It is
// idempotent: later calls return nil. A nil queue returns an error
// matching ErrInvalidCommandQueue.
func (q *CommandQueue) Release() error {
	if q == nil {
		return misuse("clReleaseCommandQueue", ErrInvalidCommandQueue, "queue is nil")
	}
	first, err := q.release()
	if first && q.ownsContext {
		// After the queue's lock is let go: the context's OnRelease
		// functions may ask the queue (Finished, Hold).
		if cerr := q.ctx.Release(); err == nil {
			err = cerr
		}
	}
	return err
}

// release is Release but for the context: it releases the queue under its
// releasing lock, and reports whether this call did (the first).
func (q *CommandQueue) release() (bool, error) {
	q.releasing.Lock() // before the flag: Finished, seeing it, waits for the rest; after every Hold
	defer q.releasing.Unlock()
	if !q.released.CompareAndSwap(false, true) {
		return false, nil
	}
	if q.ctx.serial {
		serialMu.Lock()
	}
	err := callErr("clFinish", int32(C.clFinish(q.id)))
	if err == nil {
		q.finished.Store(true)
	}
	if rerr := callErr("clReleaseCommandQueue", int32(C.clReleaseCommandQueue(q.id))); err == nil {
		err = rerr
	}
	runtime.KeepAlive(q)
	if q.ctx.serial {
		serialMu.Unlock()
	}
	return true, err
}

// Finished reports whether Release has finished every command of the
// queue, which it does before it releases the queue: from then on, nothing
// enqueued on it runs or waits, and no command can be enqueued on it. If a
// Release is under way on another goroutine, Finished waits for it to
// return (as long as the queue's commands take). It is false before
// Release and if Release's wait for the commands failed; false for a nil
// queue.
func (q *CommandQueue) Finished() bool {
	if q == nil || !q.released.Load() {
		return false
	}
	q.releasing.RLock()
	q.releasing.RUnlock() // an empty hold: it waits for a Release under way
	return q.finished.Load()
}

// FinishedNoWait is Finished without the wait: false while a Release is
// under way (or waits for holds: it has not begun).
func (q *CommandQueue) FinishedNoWait() bool {
	return q != nil && q.released.Load() && q.releasedNoWait() // small enough to be inlined: a queue not released costs a load
}

// releasedNoWait is FinishedNoWait's end, for a released queue.
func (q *CommandQueue) releasedNoWait() bool {
	if !q.releasing.TryRLock() {
		return false
	}
	q.releasing.RUnlock()
	return q.finished.Load()
}

// Hold keeps Release from beginning until Unhold, so that calls on the
// queue in between do not race a Release on another goroutine (the data
// race the package doc warns of). It reports false, holding nothing, if
// Release has begun: it waits for a Release under way first, so that
// Finished then answers at once. Many goroutines may hold a queue at
// once; a Release waits for each to Unhold, and a Hold that comes while
// a Release waits, waits for it. So a holder must not call Release, nor
// Hold again, nor call what may Hold the queue (package mempool holds the
// queues it enqueues markers on and, with its sanitizer, the queue of a
// buffer closed): with a Release waiting, either would wait for ever.
// False for a nil queue.
func (q *CommandQueue) Hold() bool {
	if q == nil {
		return false
	}
	q.releasing.RLock()
	if q.released.Load() {
		q.releasing.RUnlock()
		return false
	}
	return true
}

// TryHold is Hold without the wait: it reports false, holding nothing,
// while a Release is under way or waits for holds too.
func (q *CommandQueue) TryHold() bool {
	if q == nil || !q.releasing.TryRLock() {
		return false
	}
	if q.released.Load() {
		q.releasing.RUnlock()
		return false
	}
	return true
}

// Unhold ends a Hold (or TryHold) that returned true; on a nil queue, which
// no Hold holds, it does nothing.
func (q *CommandQueue) Unhold() {
	if q != nil {
		q.releasing.RUnlock()
	}
}

func (q *CommandQueue) handle(call string) (C.cl_command_queue, error) {
	if q == nil || q.released.Load() {
		return nil, misuse(call, ErrInvalidCommandQueue, "queue is nil or released")
	}
	return q.id, nil
}
