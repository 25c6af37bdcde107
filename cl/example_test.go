package cl_test

import (
	"errors"
	"fmt"

	"github.com/clpool/clpool/cl"
)

// A buffer round trip: write four floats, read them back.
func Example() {
	q, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Release()

	buf, err := q.Context().CreateBuffer(cl.MemReadWrite, 16)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer buf.Release()

	in := []float32{1, 2, 3, 4}
	out := make([]float32, 4)
	if err := q.WriteBuffer(buf, 0, cl.Bytes(in)); err != nil {
		fmt.Println(err)
		return
	}
	if err := q.ReadBuffer(buf, 0, cl.Bytes(out)); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out)
	// Output: [1 2 3 4]
}

// Errors name the failing call and match their Status with errors.Is.
func ExampleStatus() {
	q, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Release()

	_, err = q.Context().CreateBuffer(cl.MemReadWrite, 0)
	fmt.Println(err)
	fmt.Println(errors.Is(err, cl.ErrInvalidBufferSize))
	// Output:
	// clCreateBuffer: CL_INVALID_BUFFER_SIZE (-61): 0 bytes, flags READ_WRITE
	// true
}

// Shared virtual memory where the device has it (OpenCL 2.0, POCL), a
// buffer where it does not (Oclgrind, OpenCL 1.2): the same bytes either
// way. A coarse-grain SVM is the host's only while mapped.
func ExampleContext_SVMAlloc() {
	q, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Release()

	data := make([]byte, 8)
	s, err := q.Context().SVMAlloc(cl.SVMReadWrite, 8, 0)
	switch {
	case err == nil:
		ev, err := q.EnqueueSVMMemFill(s, []byte{7}, 0, 8)
		if err != nil {
			fmt.Println(err)
			return
		}
		ev.Release()
		host, err := q.EnqueueSVMMap(s, false, 0, 8)
		if err != nil {
			fmt.Println(err)
			return
		}
		copy(data, host)
		if err := q.EnqueueSVMUnmap(s); err != nil {
			fmt.Println(err)
			return
		}
		q.Finish() // no command may use the memory once it is freed
		if err := s.Free(); err != nil {
			fmt.Println(err)
			return
		}
	case errors.Is(err, cl.ErrSVMNotSupported):
		buf, err := q.Context().CreateBuffer(cl.MemReadWrite, 8)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer buf.Release()
		ev, err := q.EnqueueFillBuffer(buf, []byte{7}, 0, 8)
		if err != nil {
			fmt.Println(err)
			return
		}
		ev.Release()
		if err := q.ReadBuffer(buf, 0, data); err != nil {
			fmt.Println(err)
			return
		}
	default:
		fmt.Println(err)
		return
	}
	fmt.Println(data)
	// Output: [7 7 7 7 7 7 7 7]
}

// A cache of programs built for a context lets go of them when the
// context is released: a program holds its context, which would
// otherwise never be destroyed.
func ExampleContext_OnRelease() {
	q, err := cl.DefaultQueue() // its Release releases its context too
	if err != nil {
		fmt.Println(err)
		return
	}
	prog, err := q.Context().BuildProgram("kernel void k(global int *x) { x[0] = 1; }", "")
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := q.Context().OnRelease(func() {
		fmt.Println("releasing the program:", prog.Release())
	}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("releasing the queue:", q.Release())
	// Output:
	// releasing the program: <nil>
	// releasing the queue: <nil>
}
