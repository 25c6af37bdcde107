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
	return warmed(b)(mempool.New(a, opts...))
}

// warmed returns a function that takes a new pool (or its constructor's
// error), closes it when the benchmark ends, and makes its next 4 KiB
// request a hit. (It is here, not in bench_test.go, so that
// scripts/bench_compare.sh can copy this file into older commits.)
func warmed(b *testing.B) func(*mempool.Pool, error) *mempool.Pool {
	return func(p *mempool.Pool, err error) *mempool.Pool {
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
}

// BenchmarkDeferredHit is the plain hit: Allocate+Close of 4 KiB on a
// pool over allocator.Deferred, with drop safety (the default).
func BenchmarkDeferredHit(b *testing.B) { hitLoop(b, deferredPool(b)) }

// BenchmarkDeferredHitNoDropSafety is the same without drop safety.
func BenchmarkDeferredHitNoDropSafety(b *testing.B) {
	hitLoop(b, deferredPool(b, mempool.WithDropSafety(false)))
}
