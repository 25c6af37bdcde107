package allocator_test

import (
	"errors"
	"fmt"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
)

// An Immediate allocator reports an out-of-memory at allocation time; a
// Budget makes one happen on purpose.
func ExampleNewImmediate() {
	q, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Release()

	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	if err != nil {
		fmt.Println(err)
		return
	}
	capped := allocator.NewBudget(imm, 1<<20)

	buf, err := capped.Allocate(1 << 19)
	fmt.Println(buf.Size(), err)
	_, err = capped.Allocate(1 << 20)
	fmt.Println(errors.Is(err, cl.ErrMemObjectAllocationFailure))
	fmt.Println(capped.Free(buf))
	// Output:
	// 524288 <nil>
	// true
	// <nil>
}

// An ImmediateSVM allocator hands out shared virtual memory and makes an
// out-of-memory show at allocation, as Immediate does for buffers; on a
// device without SVM (OpenCL 1.2, such as Oclgrind), it says so up front.
func ExampleNewImmediateSVM() {
	q, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Release()

	a, err := allocator.NewImmediateSVM(q, false) // coarse grain
	if errors.Is(err, cl.ErrSVMNotSupported) {
		fmt.Println("4096 false") // what a device with SVM prints
		return
	} else if err != nil {
		fmt.Println(err)
		return
	}
	s, err := a.Allocate(4096)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(s.Size(), s.FineGrain())
	if err := a.Free(s); err != nil {
		fmt.Println(err)
	}
	// Output: 4096 false
}
