package cl

/*
#include "clpool.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// This file works around NVIDIA's OpenCL driver (3.0, 580.159): once an
// argument of a kernel was set to an SVM pointer, setting it to a buffer
// makes every later enqueue of that kernel fail with
// CL_INVALID_KERNEL_ARGS, whether or not it ran with the SVM pointer,
// while the same kernel made anew takes the buffer. So SetArg, asked to
// set a buffer where an SVM pointer is set, first gives the Kernel a new
// runtime kernel of the same program (renew), with the other arguments
// set again. Other runtimes (POCL, Oclgrind) need none of it; they pay one
// clCreateKernel for each such change, never on the path where the
// argument keeps its kind.

// renew replaces k's runtime kernel with a new one of the same program and
// name, on which every argument set so far except skip is set again, and
// releases the old one. An argument whose buffer was released or whose SVM
// was freed since is left unset: the enqueue refuses it anyway (argsLive).
// On an error k keeps its old kernel.
func (k *Kernel) renew(call string, skip int) error {
	id, err := k.sibling(call)
	if err != nil {
		return err
	}
	fresh := &Kernel{id: id, name: k.name, ctx: k.ctx, serial: k.serial, quals: k.quals}
	for i, v := range k.vals {
		if i == skip || v == nil {
			continue
		}
		var m argMem
		if i < len(k.mems) {
			m = k.mems[i]
		}
		switch {
		case m.svm != nil:
			if !m.svm.Freed() {
				err = fresh.SetArgSVMPointer(i, m.svm, m.off)
			}
		case m.buf != nil:
			if !m.buf.Released() {
				err = fresh.SetArg(i, m.buf)
			}
		default:
			err = fresh.SetArg(i, v)
		}
		if err != nil {
			fresh.Release()
			return err
		}
	}
	old := k.id
	k.id = id
	if k.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	C.clReleaseKernel(old)
	runtime.KeepAlive(k)
	return nil
}

// sibling makes a new runtime kernel of k's program and name.
func (k *Kernel) sibling(call string) (C.cl_kernel, error) {
	if k.serial {
		serialMu.Lock()
		defer serialMu.Unlock()
	}
	var prog C.cl_program
	code := C.clGetKernelInfo(k.id, C.CL_KERNEL_PROGRAM, C.size_t(unsafe.Sizeof(prog)), unsafe.Pointer(&prog), nil)
	if err := callErr("clGetKernelInfo", int32(code)); err != nil {
		return nil, err
	}
	cname := C.CString(k.name)
	defer C.free(unsafe.Pointer(cname))
	id := C.clCreateKernel(prog, cname, &code)
	runtime.KeepAlive(k)
	if err := callErr("clCreateKernel", int32(code)); err != nil {
		return nil, &CallError{Call: call, Status: Status(code), Detail: "renewing kernel " + k.name + " for a buffer where an SVM pointer was set: clCreateKernel"}
	}
	return id, nil
}
