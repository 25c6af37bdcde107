package array_test

import (
	"fmt"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
)

func Example() {
	q, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Release()
	imm, _ := allocator.NewImmediate(q, cl.MemReadWrite)
	pool, _ := mempool.New(imm)
	defer pool.Close()

	x, err := array.Arange[float32](q, 1000, 0, 1, pool.Allocate) // 0, 1, ..., 999
	if err != nil {
		fmt.Println(err)
		return
	}
	defer x.Close()
	y, err := array.Axpy(2, x, x) // 3x, from the pool too
	if err != nil {
		fmt.Println(err)
		return
	}
	defer y.Close()
	s, _ := array.Sum(y)
	hi, _ := array.Max(y)
	fmt.Println(s, hi)
	// Output: 1.4985e+06 2997
}

// Slice makes views: arrays over a window of another array's memory.
// Writes through a view land in that window; the memory goes back to the
// pool when the array and every view of it are closed.
func ExampleArray_Slice() {
	q, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Release()
	imm, _ := allocator.NewImmediate(q, cl.MemReadWrite)
	pool, _ := mempool.New(imm)
	defer pool.Close()

	x, _ := array.Arange[int32](q, 8, 0, 1, pool.Allocate) // 0 1 2 3 4 5 6 7
	inner, _ := x.Slice(2, 6)                              // 2 3 4 5
	_ = inner.IScale(10)
	x.Close() // inner keeps the memory
	fmt.Println(pool.ActiveBlocks())
	got, _ := inner.Get()
	fmt.Println(got, inner.Offset())
	inner.Close()
	fmt.Println(pool.ActiveBlocks())
	// Output:
	// 1
	// [20 30 40 50] 2
	// 0
}

// SetDefaultAllocator makes a pool the allocator of arrays made with none
// (nil), and of their results; it returns the previous default, to put
// back when done. Out of the box, the default is plain buffers of the
// queue's context.
func ExampleSetDefaultAllocator() {
	q, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Release()
	imm, _ := allocator.NewImmediate(q, cl.MemReadWrite)
	pool, _ := mempool.New(imm)
	defer pool.Close()

	previous := array.SetDefaultAllocator(pool.Allocate)
	defer array.SetDefaultAllocator(previous)

	x, err := array.Arange[float32](q, 4, 0, 1, array.Alloc(nil)) // nil: the default, the pool
	if err != nil {
		fmt.Println(err)
		return
	}
	y, _ := array.Scale(2, x) // from x's allocator: the pool
	fmt.Println(pool.ActiveBlocks())
	got, _ := y.Get()
	fmt.Println(got)
	x.Close()
	y.Close()
	fmt.Println(pool.ActiveBlocks())
	// Output:
	// 2
	// [0 2 4 6]
	// 0
}
