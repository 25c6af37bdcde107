package mempool_test

import (
	"fmt"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
)

// The sanitizer finds a kernel that writes one element past its block,
// and a write through a buffer kept after Close, each with the line that
// allocated the block. (Without WithSanitizerOutput(nil), each finding is
// also printed to standard error as it is found.)
func ExampleWithSanitizer() {
	q, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Release()
	alloc, _ := allocator.NewImmediate(q, cl.MemReadWrite)
	pool, _ := mempool.New(alloc, mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil))
	defer pool.Close()
	prog, err := q.Context().BuildProgram(`
		kernel void upto(global int *x, int n) {
			int i = get_global_id(0);
			if (i <= n) x[i] = i; // should be i < n
		}`, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer prog.Release()
	k, _ := prog.Kernel("upto")
	defer k.Release()

	const n = 100
	x, _ := pool.Allocate(4 * n)
	k.SetArgs(x.Buffer(), int32(n))
	q.EnqueueKernel(k, []int{n + 1}, nil)
	x.Close()

	y, _ := pool.Allocate(64)
	kept := y.Buffer()
	y.Close()
	q.WriteBuffer(kept, 8, []byte{1}) // succeeds: the memory is the pool's

	for _, f := range pool.Findings() {
		fmt.Printf("%v at offset %d of a %d-byte block allocated at %s\n", f.Kind, f.Offset, f.Size, f.AllocSite)
	}
	// Output:
	// out-of-bounds at offset 400 of a 400-byte block allocated at sanitize_example_test.go:39:mempool_test.ExampleWithSanitizer
	// write-after-close at offset 8 of a 64-byte block allocated at sanitize_example_test.go:44:mempool_test.ExampleWithSanitizer
}
