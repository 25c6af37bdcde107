// clpool.h is the one C header of package cl: it fixes the OpenCL API level
// and holds the few C-side helpers the Go code needs.
//
// The headers are those of OpenCL 2.0, so that the declarations of shared
// virtual memory (clSVMAlloc, ...) are visible; every other call is of
// OpenCL 1.2, whose deprecated names (clCreateCommandQueue) stay in use so
// that 1.2 platforms such as Oclgrind keep working. The 2.0 functions are
// called only on contexts whose devices report SVM (svm.go checks).
#ifndef CLPOOL_H
#define CLPOOL_H

#define CL_TARGET_OPENCL_VERSION 200
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>

// clpool_zero is the source of the probe write that commits a new buffer's
// memory (CommandQueue.Touch). It is static C memory, so a non-blocking
// write may read it long after the enqueue returns.
static const cl_uint clpool_zero = 0;

static inline cl_int clpool_touch(cl_command_queue q, cl_mem m, size_t n) {
	return clEnqueueWriteBuffer(q, m, CL_FALSE, 0, n, &clpool_zero, 0, NULL, NULL);
}

// clpool_transfer is clEnqueueWriteBuffer (write != 0) or
// clEnqueueReadBuffer, whose arguments are the same, so that one Go
// function serves both.
static inline cl_int clpool_transfer(int write, cl_command_queue q, cl_mem m, cl_bool blocking,
		size_t offset, size_t size, void *ptr, cl_uint nwait, const cl_event *wait, cl_event *ev) {
	if (write)
		return clEnqueueWriteBuffer(q, m, blocking, offset, size, ptr, nwait, wait, ev);
	return clEnqueueReadBuffer(q, m, blocking, offset, size, ptr, nwait, wait, ev);
}

// clpool_set_callback registers Go handle h to be called (clpoolEventDone)
// when e completes; it is defined in callback.c.
#include <stdint.h>
cl_int clpool_set_callback(cl_event e, uintptr_t h);

#endif
