package array

import (
	"sync/atomic"

	"github.com/clpool/clpool/cl"
)

// defaultAlloc is the allocator that constructors given a nil one use;
// nil while the built-in default is in effect.
var defaultAlloc atomic.Pointer[Alloc]

// SetDefaultAllocator sets the allocator that constructors given none (a
// nil alloc) use, as CuPy's set_allocator does, and returns the one it
// replaces: nil for the built-in default. Like the constructors, it takes
// pool.Allocate or a raw allocator's Allocate as it is; nil (written
// array.Alloc(nil)) restores the built-in default. It is safe to call
// from any goroutine. The default is read when an array is made: an
// array, its results and its temporaries keep using the allocator they
// were made with after the default changes. To set a default for a while:
//
//	previous := array.SetDefaultAllocator(pool.Allocate)
//	defer array.SetDefaultAllocator(previous)
func SetDefaultAllocator[B Block](alloc func(int64) (B, error)) (previous Alloc) {
	var next *Alloc
	if a := adapt(alloc); a != nil {
		next = &a
	}
	if prev := defaultAlloc.Swap(next); prev != nil {
		return *prev
	}
	return nil
}

// DefaultAllocator returns the allocator set with SetDefaultAllocator, or
// nil while the built-in default is in effect, as CuPy's get_allocator.
func DefaultAllocator() Alloc {
	if a := defaultAlloc.Load(); a != nil {
		return *a
	}
	return nil
}

// defaultFor returns the allocator of an array on q made with a nil one:
// the default set, or else the built-in default.
func defaultFor(q *cl.CommandQueue) Alloc {
	if a := DefaultAllocator(); a != nil {
		return a
	}
	return contextBuffers(q.Context())
}

// contextBuffers is the built-in default: a plain read-write buffer of
// ctx for each array, as allocator.Deferred makes them, released at the
// array's Close.
func contextBuffers(ctx *cl.Context) Alloc {
	return func(size int64) (Block, error) {
		buf, err := ctx.CreateBuffer(cl.MemReadWrite, size)
		if err != nil {
			return nil, err
		}
		return buf, nil
	}
}
