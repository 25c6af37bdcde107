package array_test

import (
	"errors"
	"fmt"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
)

// SVMAlloc puts arrays in shared virtual memory, where the device has it
// (OpenCL 2.0: POCL); arrays of buffers mix with them in one operation.
// Where it has none (Oclgrind, OpenCL 1.2), NewSVM says so, and this
// example uses buffers: the results are the same.
func ExampleSVMAlloc() {
	q, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Release()

	alloc := array.Alloc(nil)                        // the default: buffers
	svm, err := allocator.NewSVM(q.Context(), false) // coarse grain
	switch {
	case err == nil:
		alloc = array.SVMAlloc(svm)
	case !errors.Is(err, cl.ErrSVMNotSupported):
		fmt.Println(err)
		return
	}
	x, err := array.Arange[float32](q, 4, 0, 1, alloc) // 0 1 2 3, in SVM
	if err != nil {
		fmt.Println(err)
		return
	}
	defer x.Close()
	y, err := array.Full[float32](q, 4, 10, array.Alloc(nil)) // in a buffer
	if err != nil {
		fmt.Println(err)
		return
	}
	defer y.Close()
	z, err := array.Axpy(2, x, y) // from x's allocator: in SVM
	if err != nil {
		fmt.Println(err)
		return
	}
	defer z.Close() // waits for the queue, then frees the SVM
	got, _ := z.Get()
	fmt.Println(got)
	// Output: [10 12 14 16]
}
