package array_test

import (
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
)

// benchAdd measures z := x + y, then closing z, on n float32 elements,
// including a wait for the kernel (Finish).
func benchAdd(b *testing.B, n int, usePool bool) {
	q := cltest.Queue(b)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	if err != nil {
		b.Fatal(err)
	}
	pool, err := mempool.New(imm)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	var alloc array.Alloc = func(s int64) (array.Block, error) { return imm.Allocate(s) }
	if usePool {
		alloc = func(s int64) (array.Block, error) { return pool.Allocate(s) }
	}
	x, err := array.Full[float32](q, n, 1, alloc)
	if err != nil {
		b.Fatal(err)
	}
	defer x.Close()
	b.SetBytes(int64(12 * n))
	b.ResetTimer()
	for b.Loop() {
		z, err := array.Add(x, x)
		if err != nil {
			b.Fatal(err)
		}
		if err := q.Finish(); err != nil {
			b.Fatal(err)
		}
		z.Close()
	}
}

func BenchmarkAdd1KPool(b *testing.B) { benchAdd(b, 1<<10, true) }
func BenchmarkAdd1KRaw(b *testing.B)  { benchAdd(b, 1<<10, false) }
func BenchmarkAdd1MPool(b *testing.B) { benchAdd(b, 1<<20, true) }
func BenchmarkAdd1MRaw(b *testing.B)  { benchAdd(b, 1<<20, false) }
