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
