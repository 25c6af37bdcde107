package mempool_test

// Hostile tests of the queue caches' locking (qcache.go, release.go,
// ladder.go): c.mu then p.mu, flushCaches's TryLock, give's one
// hold of p.mu taken under c.mu, the drains. Every test runs under a
// watchdog that turns a hang into a crash with every goroutine's stack.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
)

// hlErrs collects failures from goroutines other than the test's.
type hlErrs struct {
	mu   sync.Mutex
	msgs map[string]int
}

func (e *hlErrs) add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.msgs == nil {
		e.msgs = map[string]int{}
	}
	e.msgs[fmt.Sprintf(format, args...)]++
}

func (e *hlErrs) report(t *testing.T) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for m, n := range e.msgs {
		t.Errorf("%s (x%d)", m, n)
	}
}

// hlQueues returns the default in-order queue q, two more in-order ones
// and an out-of-order one.
func hlQueues(t *testing.T) []*cl.CommandQueue {
	q := cltest.Queue(t)
	return []*cl.CommandQueue{q, cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, cl.QueueOutOfOrder)}
}

type hlConfig struct {
	name       string
	arena      bool
	dropSafety bool
}

var hlConfigs = []hlConfig{
	{"bins", false, true},
	{"bins-nodrop", false, false},
	{"arena", true, true},
	{"arena-nodrop", true, false},
}

func (c hlConfig) opts() []mempool.Option {
	var o []mempool.Option
	if c.arena {
		o = append(o, mempool.WithArena())
	}
	if !c.dropSafety {
		o = append(o, mempool.WithDropSafety(false))
	}
	return o
}

// hlOpen is a buffer a worker holds, with the size it asked for.
type hlOpen struct {
	b    *mempool.PooledBuffer
	size int64
}

// hlCheckIdle checks the pool's figures against the buffers still open
// (all stopped), then closes them and checks the pool empties.
func hlCheckIdle(t *testing.T, p *mempool.Pool, open []hlOpen, dropped int64, dropSafety bool) {
	t.Helper()
	want := int64(len(open))
	var wantBytes int64
	for _, o := range open {
		wantBytes += o.size
	}
	if dropped > 0 && dropSafety {
		// The dropped ones come back through their finalizers.
		deadline := time.Now().Add(5 * time.Second)
		for p.Stats().Allocation.All.Current != want && time.Now().Before(deadline) {
			runtime.GC()
			time.Sleep(5 * time.Millisecond)
		}
	}
	if !dropSafety {
		want += dropped // never closed, never reclaimed: they stay active
	}
	s := p.Stats()
	pooltest.CheckStats(t, s)
	require.Equal(t, want, s.Allocation.All.Current, "Allocation.All.Current: open buffers (dropped %d)", dropped)
	require.Equal(t, int(want), s.ActiveBlocks)
	if dropSafety || dropped == 0 {
		require.Equal(t, wantBytes, s.RequestedBytes.All.Current, "requested bytes of the open buffers")
		require.Equal(t, wantBytes, s.ActiveBytes)
	}
	require.Equal(t, s.ReservedBytes.All.Current, s.ManagedBytes)
	require.Equal(t, s.ManagedBytes, s.AllocatedBytes.All.Current+s.HeldBytes, "managed = allocated + held (idle)")
	v, snap := hsSnap(p)
	require.Equal(t, int(want), v.activeBlocks, "Snapshot's active blocks")
	require.Equal(t, s.ManagedBytes, v.managed, "Snapshot's managed bytes")
	require.Equal(t, s.HeldBytes, v.heldBytes, "Snapshot's held bytes")
	require.Equal(t, s.HeldBlocks, v.heldBlocks, "Snapshot's held blocks")
	require.Equal(t, s.ManagedBytes, snap.ManagedBytes)
	require.NoError(t, mempool.CheckBlockCounts(p))
	for _, o := range open {
		require.NoError(t, o.b.Close())
		require.ErrorIs(t, o.b.Close(), mempool.ErrClosed)
	}
	s = p.Stats()
	if dropSafety {
		require.Zero(t, s.ActiveBlocks)
		require.Zero(t, s.ActiveBytes)
		require.NoError(t, p.FreeHeld())
		s = p.Stats()
		require.Zero(t, s.HeldBlocks, "FreeHeld of an idle pool")
		require.Zero(t, s.HeldBytes)
		require.Zero(t, s.ManagedBytes, "FreeHeld of an idle pool")
		require.Zero(t, s.Segment.All.Current)
		require.Zero(t, s.InactiveSplit.All.Current)
	}
}

// hlStorm runs workers on every queue (and on none) against chaos: Stats,
// Snapshot, FreeHeld, ResetPeak, ResetAccumulated, hooks coming and going
// (one of which calls Stats from inside the hook), RecordQueue, dropped
// buffers and collections.
func hlStorm(t *testing.T, c hlConfig, p *mempool.Pool, queues []*cl.CommandQueue, closePool bool, steps *atomic.Int64) {
	var errs hlErrs
	allocs := []func(int64) (*mempool.PooledBuffer, error){p.Allocate}
	ons := []*mempool.QueueAllocator{}
	for _, q := range queues {
		on := p.On(q)
		ons = append(ons, on)
		allocs = append(allocs, on.Allocate)
	}
	var poolClosed atomic.Bool
	var dropped atomic.Int64
	done := make(chan struct{})
	var chaos sync.WaitGroup

	// Chaos: read and reset figures, free, hook on and off.
	chaos.Go(func() {
		var remove []func()
		var hookEvents atomic.Int64
		hook := mempool.HookFunc(func(e mempool.Event) {
			if hookEvents.Add(1)%17 == 0 {
				pooltest.CheckStats(t, p.Stats()) // hooks may call Stats
			}
		})
		defer func() {
			for _, r := range remove {
				r()
			}
		}()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			switch i % 13 {
			case 0, 7:
				pooltest.CheckStats(t, p.Stats())
			case 1:
				_ = p.Snapshot()
			case 2:
				if err := p.FreeHeld(); err != nil {
					errs.add("FreeHeld: %v", err)
				}
			case 3:
				p.ResetPeak()
			case 4:
				p.ResetAccumulated()
			case 5:
				if len(remove) < 2 && i%3 == 0 {
					remove = append(remove, p.AddHook(hook))
				} else if len(remove) > 0 {
					remove[0]()
					remove = remove[1:]
				}
			case 6:
				if err := ons[i%len(ons)].FreeHeld(); err != nil {
					errs.add("On.FreeHeld: %v", err)
				}
			case 8:
				_ = p.MemoryStats()
				_, _ = p.LargestHeldBin()
			case 9:
				if c.dropSafety {
					runtime.GC()
				}
			case 10:
				s := p.Stats()
				for name, g := range hsGroups(s) {
					for k, st := range trio(g) {
						if st.Peak < st.Current || st.Current < 0 {
							errs.add("%s[%d]: Peak %d Current %d", name, k, st.Peak, st.Current)
						}
					}
				}
			}
			time.Sleep(100 * time.Microsecond)
		}
	})

	var workers sync.WaitGroup
	var mu sync.Mutex
	var left []hlOpen
	const nWorkers = 6
	for g := range nWorkers {
		workers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g)+1, 77))
			sizes := []int64{64, 1000, 4096, 1 << 16, 300 << 10, int64(g+1) * 100}
			var open []hlOpen
			// The out-of-order queue gets few requests: each is a marker
			// and a barrier there, which POCL's out-of-order queue
			// finishes in time quadratic in their number (3000 of them
			// take it about 100 s to finish, the pool aside).
			home := g % (len(allocs) - 1)
			for op := range 12000 {
				steps.Add(1)
				if closePool && g == 0 && op == 6000 {
					if err := p.Close(); err != nil {
						errs.add("pool Close: %v", err)
					}
					poolClosed.Store(true)
					continue
				}
				if len(open) > 0 && (rng.IntN(100) < 45 || len(open) > 20) {
					i := len(open) - 1 - rng.IntN(min(len(open), 4))
					o := open[i]
					open = append(open[:i], open[i+1:]...)
					switch r := rng.IntN(100); {
					case r < 4 && c.dropSafety:
						dropped.Add(1) // dropped without Close
						continue
					case r < 8:
						if err := o.b.RecordQueue(queues[rng.IntN(len(queues))]); err != nil {
							errs.add("RecordQueue: %v", err)
						}
					}
					if err := o.b.Close(); err != nil {
						errs.add("Close: %v", err)
					}
					if rng.IntN(20) == 0 {
						if err := o.b.Close(); !errors.Is(err, mempool.ErrClosed) {
							errs.add("second Close: %v", err)
						}
					}
					continue
				}
				size := sizes[rng.IntN(len(sizes))]
				if rng.IntN(40) == 0 {
					size = int64(1<<20 + rng.IntN(3<<20)) // large
				}
				a := allocs[home]
				if rng.IntN(8) == 0 {
					a = allocs[rng.IntN(len(allocs)-1)]
				}
				if rng.IntN(60) == 0 {
					a = allocs[len(allocs)-1] // out of order
				}
				after := poolClosed.Load()
				b, err := a(size)
				if err != nil {
					if !(closePool && errors.Is(err, mempool.ErrPoolClosed)) {
						errs.add("Allocate(%d): %v", size, err)
					}
					continue
				}
				if after {
					errs.add("Allocate(%d) served after the pool's Close returned", size)
				}
				if b.Size() != size {
					errs.add("Size %d, asked %d", b.Size(), size)
				}
				open = append(open, hlOpen{b, size})
			}
			mu.Lock()
			left = append(left, open...)
			mu.Unlock()
		})
	}
	workers.Wait()
	close(done)
	chaos.Wait()
	errs.report(t)
	if t.Failed() {
		for _, o := range left {
			_ = o.b.Close()
		}
		return
	}
	if closePool {
		// Everything open goes back and is freed at once.
		for _, o := range left {
			require.NoError(t, o.b.Close())
		}
		if c.dropSafety {
			deadline := time.Now().Add(5 * time.Second)
			for p.Stats().ActiveBlocks != 0 && time.Now().Before(deadline) {
				runtime.GC()
				time.Sleep(5 * time.Millisecond)
			}
			s := p.Stats()
			require.Zero(t, s.ActiveBlocks, "dropped buffers reclaimed after the pool's Close")
			require.Zero(t, s.HeldBlocks, "a closed pool holds nothing")
			require.Zero(t, s.ManagedBytes, "a closed pool with nothing open manages nothing")
		}
		return
	}
	hlCheckIdle(t, p, left, dropped.Load(), c.dropSafety)
}

// TestHostileLocksStorm: workers on every queue against the chaos of
// hlStorm; no hang, no race, and at the end the figures count exactly
// what is open, and everything is freed once. With closeMid, one worker
// closes the pool halfway: the others' requests after it fail with
// ErrPoolClosed, their Closes free at once, and nothing is left
// allocated.
func TestHostileLocksStorm(t *testing.T) {
	for _, closeMid := range []bool{false, true} {
		for _, c := range hlConfigs {
			t.Run(fmt.Sprintf("%s/closeMid=%v", c.name, closeMid), func(t *testing.T) {
				steps := hlStallWatchdog(t, 30*time.Second)
				queues := hlQueues(t)
				p, _ := hlPool(t, queues[0], nil, c.opts()...)
				hlStorm(t, c, p, queues[1:], closeMid, steps)
			})
		}
	}
}

// hlStallWatchdog turns a hang into a failure, as cltest.Watchdog does,
// but by progress rather than by the clock: it panics, with every
// goroutine's stack, once the returned counter has not moved for idle.
// The workers add a step each; the test's end (the checks, the
// cleanups) must also be over within idle of the last step. A run of
// these storms is a fixed number of steps, a garbage collection at each
// out-of-memory with drop safety: under -race on two shared cores it
// took from 20 s to past 90 s (CI-like load), so a deadline on the whole
// run failed runs that were only slow.
func hlStallWatchdog(t *testing.T, idle time.Duration) *atomic.Int64 {
	t.Helper()
	name := t.Name()
	var steps atomic.Int64
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go func() {
		tick := time.NewTicker(idle / 10)
		defer tick.Stop()
		last, since := steps.Load(), time.Now()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if n := steps.Load(); n != last {
				last, since = n, time.Now()
				continue
			}
			if time.Since(since) < idle {
				continue
			}
			buf := make([]byte, 16<<20)
			n := runtime.Stack(buf, true)
			fmt.Fprintf(os.Stderr, "\n=== %s: no step for %v (%d steps); every goroutine:\n%s\n", name, idle, last, buf[:n])
			panic(name + ": hung (hlStallWatchdog)")
		}
	}()
	return &steps
}

// hlWorker runs ops steps of one goroutine: at each, with up to k of its
// buffers open, it closes one of them at random (always at k, else on a
// coin's toss) or allocates size(op) bytes with alloc, telling failed of
// a request that fails; at the end it closes what is left open.
func hlWorker(rng *rand.Rand, ops, k int, alloc func(int64) (*mempool.PooledBuffer, error), errs *hlErrs, size func(op int) int64, failed func(size int64, open int, err error)) {
	var open []*mempool.PooledBuffer
	for op := range ops {
		n := size(op) // every step, as the sizes a caller draws follow the steps
		if len(open) == k || len(open) > 0 && rng.IntN(2) == 0 {
			i := rng.IntN(len(open))
			if err := open[i].Close(); err != nil {
				errs.add("Close: %v", err)
			}
			open = append(open[:i], open[i+1:]...)
			continue
		}
		b, err := alloc(n)
		if err != nil {
			failed(n, len(open), err)
			continue
		}
		open = append(open, b)
	}
	for _, b := range open {
		_ = b.Close()
	}
}

// hlPool is pooltest.NewOver without its check of the pool's device
// counts against the allocator's (ResetAccumulated zeroes the pool's):
// at the end, with every buffer closed, it closes the pool and checks
// that every device buffer was freed exactly once.
func hlPool(t *testing.T, q *cl.CommandQueue, wrap func(allocator.Allocator) allocator.Allocator, opts ...mempool.Option) (*mempool.Pool, *allocator.Counting) {
	t.Helper()
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	count := allocator.NewCounting(imm)
	var a allocator.Allocator = count
	if wrap != nil {
		a = wrap(count)
	}
	p, err := mempool.New(a, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		require.Zero(t, p.ActiveBlocks(), "blocks left open")
		assert.NoError(t, p.Close())
		s, c := p.Stats(), count.Stats()
		assert.Zero(t, s.HeldBlocks)
		assert.Zero(t, s.ManagedBytes)
		assert.Zero(t, c.Live, "device buffers never freed")
		assert.Zero(t, c.BadFrees, "device buffers freed twice")
		assert.Equal(t, c.Allocs, c.Frees)
	})
	return p, count
}

// hlCapped is a pool over a counting allocator capped at total bytes by
// a Budget of the device ("budget") or the pool's limit ("limit").
func hlCapped(t *testing.T, q *cl.CommandQueue, by string, total int64, opts ...mempool.Option) (*mempool.Pool, *allocator.Counting) {
	if by == "limit" {
		opts = append(opts[:len(opts):len(opts)], mempool.WithLimit(total))
	}
	return hlPool(t, q, func(a allocator.Allocator) allocator.Allocator {
		if by == "budget" {
			return allocator.NewBudget(a, total)
		}
		return a
	}, opts...)
}

// TestHostileLocksOOMServedFromOtherCache: with exact bins, the whole
// cap sits in one queue's cache; a request on another queue (of the
// same size, then of another) must be served from it, never fail with
// out-of-memory.
func TestHostileLocksOOMServedFromOtherCache(t *testing.T) {
	for _, by := range []string{"limit", "budget"} {
		for _, drop := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/drop=%v", by, drop), func(t *testing.T) {
				cltest.Watchdog(t, 20*time.Second)
				queues := hlQueues(t)
				bs := allocSize(4096)
				big := int64(8000)
				require.LessOrEqual(t, 2*allocSize(big), 4*bs, "two of another bin fit")
				var opts []mempool.Option
				if !drop {
					opts = append(opts, mempool.WithDropSafety(false))
				}
				p, _ := hlCapped(t, queues[0], by, 4*bs, opts...)
				onA, onB, onC := p.On(queues[1]), p.On(queues[2]), p.On(queues[3])
				fill := func(a func(int64) (*mempool.PooledBuffer, error), size int64, n int) {
					t.Helper()
					var bs []*mempool.PooledBuffer
					for range n {
						b, err := a(size)
						require.NoError(t, err)
						bs = append(bs, b)
					}
					for _, b := range bs {
						require.NoError(t, b.Close())
					}
				}
				fill(onA.Allocate, 4096, 4) // A's cache holds the whole cap
				s := p.Stats()
				require.Equal(t, 4, s.HeldBlocks)
				require.Equal(t, int64(4), s.Queues[1].Cached, "A's cache")
				require.Same(t, queues[1], s.Queues[1].Queue)
				fill(onB.Allocate, 4096, 4) // the same size on B: from A's cache
				fill(p.Allocate, 4096, 4)   // and on the default queue: from B's
				fill(onC.Allocate, 4096, 4) // an out-of-order queue (no cache of its own)
				fill(onA.Allocate, 4096, 4)
				fill(onB.Allocate, big, 2) // another bin: A's cached segments freed
				whole := 4 * bs
				for allocSize(whole) > 4*bs {
					whole--
				}
				fill(onA.Allocate, whole, 1) // the whole cap at once, from B's cache
				fill(onB.Allocate, 4096, 4)
				s = p.Stats()
				require.Zero(t, s.OOMs)
				require.LessOrEqual(t, s.ManagedBytes, 4*bs)
			})
		}
	}
}

// TestHostileLocksOOMConcurrentCaches: goroutines on their own queues,
// each of its own size, each with at most k buffers open, under a cap
// that fits all of them at once (exact bins: a block is its segment).
// Each goroutine's open and cached blocks together are at most k, so a
// request always fits once the others' caches and held blocks are freed:
// no request may fail with out-of-memory.
func TestHostileLocksOOMConcurrentCaches(t *testing.T) {
	for _, by := range []string{"limit", "budget"} {
		for _, drop := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/drop=%v", by, drop), func(t *testing.T) {
				cltest.Watchdog(t, 20*time.Second)
				queues := hlQueues(t)
				sizes := []int64{4096, 8192, 3000, 20000}
				const k = 3
				var total int64
				for _, s := range sizes {
					total += k * allocSize(s)
				}
				var opts []mempool.Option
				if !drop {
					opts = append(opts, mempool.WithDropSafety(false))
				}
				p, _ := hlCapped(t, queues[0], by, total, opts...)
				allocs := []func(int64) (*mempool.PooledBuffer, error){p.Allocate}
				for _, q := range queues[1:] {
					allocs = append(allocs, p.On(q).Allocate)
				}
				var errs hlErrs
				var wg sync.WaitGroup
				for g := range len(sizes) {
					wg.Go(func() {
						ops := 6000
						if g == 3 {
							ops = 300 // out of order: see hlStorm
						}
						hlWorker(rand.New(rand.NewPCG(uint64(g), 3)), ops, k, allocs[g], &errs,
							func(int) int64 { return sizes[g] },
							func(size int64, open int, err error) {
								errs.add("goroutine %d: Allocate(%d) with %d of its own open: %v", g, size, open, err)
							})
					})
				}
				stop := pooltest.ReadStats(t, p, func(i int) {
					if i%10 == 0 {
						_ = p.FreeHeld()
					}
					time.Sleep(200 * time.Microsecond)
				})
				wg.Wait()
				stop()
				errs.report(t)
				s := p.Stats()
				assert.Zero(t, s.OOMs)
				assert.Zero(t, s.ActiveBlocks)
			})
		}
	}
}

// TestHostileLocksOOMArenaMergeNeedsOtherCache: in an arena capped at
// one segment, blocks given back on queue A wait in A's cache, unmerged;
// a request on queue B for the whole segment needs them merged: it must
// drain A's cache and be served, not fail with out-of-memory.
func TestHostileLocksOOMArenaMergeNeedsOtherCache(t *testing.T) {
	for _, by := range []string{"limit", "budget"} {
		for _, drop := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/drop=%v", by, drop), func(t *testing.T) {
				cltest.Watchdog(t, 20*time.Second)
				queues := hlQueues(t)
				// The segment of a small request, from a pool of its own.
				probe, _ := hlPool(t, queues[0], nil, mempool.WithArena())
				b, err := probe.Allocate(4096)
				require.NoError(t, err)
				seg := probe.ManagedBytes()
				require.NoError(t, b.Close())
				opts := []mempool.Option{mempool.WithArena()}
				if !drop {
					opts = append(opts, mempool.WithDropSafety(false))
				}
				p, _ := hlCapped(t, queues[0], by, seg, opts...)
				onA, onB := p.On(queues[1]), p.On(queues[2])
				for round := range 3 {
					var open []*mempool.PooledBuffer
					for range 8 {
						b, err := onA.Allocate(4096)
						require.NoError(t, err)
						open = append(open, b)
					}
					for _, b := range open {
						require.NoError(t, b.Close())
					}
					s := p.Stats()
					require.Positive(t, s.Queues[1].Cached, "round %d: A's cache holds blocks", round)
					whole, err := onB.Allocate(seg)
					require.NoError(t, err, "round %d: the whole segment, once A's cache is drained (segment %d bytes)", round, seg)
					require.NoError(t, whole.Close())
					whole, err = p.Allocate(seg / 2)
					require.NoError(t, err, "round %d", round)
					require.NoError(t, whole.Close())
				}
				require.Zero(t, p.Stats().OOMs)
			})
		}
	}
}

// TestHostileLocksOOMRotatingSizes: goroutines on their own in-order
// queues, each changing its size now and then (so that what waits in its
// own cache no longer serves it, and another's request needs it freed),
// each with at most k buffers open, under a cap that fits every
// goroutine's k largest at once (exact bins: a block is its segment).
func TestHostileLocksOOMRotatingSizes(t *testing.T) {
	for _, by := range []string{"limit", "budget"} {
		for _, drop := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/drop=%v", by, drop), func(t *testing.T) {
				// With drop safety, each out-of-memory collects garbage
				// (three runtime.GC): under -race on two cores the run
				// takes about 20 s, and past 90 s with the cores shared
				// (a 90 s watchdog fired with the workers collecting).
				steps := hlStallWatchdog(t, 30*time.Second)
				queues := hlQueues(t)
				sizes := []int64{33000, 40000, 48000, 56000, 65536, 20000}
				const k, n = 3, 3
				total := int64(n * k * allocSize(65536))
				var opts []mempool.Option
				if !drop {
					opts = append(opts, mempool.WithDropSafety(false))
				}
				p, _ := hlCapped(t, queues[0], by, total, opts...)
				allocs := []func(int64) (*mempool.PooledBuffer, error){p.Allocate, p.On(queues[1]).Allocate, p.On(queues[2]).Allocate}
				var errs hlErrs
				var ooms atomic.Int64
				var wg sync.WaitGroup
				for g := range n {
					wg.Go(func() {
						rng := rand.New(rand.NewPCG(uint64(g), 9))
						size := sizes[g]
						hlWorker(rng, 20000, k, allocs[g], &errs,
							func(op int) int64 {
								steps.Add(1)
								if op%40 == 0 {
									size = sizes[rng.IntN(len(sizes))]
								}
								return size
							},
							func(size int64, open int, err error) {
								ooms.Add(1)
								var oom *mempool.OutOfMemoryError
								if errors.As(err, &oom) {
									errs.add("goroutine %d: Allocate(%d) with %d of its own open: out of memory with %d blocks held (%d bytes) of %d managed, %d active", g, size, open, oom.HeldBlocks, oom.HeldBytes, oom.ManagedBytes, oom.ActiveBytes)
								} else {
									errs.add("goroutine %d: Allocate(%d): %v", g, size, err)
								}
							})
					})
				}
				wg.Wait()
				if n := ooms.Load(); n > 0 {
					t.Errorf("%d requests failed, each fitting the cap with everything held freed", n)
				}
				errs.report(t)
			})
		}
	}
}
