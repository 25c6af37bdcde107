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
