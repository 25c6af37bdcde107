package mempool_test

import (
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
)

const benchSize = 4096

// benchAllocator is the allocator the pools of the benchmarks sit on.
func benchAllocator(b *testing.B) *allocator.Immediate {
	a, err := allocator.NewImmediate(cltest.Queue(b), cl.MemReadWrite)
	if err != nil {
		b.Fatal(err)
	}
	return a
}

func benchPool(b *testing.B, opts ...mempool.Option) *mempool.Pool {
	return warmed(b)(mempool.New(benchAllocator(b), opts...))
}

func hitLoop(b *testing.B, p *mempool.Pool) {
	b.ReportAllocs()
	for b.Loop() {
		pb, err := p.Allocate(benchSize)
		if err != nil {
			b.Fatal(err)
		}
		pb.Close()
	}
}

// BenchmarkPoolHit is the hot path: a warm hit, Allocate+Close of 4 KiB,
// with drop safety on (the default).
func BenchmarkPoolHit(b *testing.B) { hitLoop(b, benchPool(b)) }

// BenchmarkPoolHitNoDropSafety is the same with WithDropSafety(false).
func BenchmarkPoolHitNoDropSafety(b *testing.B) {
	hitLoop(b, benchPool(b, mempool.WithDropSafety(false)))
}

// BenchmarkArenaHit is a warm 4 KiB hit of WithArena: the block is cut
// from a segment and merged back on Close.
func BenchmarkArenaHit(b *testing.B) { hitLoop(b, benchPool(b, mempool.WithArena())) }

// BenchmarkArenaHitNoDropSafety is the same with WithDropSafety(false).
func BenchmarkArenaHitNoDropSafety(b *testing.B) {
	hitLoop(b, benchPool(b, mempool.WithArena(), mempool.WithDropSafety(false)))
}

// BenchmarkPoolParallel is the hot path from GOMAXPROCS goroutines at once.
func BenchmarkPoolParallel(b *testing.B) { parallelHitLoop(b, benchPool(b)) }

func parallelHitLoop(b *testing.B, p *mempool.Pool) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) { parallelHits(b, pb, p) })
}

// parallelHits is one RunParallel goroutine's share of the hits on p.
func parallelHits(b *testing.B, pb *testing.PB, p *mempool.Pool) {
	for pb.Next() {
		x, err := p.Allocate(benchSize)
		if err != nil {
			b.Error(err)
			return
		}
		x.Close()
	}
}

func rawLoop(b *testing.B, a allocator.Allocator) {
	b.ReportAllocs()
	for b.Loop() {
		buf, err := a.Allocate(benchSize)
		if err != nil {
			b.Fatal(err)
		}
		if err := a.Free(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDeferred is what a hit replaces: a device allocation and free.
func BenchmarkDeferred(b *testing.B) {
	q := cltest.Queue(b)
	a, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	if err != nil {
		b.Fatal(err)
	}
	rawLoop(b, a)
}

// BenchmarkImmediate adds the probe write to each allocation.
func BenchmarkImmediate(b *testing.B) {
	q := cltest.Queue(b)
	a, err := allocator.NewImmediate(q, cl.MemReadWrite)
	if err != nil {
		b.Fatal(err)
	}
	rawLoop(b, a)
	if err := q.Finish(); err != nil {
		b.Fatal(err)
	}
}

// twin has the layout of a PooledBuffer, so that the floors below allocate
// the same object the pool does.
type twin struct {
	bin  *struct{}
	buf  *cl.Buffer
	size int64
}

var sink *twin

// BenchmarkFloorSetFinalizer is the Go runtime's price for noticing a
// dropped object with a finalizer: allocate, set, clear. The pool's hit
// with drop safety cannot cost less.
func BenchmarkFloorSetFinalizer(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		t := &twin{size: benchSize}
		runtime.SetFinalizer(t, func(*twin) {})
		runtime.SetFinalizer(t, nil)
		sink = t
	}
}

// BenchmarkFloorAddCleanup is the same with runtime.AddCleanup and Stop.
func BenchmarkFloorAddCleanup(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		t := &twin{size: benchSize}
		c := runtime.AddCleanup(t, func(int64) {}, t.size)
		c.Stop()
		sink = t
	}
}

// BenchmarkFloorSetFinalizerParallel is the floor from GOMAXPROCS goroutines.
func BenchmarkFloorSetFinalizerParallel(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var last *twin
		for pb.Next() {
			t := &twin{size: benchSize}
			runtime.SetFinalizer(t, func(*twin) {})
			runtime.SetFinalizer(t, nil)
			last = t
		}
		_ = last
	})
}

// BenchmarkFloorSetFinalizerParallelLocked is the parallel floor with the
// set and the clear each made under one shared mutex, as the pool makes
// them: the runtime's own lock for finalizer records is then never
// contended.
func BenchmarkFloorSetFinalizerParallelLocked(b *testing.B) {
	var mu sync.Mutex
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var last *twin
		for pb.Next() {
			t := &twin{size: benchSize}
			mu.Lock()
			runtime.SetFinalizer(t, func(*twin) {})
			mu.Unlock()
			mu.Lock()
			runtime.SetFinalizer(t, nil)
			mu.Unlock()
			last = t
		}
		_ = last
	})
}

// BenchmarkPoolParallelNoDropSafety is the parallel hot path without finalizers.
func BenchmarkPoolParallelNoDropSafety(b *testing.B) {
	parallelHitLoop(b, benchPool(b, mempool.WithDropSafety(false)))
}

// BenchmarkPoolHitNoopHook is PoolHitNoDropSafety with one hook that does
// nothing: the price of the four events of a hit.
func BenchmarkPoolHitNoopHook(b *testing.B) {
	p := benchPool(b, mempool.WithDropSafety(false))
	p.AddHook(mempool.HookFunc(func(mempool.Event) {}))
	hitLoop(b, p)
}

// BenchmarkPoolHitHookRemoved is the same after the hook was removed: the
// no-hook path again.
func BenchmarkPoolHitHookRemoved(b *testing.B) {
	p := benchPool(b, mempool.WithDropSafety(false))
	remove := p.AddHook(mempool.HookFunc(func(mempool.Event) {}))
	remove()
	hitLoop(b, p)
}

// freeList is the least a pool can be: one mutex-guarded stack of blocks,
// no bins and no counters. The floors below measure it, alone and with a
// finalizer per hand-out, to show what the pool's design can reach.
type freeList struct {
	mu   sync.Mutex
	bufs []*cl.Buffer
}

func (l *freeList) pop() *cl.Buffer {
	l.mu.Lock()
	buf := l.bufs[len(l.bufs)-1]
	l.bufs = l.bufs[:len(l.bufs)-1]
	l.mu.Unlock()
	return buf
}

func (l *freeList) push(buf *cl.Buffer) {
	l.mu.Lock()
	l.bufs = append(l.bufs, buf)
	l.mu.Unlock()
}

func newFreeList() *freeList { return &freeList{bufs: make([]*cl.Buffer, 1, 8)} }

// BenchmarkFloorMutexFreeList is a pop and a push: two uncontended lock
// pairs. The pool's hit without drop safety cannot cost much less.
func BenchmarkFloorMutexFreeList(b *testing.B) {
	l := newFreeList()
	b.ReportAllocs()
	for b.Loop() {
		l.push(l.pop())
	}
}

// BenchmarkFloorMutexFreeListFinalizer adds the object a hit hands out,
// with its finalizer set and cleared: the least a hit with drop safety can
// cost when blocks live under a lock.
func BenchmarkFloorMutexFreeListFinalizer(b *testing.B) {
	l := newFreeList()
	b.ReportAllocs()
	for b.Loop() {
		t := &twin{buf: l.pop(), size: benchSize}
		runtime.SetFinalizer(t, func(*twin) {})
		l.push(t.buf)
		runtime.SetFinalizer(t, nil)
		sink = t
	}
}

// BenchmarkFloorMutexFreeListParallel is the free list from GOMAXPROCS
// goroutines: what one lock shared by all costs.
func BenchmarkFloorMutexFreeListParallel(b *testing.B) {
	l := newFreeList()
	l.bufs = append(l.bufs, nil, nil, nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.push(l.pop())
		}
	})
}

// BenchmarkPoolParallelPerGoroutine gives each goroutine a pool of its own,
// over one allocator: nothing is shared on the hot path.
func BenchmarkPoolParallelPerGoroutine(b *testing.B) { perGoroutineLoop(b) }

// BenchmarkPoolParallelPerGoroutineNoDropSafety is the same without drop
// safety.
func BenchmarkPoolParallelPerGoroutineNoDropSafety(b *testing.B) {
	perGoroutineLoop(b, mempool.WithDropSafety(false))
}

func perGoroutineLoop(b *testing.B, opts ...mempool.Option) {
	a := benchAllocator(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		p, err := mempool.New(a, opts...)
		if err != nil {
			b.Error(err)
			return
		}
		defer p.Close()
		parallelHits(b, pb, p)
	})
}

// BenchmarkOnQueueParallel is the hit of goroutines each allocating on a
// queue of its own through Pool.On, with and without drop safety; its
// sub-benchmarks with one goroutine are the reference for the per-queue
// throughput, and BenchmarkFloorSetFinalizerParallel the floor of drop
// safety in parallel.
func BenchmarkOnQueueParallel(b *testing.B) {
	for _, c := range []struct {
		goroutines int
		drop       bool
	}{{1, false}, {2, false}, {1, true}, {2, true}} {
		goroutines := c.goroutines
		b.Run(fmt.Sprintf("goroutines=%d/dropsafety=%v", goroutines, c.drop), func(b *testing.B) {
			q := cltest.Queue(b)
			imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
			if err != nil {
				b.Fatal(err)
			}
			p, err := mempool.New(imm, mempool.WithDropSafety(c.drop))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { p.Close() })
			ons := make([]*mempool.QueueAllocator, goroutines)
			for i := range ons {
				q2, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { q2.Release() })
				ons[i] = p.On(q2)
				warm, err := ons[i].Allocate(benchSize)
				if err != nil {
					b.Fatal(err)
				}
				warm.Close()
			}
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			per := b.N / goroutines
			for _, on := range ons {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						pb, err := on.Allocate(benchSize)
						if err != nil {
							b.Error(err)
							return
						}
						pb.Close()
					}
				}()
			}
			wg.Wait()
		})
	}
}

// BenchmarkOnQueueAlternating is one goroutine that takes turns on two
// queues of one pool, without drop safety: a hit and its Close on one,
// then on the other. Each switch begins a turn of the caches' sums
// (qflush.go): the clock moves, and the other cache's lock is tried.
func BenchmarkOnQueueAlternating(b *testing.B) {
	q := cltest.Queue(b)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	if err != nil {
		b.Fatal(err)
	}
	p, err := mempool.New(imm, mempool.WithDropSafety(false))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { p.Close() })
	var ons [2]*mempool.QueueAllocator
	var warm [2]*mempool.PooledBuffer
	for i := range ons {
		q2, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { q2.Release() })
		ons[i] = p.On(q2)
		if warm[i], err = ons[i].Allocate(benchSize); err != nil {
			b.Fatal(err)
		}
	}
	for _, pb := range warm { // both open first: a miss drains the other caches
		pb.Close()
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		pb, err := ons[i&1].Allocate(benchSize)
		if err != nil {
			b.Fatal(err)
		}
		pb.Close()
		i++
	}
}

// BenchmarkFloorPerQueue is the floor of BenchmarkOnQueueParallel without
// drop safety: each goroutine pops and pushes on a free list of its own
// under a lock of its own, and hands out a 32-byte object (a
// PooledBuffer's size) carved from 1 KiB slabs, as the queue caches do.
// Nothing is shared but the heap and its garbage collector, so its
// two-goroutine figure is the most the per-queue caches can scale to on
// the machine.
func BenchmarkFloorPerQueue(b *testing.B) {
	for _, goroutines := range []int{1, 2} {
		b.Run(fmt.Sprintf("goroutines=%d", goroutines), func(b *testing.B) {
			lists := make([]*freeList, goroutines)
			sinks := make([]struct {
				h *handedOut
				_ [56]byte // each goroutine's own cache line
			}, goroutines)
			for i := range lists {
				lists[i] = newFreeList()
			}
			b.ReportAllocs()
			b.ResetTimer()
			var wg sync.WaitGroup
			per := b.N / goroutines
			for i, l := range lists {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var slab []handedOut
					for range per {
						if len(slab) == 0 {
							slab = make([]handedOut, 1024/32)
						}
						h := &slab[0]
						slab = slab[1:]
						h.buf, h.size = l.pop(), benchSize
						l.push(h.buf)
						sinks[i].h = h
					}
				}()
			}
			wg.Wait()
		})
	}
}

// handedOut stands for a PooledBuffer: 32 bytes.
type handedOut struct {
	owner *struct{}
	buf   *cl.Buffer
	size  int64
	q     *struct{}
}

// benchSVMPool is benchPool over coarse-grain SVM; the benchmark is
// skipped where the device has none.
func benchSVMPool(b *testing.B, opts ...mempool.Option) *mempool.Pool {
	a, err := allocator.NewImmediateSVM(cltest.SVMQueue(b, cl.SVMCoarseGrainBuffer), false)
	if err != nil {
		b.Fatal(err)
	}
	return warmed(b)(mempool.NewSVM(a, opts...))
}

// BenchmarkSVMPoolHit is BenchmarkPoolHit over SVM (NewSVM), and
// BenchmarkSVMArenaHit BenchmarkArenaHit: the pool is the same, so they
// should cost the same as their buffer twins.
func BenchmarkSVMPoolHit(b *testing.B) { hitLoop(b, benchSVMPool(b)) }

func BenchmarkSVMArenaHit(b *testing.B) { hitLoop(b, benchSVMPool(b, mempool.WithArena())) }

// BenchmarkSVMAlloc is what a pool hit saves over SVM: clSVMAlloc and
// clSVMFree of 4 KiB (allocator.SVM), and with the ImmediateSVM's probe.
func BenchmarkSVMAlloc(b *testing.B) {
	q := cltest.SVMQueue(b, cl.SVMCoarseGrainBuffer)
	plain, err := allocator.NewSVM(q.Context(), false)
	if err != nil {
		b.Fatal(err)
	}
	imm, err := allocator.NewImmediateSVM(q, false)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		a    allocator.SVMAllocator
	}{{"plain", plain}, {"immediate", imm}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s, err := c.a.Allocate(benchSize)
				if err != nil {
					b.Fatal(err)
				}
				if err := c.a.Free(s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkQueuePerTask is a task on a queue of its own: the queue made,
// a block allocated on it (the one the last task gave back, in that
// task's queue's cache) and given back, the queue released. A pool that
// kept every queue it saw paid for each one at every task (ns/op grew
// with b.N); one that forgets released queues pays for a few.
func BenchmarkQueuePerTask(b *testing.B) {
	q := cltest.Queue(b)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	if err != nil {
		b.Fatal(err)
	}
	p := warmed(b)(mempool.New(imm))
	b.ReportAllocs()
	for b.Loop() {
		q2, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
		if err != nil {
			b.Fatal(err)
		}
		pb, err := p.On(q2).Allocate(benchSize)
		if err != nil {
			b.Fatal(err)
		}
		pb.Close()
		if err := q2.Release(); err != nil {
			b.Fatal(err)
		}
	}
}
