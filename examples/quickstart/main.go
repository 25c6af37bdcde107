// Command quickstart is a complete clpool program: a kernel of its own,
// run on two command queues with device memory from a pool, and the
// pool's summary at the end. README.md quotes it.
package main

import (
	"fmt"
	"io"
	"os"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
)

// The kernel: y = a*x + y over n floats. Its scalar arguments are a
// float (float32 in Go) and an int (int32: OpenCL's int is 32 bits).
const source = `
kernel void scale_add(global float *y, global const float *x, float a, int n) {
	int i = get_global_id(0);
	if (i < n) y[i] = a * x[i] + y[i];
}`

func main() {
	if err := run(os.Stdout, 1<<16, 10); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, n, steps int) error {
	// A context and an in-order queue on the device CLPOOL_DEVICE names,
	// and a second queue of the same context for the uploads.
	compute, err := cl.DefaultQueue()
	if err != nil {
		return err
	}
	defer compute.Release()
	copies, err := cl.NewCommandQueue(compute.Context(), compute.Device(), 0)
	if err != nil {
		return err
	}
	defer copies.Release()

	// A pool over an allocator that shows out-of-memory at allocation,
	// and an allocator of it for each queue, named for its figures.
	alloc, err := allocator.NewImmediate(compute, cl.MemReadWrite)
	if err != nil {
		return err
	}
	pool, err := mempool.New(alloc, mempool.WithLimit(256<<20))
	if err != nil {
		return err
	}
	defer pool.Close()
	upload := pool.On(copies, mempool.QueueName("copy"))
	work := pool.On(compute, mempool.QueueName("compute"))

	prog, err := compute.Context().BuildProgram(source, "")
	if err != nil {
		return err // a build error carries the compiler's log
	}
	defer prog.Release()
	kernel, err := prog.Kernel("scale_add")
	if err != nil {
		return err
	}
	defer kernel.Release()

	xs, ys := make([]float32, n), make([]float32, n)
	for i := range xs {
		xs[i] = float32(i)
	}
	for range steps {
		if err := step(compute, copies, upload, work, kernel, xs, ys); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "y[%d] = %.0f (want %.0f)\n", n-1, ys[n-1], float32(2*steps)*xs[n-1])
	for _, q := range pool.Stats().Queues {
		if q.Name != "" {
			fmt.Fprintf(w, "queue %s: %d requests, %d served by held blocks\n", q.Name, q.Requests, q.Hits)
		}
	}
	return pool.WriteSummary(w)
}

// step uploads xs on the copy queue and ys on the compute queue, runs the
// kernel on the compute queue once the upload is done, and reads ys back.
func step(compute, copies *cl.CommandQueue, upload, work *mempool.QueueAllocator, kernel *cl.Kernel, xs, ys []float32) error {
	n := len(xs)
	x, err := upload.Allocate(int64(4 * n))
	if err != nil {
		return err // errors.Is(err, mempool.ErrOutOfMemory) says what was asked, active and held
	}
	defer x.Close() // back to the pool, reused once the commands using it are done
	y, err := work.Allocate(int64(4 * n))
	if err != nil {
		return err
	}
	defer y.Close()

	written, err := copies.EnqueueWriteBuffer(x.Buffer(), false, 0, cl.Bytes(xs))
	if err != nil {
		return err
	}
	defer written.Release()
	if err := x.RecordQueue(compute); err != nil { // x is used on compute too: its reuse waits for the kernel
		return err
	}
	if err := compute.WriteBuffer(y.Buffer(), 0, cl.Bytes(ys)); err != nil {
		return err
	}
	// The blocks' buffers are the kernel's buffer arguments; the scalars
	// are Go values of the kernel's types.
	if err := kernel.SetArgs(y.Buffer(), x.Buffer(), float32(2), int32(n)); err != nil {
		return err
	}
	ran, err := compute.EnqueueNDRangeKernel(kernel, nil, []int{n}, nil, written) // after the upload
	if err != nil {
		return err
	}
	defer ran.Release()
	return compute.ReadBuffer(y.Buffer(), 0, cl.Bytes(ys)) // blocking: ys is ready after it
}
