// Package cl is clpool's thin cgo binding of the OpenCL 1.2 C API: platforms
// and devices with their memory facts, contexts, command queues, buffers and
// sub-buffers, transfers, events with profiling times, programs and kernels.
// It is the only package of clpool that uses cgo.
//
// # Lifetimes
//
// Nothing here has a finalizer: every object is released explicitly, and
// Release is idempotent. Using a released object returns an error that
// wraps the matching Status (ErrInvalidMemObject for a buffer), checked in
// Go before the driver sees a dangling handle. Who releases a buffer is the
// business of its owner, usually a pool (package mempool).
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
// flags, sizes over the device's limit and misaligned sub-buffer origins.
// This package checks those rules itself, so every runtime answers the
// same, specified Status.
//
// # Host memory
//
// A blocking transfer uses the Go slice only during the call. A non-blocking
// one pins the slice (runtime.Pinner) until its Event is seen complete by
// Wait or Status, or is released; until then the slice must not be touched.
// The probe write of CommandQueue.Touch reads static C memory.
//
// # Choosing a device
//
// DefaultQueue opens the device named by the CLPOOL_DEVICE environment
// variable: "platform:device" indices ("1:0") or a case-insensitive part of
// a name ("pocl", "oclgrind"); unset, the first device found.
package cl
