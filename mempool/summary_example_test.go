package mempool_test

import (
	"fmt"
	"os"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
)

// WriteSummary prints torch.cuda.memory_summary's table. Here the pool's
// allocator is wrapped in a struct that hides its device, so that the
// header reads the same on every machine; a pool over the allocator
// itself names the device there.
func ExamplePool_WriteSummary() {
	q, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Release()
	alloc, err := allocator.NewImmediate(q, cl.MemReadWrite)
	if err != nil {
		fmt.Println(err)
		return
	}
	pool, err := mempool.New(struct{ allocator.Allocator }{alloc}, mempool.WithLimit(64<<20))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	small, _ := pool.Allocate(4000) // a block of 4095 bytes
	large, _ := pool.Allocate(4 << 20)
	large.Close() // held for reuse
	defer small.Close()
	if err := pool.WriteSummary(os.Stdout); err != nil {
		fmt.Println(err)
	}
	// Output:
	// |===========================================================================|
	// |                           clpool memory summary                           |
	// |                              device unknown                               |
	// |---------------------------------------------------------------------------|
	// |            policy: bins            |           leading bits: 4            |
	// |        max split size: none        |            limit: 64 MiB             |
	// |              hits: 0               |              misses: 2               |
	// |          device allocs: 2          |           device frees: 0            |
	// |              OOMs: 0               |            OOM retries: 0            |
	// |===========================================================================|
	// |        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
	// |---------------------------------------------------------------------------|
	// | Allocated memory      |   4095 B   |   4356 KiB |   4356 KiB |   4352 KiB |
	// |       from large pool |      0 B   |   4352 KiB |   4352 KiB |   4352 KiB |
	// |       from small pool |   4095 B   |      4 KiB |      4 KiB |      0 KiB |
	// |---------------------------------------------------------------------------|
	// | Active memory         |   4095 B   |   4356 KiB |   4356 KiB |   4352 KiB |
	// |       from large pool |      0 B   |   4352 KiB |   4352 KiB |   4352 KiB |
	// |       from small pool |   4095 B   |      4 KiB |      4 KiB |      0 KiB |
	// |---------------------------------------------------------------------------|
	// | Requested memory      |   4000 B   |   4100 KiB |   4100 KiB |   4096 KiB |
	// |       from large pool |      0 B   |   4096 KiB |   4096 KiB |   4096 KiB |
	// |       from small pool |   4000 B   |      4 KiB |      4 KiB |      0 KiB |
	// |---------------------------------------------------------------------------|
	// | Reserved memory       |   4356 KiB |   4356 KiB |   4356 KiB |      0 B   |
	// |       from large pool |   4352 KiB |   4352 KiB |   4352 KiB |      0 B   |
	// |       from small pool |      4 KiB |      4 KiB |      4 KiB |      0 B   |
	// |---------------------------------------------------------------------------|
	// | Non-releasable memory |      0 B   |      0 B   |      0 B   |      0 B   |
	// |       from large pool |      0 B   |      0 B   |      0 B   |      0 B   |
	// |       from small pool |      0 B   |      0 B   |      0 B   |      0 B   |
	// |---------------------------------------------------------------------------|
	// | Allocations           |       1    |       2    |       2    |       1    |
	// |       from large pool |       0    |       1    |       1    |       1    |
	// |       from small pool |       1    |       1    |       1    |       0    |
	// |---------------------------------------------------------------------------|
	// | Active allocs         |       1    |       2    |       2    |       1    |
	// |       from large pool |       0    |       1    |       1    |       1    |
	// |       from small pool |       1    |       1    |       1    |       0    |
	// |---------------------------------------------------------------------------|
	// | Reserved segments     |       2    |       2    |       2    |       0    |
	// |       from large pool |       1    |       1    |       1    |       0    |
	// |       from small pool |       1    |       1    |       1    |       0    |
	// |---------------------------------------------------------------------------|
	// | Non-releasable allocs |       0    |       0    |       0    |       0    |
	// |       from large pool |       0    |       0    |       0    |       0    |
	// |       from small pool |       0    |       0    |       0    |       0    |
	// |---------------------------------------------------------------------------|
	// | Oversize allocations  |       0    |       0    |       0    |       0    |
	// |---------------------------------------------------------------------------|
	// | Oversize segments     |       0    |       0    |       0    |       0    |
	// |===========================================================================|
}
