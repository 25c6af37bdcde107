// Package cl is clpool's thin cgo binding of the OpenCL C API: platforms
// and devices with their memory facts, contexts, command queues, buffers and
// sub-buffers, transfers, events with profiling times, programs and kernels;
// and, where a device has OpenCL 2.0's shared virtual memory, SVM. It is
// the only package of clpool that uses cgo.
//
// # OpenCL versions
//
// The package is compiled against the OpenCL 3.0 headers
// (CL_TARGET_OPENCL_VERSION 300, from opencl-headers 3.0 or later) and
// runs on platforms of OpenCL 1.2 and later: Oclgrind is 1.2, POCL 3.x
// reports 3.0. Everything it calls unconditionally is the 1.2 API, which
// every later version keeps, under the 1.2 names even where 2.0 deprecated
// them (clCreateCommandQueue). Anything newer is detected at run time, per
// device: Device.VersionNumber reads CL_DEVICE_VERSION, and
// Device.SVMCapabilities, the one newer feature used, is asked of 2.0 and
// later devices only; it is 0 on 1.x devices and on 3.0 devices without
// SVM, which 3.0 makes optional.
//
// # Lifetimes
//
// Nothing here has a finalizer: every object is released explicitly, and
// Release is idempotent. Using a released object returns an error that
// wraps the matching Status (ErrInvalidMemObject for a buffer), checked in
// Go before the driver sees a dangling handle. So does every call on a nil
// object, Release included, except the accessors that return no error
// (Buffer.Size, Buffer.Released, CommandQueue.Device, ...): they answer the
// zero value. Who releases a buffer is the business of its owner, usually a
// pool (package mempool). The check is made before the call, without a
// lock: releasing an object while another goroutine uses it is a data race
// on it, which no check makes safe (Oclgrind crashes when a buffer is
// released during its unmap). A queue is the exception: CommandQueue.Hold
// keeps its Release waiting while a goroutine that does not own it calls
// on it (as package mempool does, for the markers that order reuse).
//
// # Concurrency
//
// Objects are safe for concurrent use, as OpenCL 1.2 requires of every call
// but clSetKernelArg, except a Kernel: setting its arguments and enqueueing
// it are separate calls, so one goroutine at a time uses it. Where
// a runtime falls short, this package takes locks itself: every call on a
// context of Oclgrind (whose heap two goroutines creating buffers corrupt)
// takes one mutex; on NVIDIA's driver, which crashes when flushes race
// markers and barriers of other queues, Flush, EnqueueMarker, EnqueueBarrier
// and EnqueueMigrate take another (none of them blocks). POCL takes none.
//
// # Errors
//
// A failing call returns a *CallError that names the C function and wraps a
// Status. Every Status constant is an error, so
//
//	errors.Is(err, cl.ErrOutOfResources)
//
// works through any wrapping (fmt.Errorf("%w"), pkg/errors). A program that
// does not compile returns a *BuildError carrying the build log.
//
// Runtimes differ in how much they check: Oclgrind accepts invalid buffer
// and sub-buffer flags, sizes over the device's limit, misaligned sub-buffer
// origins, buffers, kernels and events of another context, fill patterns of
// the wrong length, copies of 0 bytes and between overlapping sub-buffers of
// one buffer, argument indices past 32 bits (a cl_uint wraps them to another
// argument), and local memory for an argument that is not __local (it
// crashes then) or any other value for one that is; POCL accepts some of
// these too, work sizes of 0, and reads, writes and copies past a
// sub-buffer's end (its neighbour's bytes), and aborts the process on a
// kernel that asks more local memory than the device has (its own __local
// arrays and its arguments); C strings end at a NUL byte, which would cut a
// source, options or a kernel name unseen. This package checks those rules
// itself, before the C call, so every runtime answers the same Status, the
// one the OpenCL 1.2 specification gives.
//
// With no OpenCL platform installed, or none that the ICD loader finds
// through OCL_ICD_VENDORS, Platforms, SelectDevice and DefaultQueue return
// an error matching ErrPlatformNotFound (CL_PLATFORM_NOT_FOUND_KHR) that
// says what to check.
//
// # Host memory
//
// A blocking transfer uses the Go slice only during the call. A non-blocking
// one pins the slice (runtime.Pinner) until its Event is seen complete by
// Wait or Status, or is released; until then the slice must not be touched.
// The probe write of CommandQueue.Touch reads static C memory.
//
// # Shared virtual memory
//
// SVM (OpenCL 2.0) is memory that host and devices address with the same
// pointers. Support is detected at run time: Device.SVMCapabilities, read
// when the device is listed, is 0 on OpenCL 1.x devices (Oclgrind), and
// Context.SVMCapabilities is what all of a context's devices support. On a
// context without it, Context.SVMAlloc returns an error matching
// ErrSVMNotSupported and calls no OpenCL 2.0 function, which the ICD
// loader may not be able to dispatch to a 1.2 platform; so does a
// fine-grain or atomics allocation where the devices support only coarse
// grain. clSVMAlloc reports failure as NULL, without a status: SVMAlloc
// checks flags, alignment and size first (ErrInvalidValue,
// ErrInvalidBufferSize), and reports a NULL after those checks as
// ErrMemObjectAllocationFailure, an out-of-memory to a pool.
//
// An SVM is passed to kernels with Kernel.SetArg or SetArgSVMPointer (an
// offset into it). The host touches a coarse-grain SVM only between
// CommandQueue.EnqueueSVMMap, which blocks and returns the mapped bytes,
// and EnqueueSVMUnmap; a fine-grain one (SVMFineGrain) whenever no command
// uses it, through SVM.Bytes. EnqueueSVMMemFill and EnqueueSVMMemcpy work
// on the device. Free, like clSVMFree, does not wait for commands: finish
// those that use the memory first. A second Free is an error, as is a Free
// while mapped; an SVM holds a reference to its context until freed.
//
// # Several devices
//
// A context may hold several devices of one platform (CreateContext). A
// buffer is then valid on each of them: a queue of any device may write,
// copy or run kernels on it, commands of different queues being ordered by
// their events. Context.MaxMemAllocSize is the least of the devices'
// limits and Context.MemBaseAddrAlign the largest of their alignments, so
// sizes and offsets that respect these suit every device. POCL shows
// several CPU devices when the environment variable POCL_DEVICES names
// them before the ICD loader starts it: POCL_DEVICES="pthread pthread".
//
// # Choosing a device
//
// DefaultQueue opens the device named by the CLPOOL_DEVICE environment
// variable: "platform:device" indices ("1:0") or a case-insensitive part of
// a name ("pocl", "oclgrind"). Unset, it opens the first device that is not
// a simulator, so a real device wins over Oclgrind even where the ICD
// loader lists Oclgrind first; a simulator is opened only when it is the
// only device, or when CLPOOL_DEVICE names it. See SelectDevice.
package cl
