package allocator_test

import (
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
)

// BenchmarkDeferredAllocateFree is a 4 KiB clCreateBuffer and its
// release through allocator.Deferred: the floor of the wrappers below.
func BenchmarkDeferredAllocateFree(b *testing.B) {
	allocateFreeLoop(b, deferred(b))
}

// BenchmarkBudgetAllocateFree is the same through a Budget: its
// reservation, its set of buffers, and its guard against a wrapped
// allocator that panics.
func BenchmarkBudgetAllocateFree(b *testing.B) {
	allocateFreeLoop(b, allocator.NewBudget(deferred(b), 1<<30))
}

// BenchmarkCountingAllocateFree is the same through a Counting.
func BenchmarkCountingAllocateFree(b *testing.B) {
	allocateFreeLoop(b, allocator.NewCounting(deferred(b)))
}

func deferred(b *testing.B) allocator.Allocator {
	q := cltest.Queue(b)
	a, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	if err != nil {
		b.Fatal(err)
	}
	return a
}

func allocateFreeLoop(b *testing.B, a allocator.Allocator) {
	b.ReportAllocs()
	for b.Loop() {
		buf, err := a.Allocate(4096)
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Free(buf); err != nil {
			b.Fatal(err)
		}
	}
}
