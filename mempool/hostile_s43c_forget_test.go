package mempool_test

import (
	"fmt"
	"io"
	"math/rand/v2"
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

// Review s43c: forgetReleased's single lockCaches hold, against the
// pool's other users.

// s43cPool is a pool of the given kind over a counting allocator, whose
// cleanup checks every device buffer freed exactly once and the pool's
// device counts against the allocator's.
func s43cPool(t *testing.T, q *cl.CommandQueue, kind string, arena, drop bool) *mempool.Pool {
	t.Helper()
	opts := []mempool.Option{mempool.WithDropSafety(drop)}
	if arena {
		opts = append(opts, mempool.WithArena())
	}
	switch kind {
	case "plain":
		p, _ := pooltest.NewOver(t, q, nil, opts...)
		return p
	case "sanitizer":
		p, _ := pooltest.NewOver(t, q, nil, append(opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(io.Discard))...)
		return p
	case "pinned":
		pinned, err := allocator.NewPinned(q)
		require.NoError(t, err)
		count := allocator.NewCounting(pinned)
		p, err := mempool.New(count, opts...)
		require.NoError(t, err)
		t.Cleanup(func() {
			require.Zero(t, p.ActiveBlocks(), "a test left blocks open")
			assert.NoError(t, p.Close())
			s, c := p.Stats(), count.Stats()
			assert.Zero(t, s.HeldBlocks)
			assert.Zero(t, s.ManagedBytes)
			assert.Equal(t, c.Allocs, s.DeviceAllocs)
			assert.Equal(t, c.Frees, s.DeviceFrees)
			assert.Zero(t, c.Live, "pinned buffers never freed")
			assert.Zero(t, c.BadFrees, "pinned buffers freed twice")
		})
		return p
	}
	t.Fatalf("kind %q", kind)
	return nil
}

// Several goroutines, each on queues of its own made per task and
// released after (with a buffer sometimes left open across the Release
// and closed once the pool may have forgotten the queue, and a
// RecordQueue of a queue released at once), beside readers (Stats,
// Snapshot, FreeHeld, a QueueAllocator's FreeHeld, ResetPeak). The totals
// must be exact at the end, every count back at zero, no peak over what
// the goroutines could hold open at once, no flush past frozenWait, and
// every device buffer freed exactly once (the pool's cleanup).
func TestHostileS43cForgetChurnKeepsCounts(t *testing.T) {
	for _, kind := range []string{"plain", "sanitizer", "pinned"} {
		for _, arena := range []bool{true, false} {
			for _, drop := range []bool{true, false} {
				if kind == "sanitizer" && !drop {
					continue // the sanitizer sets drop safety
				}
				t.Run(fmt.Sprintf("%s/arena=%v/drop=%v", kind, arena, drop), func(t *testing.T) {
					s43cChurn(t, kind, arena, drop)
				})
			}
		}
	}
}

func s43cChurn(t *testing.T, kind string, arena, drop bool) {
	q := cltest.Queue(t)
	long := cltest.SecondQueue(t, q, 0) // a queue every worker also uses, never released
	p := s43cPool(t, q, kind, arena, drop)
	const workers = 3
	const maxOpen = 3 // per worker, at most
	var allocs, fails atomic.Int64
	var stop atomic.Bool
	var wg, rg sync.WaitGroup
	errs := make(chan error, 100)
	report := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	deadline := time.Now().Add(s43aDur())
	longA := p.On(long)
	for w := range workers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 43))
			var carried *mempool.PooledBuffer // open across its queue's Release
			for i := 0; time.Now().Before(deadline); i++ {
				qq, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
				if err != nil {
					report(err)
					return
				}
				a := p.On(qq)
				var open []*mempool.PooledBuffer
				for range 8 + r.IntN(24) {
					if len(open) == maxOpen || (len(open) > 0 && r.IntN(2) == 0) {
						k := r.IntN(len(open))
						if err := open[k].Close(); err != nil {
							report(err)
						}
						open = append(open[:k], open[k+1:]...)
						continue
					}
					alloc := a.Allocate
					if r.IntN(4) == 0 {
						alloc = longA.Allocate
					}
					size := []int64{256, 4096, 4096, 8192, 65536, 1 << 20, 3 << 20}[r.IntN(7)]
					b, err := alloc(size)
					if err != nil {
						fails.Add(1)
						report(err)
						continue
					}
					allocs.Add(1)
					if r.IntN(8) == 0 {
						x, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
						if err == nil {
							if err := b.RecordQueue(x); err != nil {
								report(err)
							}
							_ = x.Release()
						}
					}
					open = append(open, b)
				}
				if carried != nil {
					if err := carried.Close(); err != nil {
						report(err)
					}
					carried = nil
				}
				if len(open) > 0 && r.IntN(3) == 0 {
					carried, open = open[0], open[1:]
				}
				for _, b := range open {
					if err := b.Close(); err != nil {
						report(err)
					}
				}
				if err := qq.Release(); err != nil {
					report(err)
				}
			}
			if carried != nil {
				if err := carried.Close(); err != nil {
					report(err)
				}
			}
		})
	}
	readers := []func(){
		func() { pooltest.CheckStats(t, p.Stats()) },
		func() { _ = p.Snapshot() },
		func() { _ = p.FreeHeld() },
		func() { _ = longA.FreeHeld() },
		func() { p.ResetPeak() },
	}
	for _, rd := range readers {
		rg.Go(func() {
			for !stop.Load() {
				rd()
				time.Sleep(50 * time.Microsecond)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(workLimit):
		t.Fatal("workers hung")
	}
	stop.Store(true)
	rg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("worker: %v", err)
	}
	s := p.Stats()
	assert.Zero(t, s.Allocation.All.Current, "every buffer closed")
	assert.Zero(t, s.RequestedBytes.All.Current)
	assert.Zero(t, s.AllocatedBytes.All.Current)
	assert.Equal(t, allocs.Load(), s.Allocation.All.Allocated, "every allocation counted once")
	assert.Equal(t, allocs.Load(), s.Allocation.All.Freed, "every free counted once")
	assert.LessOrEqual(t, s.Allocation.All.Peak, int64(workers*maxOpen+1), "no more open at once than the workers hold")
	var requests, cached int64
	for _, qs := range s.Queues {
		requests += qs.Requests
		cached += qs.Cached
	}
	assert.Equal(t, allocs.Load()+fails.Load(), requests, "every request counted on its queue")
	var hits int64
	for _, qs := range s.Queues {
		hits += qs.Hits
	}
	assert.Equal(t, s.Hits, hits, "the queues' hits add up to the pool's")
	assert.Equal(t, allocs.Load()+fails.Load(), s.Hits+s.Misses, "every request a hit or a miss")
	require.NoError(t, p.FreeHeld())
	s = p.Stats()
	cached = 0
	for _, qs := range s.Queues {
		cached += qs.Cached
	}
	assert.Zero(t, cached, "nothing cached after FreeHeld")
	assert.Zero(t, mempool.FrozenLate(p), "no flush waited past frozenWait")
	require.NoError(t, mempool.CheckBlockCounts(p))
	t.Logf("%d allocations, %d queues, peak %d, device allocs %d frees %d", allocs.Load(), len(s.Queues), s.Allocation.All.Peak, s.DeviceAllocs, s.DeviceFrees)
}

// One goroutine on two queues in turn, at most one buffer open (peak 1),
// beside: a goroutine that registers queues and releases them (every
// 16th or so On forgets), Stats readers, Snapshot and FreeHeld — the
// forgetting pass now a lockCaches like theirs, all at once.
func TestHostileS43cOneGoroutineForgetAndReaders(t *testing.T) {
	for _, arena := range []bool{true, false} {
		for _, drop := range []bool{true, false} {
			t.Run(fmt.Sprintf("arena=%v/drop=%v", arena, drop), func(t *testing.T) {
				q := cltest.Queue(t)
				opts := []mempool.Option{mempool.WithDropSafety(drop)}
				if arena {
					opts = append(opts, mempool.WithArena())
				}
				p := hsPool(t, q, opts...)
				qs := []*mempool.QueueAllocator{p.On(q), p.On(cltest.SecondQueue(t, q, 0))}
				register := func() {
					q3, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
					if err != nil {
						return
					}
					_ = p.On(q3)
					_ = q3.Release()
				}
				seen, last := s43aWorker(t, p, qs, s43aDo(register), s43aDo(register), s43aStats(p), s43aDo(func() { _ = p.Snapshot() }), s43aDo(func() { _ = p.FreeHeld() }))
				assert.Equal(t, int64(1), last, "one buffer open at most, on one goroutine")
				assert.LessOrEqual(t, seen, int64(1), "a reader's Stats")
				assert.Zero(t, mempool.FrozenLate(p), "no flush waited past frozenWait")
			})
		}
	}
}

// The worker's own queues are released and forgotten under it: one
// goroutine, at most one buffer open, on a fresh pair of queues every
// few iterations (the old pair released, with the buffer still open on
// one of them, closed after), while another goroutine registers and
// releases queues so that passes forget the worker's old pairs. Peak 1.
func TestHostileS43cWorkersQueuesForgottenUnderIt(t *testing.T) {
	for _, arena := range []bool{true, false} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			q := cltest.Queue(t)
			var opts []mempool.Option
			if arena {
				opts = append(opts, mempool.WithArena())
			}
			p := hsPool(t, q, opts...)
			newQ := func() *cl.CommandQueue {
				x, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
				require.NoError(t, err)
				return x
			}
			var stop atomic.Bool
			var wg sync.WaitGroup
			wg.Go(func() {
				for !stop.Load() {
					x, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
					if err != nil {
						return
					}
					_ = p.On(x)
					_ = x.Release()
				}
			})
			wg.Go(func() {
				for !stop.Load() {
					_ = p.Stats()
				}
			})
			qa, qb := newQ(), newQ()
			a, b := p.On(qa), p.On(qb)
			x := hsAlloc(t, a.Allocate, 4096)
			p.ResetPeak()
			deadline := time.Now().Add(s43aDur())
			for i := 0; time.Now().Before(deadline); i++ {
				if i%8 == 7 { // a fresh pair; x stays open on qa across its Release
					na, nb := newQ(), newQ()
					require.NoError(t, qb.Release())
					a2, b2 := p.On(na), p.On(nb)
					y := hsAlloc(t, b2.Allocate, 4096)
					require.NoError(t, qa.Release())
					require.NoError(t, y.Close()) // hmm: x open too: peak 2 here, by design
					require.NoError(t, x.Close())
					x = hsAlloc(t, a2.Allocate, 4096)
					qa, qb, a, b = na, nb, a2, b2
					continue
				}
				require.NoError(t, x.Close())
				y := hsAlloc(t, b.Allocate, 4096)
				require.NoError(t, y.Close())
				w := hsAlloc(t, a.Allocate, 8192+512*int64(i%24))
				require.NoError(t, w.Close())
				x = hsAlloc(t, a.Allocate, 4096)
			}
			stop.Store(true)
			wg.Wait()
			s := p.Stats()
			require.NoError(t, x.Close())
			require.NoError(t, qa.Release())
			require.NoError(t, qb.Release())
			assert.LessOrEqual(t, s.Allocation.All.Peak, int64(2), "at most two open at once (the pair change)")
			assert.Equal(t, int64(1), s.Allocation.All.Current)
			assert.Zero(t, mempool.FrozenLate(p))
		})
	}
}
