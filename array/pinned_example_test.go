package array_test

import (
	"fmt"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
)

// Pinned host memory from a pool (CuPy's PinnedMemoryPool): the device
// reads an array straight into a PinnedSlice, with no copy through Go
// memory, and the pool reuses the pinned buffer for the next transfer.
func ExampleNewPinnedSlice() {
	q, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Release()
	pinned, err := allocator.NewPinned(q)
	if err != nil {
		fmt.Println(err)
		return
	}
	pool, err := mempool.New(pinned)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	stage, err := array.NewStaging(pinned, pool.Allocate)
	if err != nil {
		fmt.Println(err)
		return
	}

	x, err := array.Arange[float32](q, 4, 0, 0.5, array.Alloc(nil)) // nil: the default allocator
	if err != nil {
		fmt.Println(err)
		return
	}
	defer x.Close()
	for range 2 {
		host, err := array.NewPinnedSlice[float32](stage, x.Len())
		if err != nil {
			fmt.Println(err)
			return
		}
		if err := x.GetInto(host.Data()); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(host.Data())
		host.Close()
	}
	fmt.Println("pinned buffers made:", pool.Stats().DeviceAllocs)
	// Output:
	// [0 0.5 1 1.5]
	// [0 0.5 1 1.5]
	// pinned buffers made: 1
}
