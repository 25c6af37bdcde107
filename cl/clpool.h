// clpool.h is the one C header of package cl: it fixes the OpenCL API level
// and holds the few C-side helpers the Go code needs.
//
// The headers are those of OpenCL 3.0 (CL_TARGET_OPENCL_VERSION 300; Debian's
// opencl-headers 3.0 have them), so that every declaration up to 3.0 is
// visible. What a platform offers is decided at run time, per device, not
// by the headers: every call made unconditionally is of OpenCL 1.2, which
// all later versions keep, and the 1.2 names deprecated since 2.0
// (clCreateCommandQueue) stay in use, so that 1.2 platforms such as
// Oclgrind keep working; CL_USE_DEPRECATED_OPENCL_1_2_APIS keeps them free
// of deprecation warnings. No 2.0 API deprecated in 2.1 or later is used, so
// CL_USE_DEPRECATED_OPENCL_2_0_APIS is not needed. Shared virtual memory (2.0,
// optional in 3.0) is detected from CL_DEVICE_SVM_CAPABILITIES, asked of 2.0
// and later devices only, and its functions (clSVMAlloc, ...) are called
// only on contexts whose devices all report it (svm.go checks).
#ifndef CLPOOL_H
#define CLPOOL_H

#define CL_TARGET_OPENCL_VERSION 300
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
