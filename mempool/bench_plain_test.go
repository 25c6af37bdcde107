package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
)

// deferredPool is a warm pool over allocator.Deferred: no queue, the
// design card's own use.
func deferredPool(b *testing.B, opts ...mempool.Option) *mempool.Pool {
	a, err := allocator.NewDeferred(cltest.Queue(b).Context(), cl.MemReadWrite)
	if err != nil {
		b.Fatal(err)
	}
	p, err := mempool.New(a, opts...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	warm, err := p.Allocate(benchSize)
	if err != nil {
		b.Fatal(err)
	}
	warm.Close()
	return p
}

// BenchmarkDeferredHit is the plain hit: Allocate+Close of 4 KiB on a
// pool over allocator.Deferred, with drop safety (the default).
func BenchmarkDeferredHit(b *testing.B) {
	p := deferredPool(b)
	b.ReportAllocs()
	for b.Loop() {
		pb, err := p.Allocate(benchSize)
		if err != nil {
			b.Fatal(err)
		}
		pb.Close()
	}
}

// BenchmarkDeferredHitNoDropSafety is the same without drop safety.
func BenchmarkDeferredHitNoDropSafety(b *testing.B) {
	p := deferredPool(b, mempool.WithDropSafety(false))
	b.ReportAllocs()
	for b.Loop() {
		pb, err := p.Allocate(benchSize)
		if err != nil {
			b.Fatal(err)
		}
		pb.Close()
	}
}
