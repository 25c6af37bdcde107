package mempool_test

import (
	"errors"
	"fmt"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
)

// A Set keeps a pool per context, each device's own; here two contexts on
// one device stand in for two devices, the first with a limit of its own.
func ExampleNewSet() {
	q1, err := cl.DefaultQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q1.Release()
	ctx2, err := cl.CreateContext(q1.Device())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ctx2.Release()
	q2, err := cl.NewCommandQueue(ctx2, q1.Device(), 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer q2.Release()

	set := mempool.NewSet(nil) // pools over allocator.Immediate
	defer set.Close()
	set.SetLimit(q1.Context(), 1<<20)

	for _, q := range []*cl.CommandQueue{q1, q2, q1} {
		b, err := set.On(q).Allocate(4000) // from the pool of q's context
		if err != nil {
			fmt.Println(err)
			return
		}
		// ... use b.Buffer() in kernels on q ...
		b.Close()
	}
	_, err = set.On(q1).Allocate(2 << 20)
	fmt.Println("2 MiB on the first device:", errors.Is(err, mempool.ErrOutOfMemory))

	s := set.Stats()
	for i, d := range s.Devices {
		fmt.Printf("device %d: hits %d, misses %d (refused %d), held %d bytes, limit %d\n",
			i, d.Stats.Hits, d.Stats.Misses, d.Stats.OOMs, d.Stats.HeldBytes, d.Stats.Limit)
	}
	fmt.Println("held in all:", s.HeldBytes, "bytes")
	// Output:
	// 2 MiB on the first device: true
	// device 0: hits 1, misses 2 (refused 1), held 4095 bytes, limit 1048576
	// device 1: hits 0, misses 1 (refused 0), held 4095 bytes, limit 0
	// held in all: 8190 bytes
}
