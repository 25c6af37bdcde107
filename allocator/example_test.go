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
