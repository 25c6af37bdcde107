package mempool_test

import (
	"errors"
	"fmt"

	"github.com/clpool/clpool/allocator"
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
	alloc, err := allocator.NewImmediate(q, cl.MemReadWrite)
	if err != nil {
		fmt.Println(err)
		return
	}
	pool, err := mempool.New(alloc)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	for range 3 {
		b, err := pool.Allocate(4000)
		if err != nil {
			fmt.Println(err)
			return
		}
		// ... use b.Buffer() in kernels ...
		b.Close()
	}
	s := pool.Stats()
	fmt.Printf("hits %d, misses %d, held %d blocks of %d bytes\n", s.Hits, s.Misses, s.HeldBlocks, s.HeldBytes)
	// Output: hits 2, misses 1, held 1 blocks of 4095 bytes
}

// A limit caps the pool's device memory; a refusal says where it went.
func ExampleWithLimit() {
	q, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Release()
	alloc, _ := allocator.NewImmediate(q, cl.MemReadWrite)
	pool, _ := mempool.New(alloc, mempool.WithLimit(1<<20))
	defer pool.Close()

	a, _ := pool.Allocate(600_000)
	defer a.Close()
	_, err = pool.Allocate(600_000)
	fmt.Println(errors.Is(err, mempool.ErrOutOfMemory))
	var oom *mempool.OutOfMemoryError
	if errors.As(err, &oom) {
		fmt.Println("requested", oom.Requested, "active", oom.ActiveBytes, "held", oom.HeldBytes, "limit", oom.Limit)
	}
	// Output:
	// true
	// requested 600000 active 600000 held 0 limit 1048576
}

func ExamplePooledBuffer_Close() {
	q, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Release()
	alloc, _ := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	pool, _ := mempool.New(alloc)
	defer pool.Close()

	b, _ := pool.Allocate(100)
	fmt.Println(b.Close())
	fmt.Println(b.Close())
	fmt.Println(b.Buffer() == nil)
	// Output:
	// <nil>
	// mempool: buffer already closed
	// true
}

func ExampleBinNumber() {
	for _, size := range []int64{0, 1000, 1024, 1100} {
		bin := mempool.BinNumber(size, 4)
		fmt.Println(size, bin, mempool.AllocSize(bin, 4))
	}
	// Output:
	// 0 0 1
	// 1000 159 1023
	// 1024 160 1087
	// 1100 161 1151
}

// A hook sees every allocation and free; it is registered on the pool.
func ExamplePool_AddHook() {
	q, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Release()
	alloc, _ := allocator.NewImmediate(q, cl.MemReadWrite)
	pool, _ := mempool.New(alloc)
	defer pool.Close()

	remove := pool.AddHook(mempool.HookFunc(func(e mempool.Event) {
		fmt.Println(e.Kind, e.Size, e.AllocSize, e.Err)
	}))
	b, _ := pool.Allocate(1000) // a miss
	b.Close()
	b, _ = pool.Allocate(1000) // a hit
	remove()
	b.Close()
	// Output:
	// malloc_before 1000 1023 <nil>
	// alloc_before 1023 1023 <nil>
	// alloc_after 1023 1023 <nil>
	// malloc_after 1000 1023 <nil>
	// free_before 1000 1023 <nil>
	// free_after 1000 1023 <nil>
	// malloc_before 1000 1023 <nil>
	// malloc_after 1000 1023 <nil>
}

// MemoryStats names the statistics as torch.cuda.memory_stats does.
func ExamplePool_MemoryStats() {
	q, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Release()
	alloc, _ := allocator.NewImmediate(q, cl.MemReadWrite)
	pool, _ := mempool.New(alloc)
	defer pool.Close()

	a, _ := pool.Allocate(4 << 20)
	b, _ := pool.Allocate(1000)
	b.Close()
	m := pool.MemoryStats()
	for _, k := range []string{"allocated_bytes.all.current", "allocated_bytes.large_pool.peak", "allocation.all.allocated",
		"segment.all.current", "reserved_bytes.small_pool.current", "num_device_alloc"} {
		fmt.Println(k, m[k])
	}
	a.Close()
	// Output:
	// allocated_bytes.all.current 4456447
	// allocated_bytes.large_pool.peak 4456447
	// allocation.all.allocated 2
	// segment.all.current 2
	// reserved_bytes.small_pool.current 1023
	// num_device_alloc 2
}

// An arena cuts small requests from shared segments, sized to the pool
// (the first is 512 KiB); Base and Offset name each block's range.
func ExampleWithArena() {
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
	pool, err := mempool.New(alloc, mempool.WithArena())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	a, _ := pool.Allocate(1000)
	b, _ := pool.Allocate(3000)
	fmt.Println("same segment:", a.Base() == b.Base(), "b's offset is past a:", b.Offset() >= 1000)
	a.Close()
	b.Close()
	s := pool.Stats()
	fmt.Printf("device allocations %d, managed %d bytes, held %d bytes\n", s.DeviceAllocs, s.ManagedBytes, s.HeldBytes)
	pool.FreeHeld() // merges the blocks and frees the wholly free segment
	fmt.Println("managed after FreeHeld:", pool.ManagedBytes())
	// Output:
	// same segment: true b's offset is past a: true
	// device allocations 1, managed 524288 bytes, held 524288 bytes
	// managed after FreeHeld: 0
}

// ExamplePool_On shares one pool between two queues: a buffer closed right
// after a command on one queue is handed to the other only after that
// command.
func ExamplePool_On() {
	q, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q.Release()
	q2, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q2.Release()
	alloc, err := allocator.NewImmediate(q, cl.MemReadWrite)
	if err != nil {
		fmt.Println(err)
		return
	}
	pool, err := mempool.New(alloc)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	a, _ := pool.On(q).Allocate(4096)
	ev, _ := q.EnqueueFillBuffer(a.Base(), []byte{1}, a.Offset(), 4096)
	ev.Release()
	a.Close() // legal right after the enqueue

	b, _ := pool.On(q2).Allocate(4096) // the same memory, after the fill
	b.RecordQueue(q)                   // b will also be used on q
	b.Close()
	q2.Finish()
	s := pool.Stats()
	fmt.Println("device allocations:", s.DeviceAllocs)
	fmt.Println("handovers to q2:", s.Queues[1].Handovers)
	// Output:
	// device allocations: 1
	// handovers to q2: 1
}

// A snapshot shows the pool's segments and what each block is.
func ExamplePool_Snapshot() {
	pool, err := mempool.New(noDevice{}, mempool.WithArena())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	a, _ := pool.Allocate(5000)
	b, _ := pool.Allocate(6000)
	a.Close()
	defer b.Close()

	for _, seg := range pool.Snapshot().Segments {
		fmt.Printf("segment %d: %d bytes\n", seg.ID, seg.Size)
		for _, blk := range seg.Blocks {
			fmt.Printf("  at %7d: %7d bytes %s\n", blk.Offset, blk.Size, blk.State)
		}
	}
	// Output:
	// segment 1: 524288 bytes
	//   at       0:    8192 bytes inactive_split
	//   at    8192:    8192 bytes active
	//   at   16384:  507904 bytes inactive_split
}

// SetLimit changes the limit at run time; lowering it frees held memory.
func ExamplePool_SetLimit() {
	pool, err := mempool.New(noDevice{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	for _, n := range []int64{1000, 100000} {
		b, _ := pool.Allocate(n)
		b.Close()
	}
	fmt.Println("managed:", pool.ManagedBytes())
	if err := pool.SetLimit(50000); err != nil {
		fmt.Println(err)
	}
	fmt.Println("limit:", pool.Limit(), "managed:", pool.ManagedBytes())
	_, err = pool.Allocate(60000)
	fmt.Println(errors.Is(err, mempool.ErrOutOfMemory))
	// Output:
	// managed: 103422
	// limit: 50000 managed: 1023
	// true
}

// noDevice hands out no memory at all: a pool over it can be looked at
// without a device.
type noDevice struct{}

func (noDevice) Allocate(int64) (*cl.Buffer, error) { return nil, nil }
func (noDevice) Free(*cl.Buffer) error              { return nil }
