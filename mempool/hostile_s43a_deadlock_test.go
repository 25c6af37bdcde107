package mempool_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
)

// s43aHangDetector panics, dumping every goroutine, if done is not
// closed within limit.
func s43aHangDetector(t *testing.T, limit time.Duration, done <-chan struct{}) {
	go func() {
		select {
		case <-done:
		case <-time.After(limit):
			_ = pprof.Lookup("goroutine").WriteTo(os.Stderr, 2)
			panic(fmt.Sprintf("%s: hung: not done within %v", t.Name(), limit))
		}
	}()
}

// Guard (s43a): inspectors, queue operations, the out-of-memory ladder
// (a Budget of 3 MiB under an arena or bins), RecordQueue, hooks turned
// on and off, SetLimit, queues made and released (forgetReleased), and
// the pool's Close mid-way, all at once. Everything must end (60 s hang
// detector); errors other than out of memory and pool closed fail.
func TestHostileS43aEverythingAtOnceThenClose(t *testing.T) {
	for _, arena := range []bool{true, false} {
		for _, drop := range []bool{true, false} {
			t.Run(fmt.Sprintf("arena=%v/drop=%v", arena, drop), func(t *testing.T) {
				s43aEverything(t, arena, drop)
			})
		}
	}
}

func s43aEverything(t *testing.T, arena, drop bool) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	opts := []mempool.Option{mempool.WithDropSafety(drop)}
	if arena {
		opts = append(opts, mempool.WithArena())
	}
	p, err := mempool.New(allocator.NewBudget(imm, 3<<20), opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	qs := []*mempool.QueueAllocator{p.On(q)}
	raw := []*cl.CommandQueue{q}
	for range 2 {
		q2 := cltest.SecondQueue(t, q, 0)
		raw = append(raw, q2)
		qs = append(qs, p.On(q2))
	}
	done := make(chan struct{})
	s43aHangDetector(t, 60*time.Second, done)
	var stop atomic.Bool
	var wg sync.WaitGroup
	var bad atomic.Value
	var nOK, nOOM, nClosed atomic.Int64
	check := func(err error) {
		switch {
		case err == nil:
			nOK.Add(1)
			return
		case errors.Is(err, mempool.ErrOutOfMemory):
			nOOM.Add(1)
			return
		case errors.Is(err, mempool.ErrPoolClosed) || errors.Is(err, mempool.ErrClosed):
			nClosed.Add(1)
			return
		}
		bad.CompareAndSwap(nil, err)
	}
	sizes := []int64{256, 4096, 8192, 64 << 10, 300 << 10, 1 << 20, 2 << 20}
	worker := func(seed uint64, mine []*mempool.QueueAllocator) {
		r := rand.New(rand.NewPCG(seed, 43))
		var open []*mempool.PooledBuffer
		for !stop.Load() {
			a := mine[r.IntN(len(mine))]
			if len(open) < 4 && r.IntN(3) > 0 {
				pb, err := a.Allocate(sizes[r.IntN(len(sizes))])
				check(err)
				if err == nil {
					if r.IntN(8) == 0 {
						check(pb.RecordQueue(raw[r.IntN(len(raw))]))
					}
					open = append(open, pb)
				}
				continue
			}
			if len(open) > 0 {
				i := r.IntN(len(open))
				if !drop || r.IntN(16) != 0 {
					check(open[i].Close())
				} // else dropped: the finalizer gives it back
				open = append(open[:i], open[i+1:]...)
			}
		}
		for _, pb := range open {
			check(pb.Close())
		}
	}
	for i, a := range qs {
		wg.Go(func() { worker(uint64(i), []*mempool.QueueAllocator{a}) })
	}
	wg.Go(func() { worker(99, qs) }) // one goroutine on every queue in turn
	readers := []func(){
		func() { _ = p.Stats() },
		func() { _ = p.Snapshot() },
		func() { check(p.FreeHeld()) },
		p.ResetPeak,
		p.ResetAccumulated,
		func() { _ = p.MemoryStats() },
		func() { _, _ = p.LargestHeldBin() },
		func() { check(qs[1].FreeHeld()) },
		func() { // a hook on and off: the caches off, then on
			remove := p.AddHook(mempool.HookFunc(func(mempool.Event) {}))
			time.Sleep(time.Millisecond)
			remove()
		},
		func() { // the limit down (frees held segments) and off
			check(p.SetLimit(2 << 20))
			check(p.SetLimit(0))
		},
		func() { // a queue per task, released after: forgetReleased
			q3, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
			if err != nil {
				bad.CompareAndSwap(nil, err)
				return
			}
			pb, err := p.On(q3).Allocate(4096)
			check(err)
			if err == nil {
				check(pb.Close())
			}
			if err := q3.Release(); err != nil {
				bad.CompareAndSwap(nil, err)
			}
		},
	}
	for _, rd := range readers {
		wg.Go(func() {
			for !stop.Load() {
				rd()
			}
		})
	}
	time.Sleep(s43aDur())
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }() // mid-way: everything else still running
	time.Sleep(s43aDur() / 2)
	stop.Store(true)
	wg.Wait()
	check(<-closed)
	close(done)
	t.Logf("calls ok %d, out of memory %d, closed %d", nOK.Load(), nOOM.Load(), nClosed.Load())
	if err, _ := bad.Load().(error); err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	_, err = p.Allocate(4096)
	assert.ErrorIs(t, err, mempool.ErrPoolClosed)
}
