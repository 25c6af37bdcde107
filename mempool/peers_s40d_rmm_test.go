package mempool_test

// Session s40d ports of RMM's tests/mr/device tests that the earlier
// rounds (peers_s38_rmm, peers_s39_rmm, hostile_s34b_rmm) do not cover:
//
//   - failure_callback_mr_tests.cpp (RetryAllocationOnce), and the way
//     cuDF uses that adaptor: a callback that, when the device refuses,
//     spills live buffers back to the pool and asks it to give memory back,
//     then retries. In clpool the adaptor is an allocator under the pool,
//     so the callback calls back into the pool that is allocating.
//   - arena_mr_tests.cpp Defragment (per-thread arenas, then one request of
//     the whole arena) with goroutines on queues of their own, whose
//     blocks wait in the queues' caches; DumpLogOnFailure (what is known
//     after an out-of-memory).
//   - pool_mr_tests.cpp InitialAndMaxPoolSizeEqual / NonAlignedPoolSize:
//     a maximum pool size that is not a multiple of anything is still
//     filled to the byte.
//   - mr_ref_multithreaded_tests.cpp AllocFreeDifferentThreadsDifferentStream:
//     one goroutine allocates on queue A, another uses the blocks on queue
//     B and frees them there, while the first reuses them.

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s40dFailureCallback is RMM's failure_callback_resource_adaptor as an
// allocator: when the allocator under it refuses a buffer for want of
// memory, it calls callback with the size, and retries while callback
// returns true.
type s40dFailureCallback struct {
	allocator.Allocator
	callback func(size int64) bool
	calls    atomic.Int64
}

func (f *s40dFailureCallback) Allocate(size int64) (*cl.Buffer, error) {
	for {
		buf, err := f.Allocator.Allocate(size)
		if err == nil || !errors.Is(err, allocator.ErrOutOfMemory) {
			return buf, err
		}
		f.calls.Add(1)
		if !f.callback(size) {
			return nil, err
		}
	}
}

func (f *s40dFailureCallback) Unwrap() allocator.Allocator { return f.Allocator }

// RMM FailureCallbackTest.RetryAllocationOnce: a request nothing can serve
// reaches the callback, which asks for one retry and then gives up; the
// request fails with out_of_memory (clpool's *OutOfMemoryError, wrapping
// the device's refusal), and nothing leaks.
func TestS40dPortRmmFailureCallbackRetryOnce(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		const budget = 4 << 20
		var retried, gaveUp atomic.Int64
		var fc *s40dFailureCallback
		p, _, count := peerPool(t, pp, func(a allocator.Allocator) allocator.Allocator {
			fc = &s40dFailureCallback{Allocator: allocator.NewBudget(a, budget), callback: func(int64) bool {
				if retried.CompareAndSwap(0, 1) {
					return true
				}
				gaveUp.Add(1)
				return false
			}}
			return fc
		})
		small := mustAlloc(t, p, 1000)
		_, err := p.Allocate(8 << 20)
		require.Error(t, err)
		assert.ErrorIs(t, err, mempool.ErrOutOfMemory)
		var oom *mempool.OutOfMemoryError
		require.ErrorAs(t, err, &oom)
		assert.Error(t, oom.Err, "the device (the budget), not a limit, refused")
		assert.EqualValues(t, 1, retried.Load(), "the callback was asked and retried once")
		assert.NotZero(t, gaveUp.Load(), "then it gave up, and the error reached the pool")
		assert.Equal(t, fc.calls.Load(), 1+gaveUp.Load())
		assert.EqualValues(t, 1, p.Stats().OOMs)
		// The pool still serves what fits.
		b := mustAlloc(t, p, 1<<20)
		mustClose(t, b, small)
		s38CheckDevice(t, p, count, "after the refusal")
	})
}

// The callback of cuDF's spilling, under the pool: when the device refuses
// a segment, it spills live buffers (Closes them: their data is copied
// to the host first) and asks the pool to give its wholly free segments
// back (FreeHeld), then retries. The callback runs inside the pool's call
// of its allocator, which the pool makes outside its lock (memory.go's
// source), so calling the pool from there must work: the request is
// served, nothing hangs, and every device buffer is freed once.
func TestS40dPortRmmFailureCallbackSpillsIntoThePool(t *testing.T) {
	for _, v := range s34bVariants() {
		t.Run(v.name, func(t *testing.T) {
			const budget = 6 << 20
			var mu sync.Mutex
			var spillable []*mempool.PooledBuffer
			var p *mempool.Pool
			var spills atomic.Int64
			var callbackErr errSink
			var fc *s40dFailureCallback
			p, q, count := peerPool(t, v.pp, func(a allocator.Allocator) allocator.Allocator {
				fc = &s40dFailureCallback{Allocator: allocator.NewBudget(a, budget), callback: func(int64) bool {
					mu.Lock()
					if len(spillable) == 0 {
						mu.Unlock()
						return false
					}
					b := spillable[0]
					spillable = spillable[1:]
					mu.Unlock()
					spills.Add(1)
					callbackErr.add(b.Close())
					callbackErr.add(p.FreeHeld())
					return true
				}}
				return fc
			})
			alloc := s34bAllocFn(p, q, v.on)
			for range 4 {
				b, err := alloc(1 << 20)
				require.NoError(t, err)
				spillable = append(spillable, b)
			}
			var big *mempool.PooledBuffer
			var err error
			if !within(t, "a request whose allocator's failure callback calls the pool", func() {
				big, err = alloc(3 << 20)
			}) {
				return
			}
			require.NoError(t, err, "the callback spilled enough for the request")
			require.NoError(t, callbackErr.err())
			assert.NotZero(t, spills.Load(), "the device refused, and the callback spilled")
			assert.Zero(t, p.Stats().OOMs)
			mu.Lock()
			rest := spillable
			spillable = nil
			mu.Unlock()
			mustClose(t, append(rest, big)...)
			s38CheckDevice(t, p, count, "end")
		})
	}
}

// s40dQueueWorkers runs n goroutines, each on a queue of its own (q's
// context), that allocate a 32 KiB block and close it, rounds times: their
// blocks wait in their queues' caches. It returns the queues' allocators,
// nil if the workers failed or hung (the test has failed).
func s40dQueueWorkers(t *testing.T, p *mempool.Pool, q *cl.CommandQueue, n, rounds int) []*mempool.QueueAllocator {
	t.Helper()
	ons := make([]*mempool.QueueAllocator, n)
	for i := range ons {
		ons[i] = p.On(cltest.SecondQueue(t, q, 0))
	}
	var errs errSink
	var wg sync.WaitGroup
	for _, on := range ons {
		wg.Go(func() {
			for range rounds {
				b, err := on.Allocate(32 << 10)
				errs.add(err)
				if err == nil {
					errs.add(b.Close())
				}
			}
		})
	}
	if !within(t, "the workers", wg.Wait) {
		return nil
	}
	if err := errs.err(); err != nil {
		t.Error(err)
		return nil
	}
	return ons
}

// RMM ArenaTest.Defragment: threads, each on a stream of its own,
// allocate and free 32 KiB; then one request of the whole arena must
// succeed: the arena gives back every thread's free superblocks to the
// global arena and takes them whole. Here goroutines each on a queue of
// its own (their blocks wait in their queues' caches), over a device of
// exactly budget bytes; the request is the whole budget (with exact bins,
// the largest request whose bin's block fits it).
func TestS40dPortRmmArenaDefragmentQueueCaches(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		const budget = 2 << 20
		p, q, count := peerPool(t, pp, func(a allocator.Allocator) allocator.Allocator {
			return allocator.NewBudget(a, budget)
		})
		ons := s40dQueueWorkers(t, p, q, 4, 3)
		if ons == nil {
			return
		}
		require.NotZero(t, p.HeldBytes(), "the workers' blocks are held")
		big := int64(budget)
		if !pp.arena {
			for mempool.AllocSize(mempool.BinNumber(big, 4), 4) > budget {
				big -= 4 << 10
			}
		}
		for _, alloc := range []allocatorOf{p, ons[0]} {
			b, err := alloc.Allocate(big)
			require.NoError(t, err, "the whole device, once the held blocks are given back")
			s38CheckDevice(t, p, count, "whole device live")
			require.NoError(t, b.Close())
		}
		assert.Zero(t, p.Stats().OOMs)
	})
}

// RMM ArenaTest.DumpLogOnFailure: after threads allocate and free, a
// request over the arena's size fails with out_of_memory, and the arena
// says where its memory is (RMM dumps it to a log). clpool: the
// *OutOfMemoryError names the request, the limit and what is held; the
// refusal (the request's block cannot fit even an empty pool) keeps what
// the pool holds; the summary counts the OOM; Stats agree with the error.
func TestS40dPortRmmArenaDumpOnFailure(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		const limit = 1 << 20
		p, q, _ := peerPool(t, pp, nil, mempool.WithLimit(limit))
		if s40dQueueWorkers(t, p, q, 4, 1) == nil {
			return
		}
		before := p.Stats()
		_, err := p.Allocate(8 << 20)
		require.ErrorIs(t, err, mempool.ErrOutOfMemory)
		var oom *mempool.OutOfMemoryError
		require.ErrorAs(t, err, &oom)
		assert.EqualValues(t, 8<<20, oom.Requested)
		assert.EqualValues(t, limit, oom.Limit)
		assert.Nil(t, oom.Err, "the limit refused")
		assert.Zero(t, oom.ActiveBlocks)
		after := p.Stats()
		assert.Equal(t, before.ManagedBytes, after.ManagedBytes, "the refusal kept what the pool holds")
		assert.Equal(t, after.ManagedBytes, oom.ManagedBytes)
		assert.Equal(t, after.HeldBytes, oom.HeldBytes)
		assert.EqualValues(t, 1, after.OOMs)
		assert.EqualValues(t, 1, p.MemoryStats()["num_ooms"])
		msg := err.Error()
		assert.Contains(t, msg, "8388608", "the error names the request: %s", msg)
		var sum bytes.Buffer
		require.NoError(t, p.WriteSummary(&sum))
		assert.True(t, strings.Contains(strings.ToLower(sum.String()), "oom"), "the summary counts the OOM:\n%s", sum.String())
	})
}

// RMM PoolTest.InitialAndMaxPoolSizeEqual and NonAlignedPoolSize: RMM
// refuses a maximum pool size that is not a multiple of 256; clpool's
// limit is any number of bytes (by design: it caps managed bytes), and a
// pool under it holds blocks up to the limit's last byte: with blocks of
// one size, as many as the limit holds, and the next request fails.
func TestS40dPortRmmMaxPoolSizeFilledToTheByte(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		const limit = 1000192 + 31 // RMM's sizes, made odd
		p, _, count := peerPool(t, pp, nil, mempool.WithLimit(limit))
		first := mustAlloc(t, p, 1000)
		block := first.Size()
		if snap := p.Snapshot(); len(snap.Segments) > 0 {
			for _, b := range snap.Segments[0].Blocks {
				if b.State == mempool.StateActive {
					block = b.Size
				}
			}
		}
		live := []*mempool.PooledBuffer{first}
		defer func() { mustClose(t, live...) }()
		for {
			b, err := p.Allocate(1000)
			if err != nil {
				require.ErrorIs(t, err, mempool.ErrOutOfMemory)
				break
			}
			live = append(live, b)
			require.Less(t, int64(len(live)), limit/block+2, "more blocks than the limit holds")
		}
		s := p.Stats()
		assert.LessOrEqual(t, s.ManagedBytes, int64(limit))
		assert.Equal(t, int(limit/block), len(live),
			"blocks of %d bytes under a limit of %d (managed %d, %d segments)", block, limit, s.ManagedBytes, s.Segment.All.Current)
		s38CheckDevice(t, p, count, "full")

		// The bytes left under the limit still serve a request whose
		// block fits them (a tiny one: the arena's smallest block, or
		// the bin's).
		left := int64(limit) - p.ManagedBytes()
		tiny := int64(500)
		tinyBlock := int64(512)
		if !pp.arena {
			tinyBlock = mempool.AllocSize(mempool.BinNumber(tiny, 4), 4)
		}
		held := p.HeldBytes()
		require.True(t, left >= tinyBlock || held >= tinyBlock, "the test's sizes leave room for a tiny block: %d left, %d held", left, held)
		b, err := p.Allocate(tiny)
		if assert.NoError(t, err, "%d bytes left under the limit and %d held, a block of %d asked", left, held, tinyBlock) {
			live = append(live, b)
		}
		s38CheckDevice(t, p, count, "full, and the tiny block")
	})
}

// RMM mr_ref_multithreaded_tests AllocFreeDifferentThreadsDifferentStream:
// a producer allocates on stream A and hands each allocation to a
// consumer, which frees it on stream B. Here the producer fills each
// block on queue A and sends it; the consumer enqueues a slow read of it
// on queue B, records B (RecordQueue), and Closes it at once; meanwhile
// the producer's next requests reuse the blocks and refill them. Every
// read sees the value its block was sent with, and every block and buffer
// comes back.
func TestS40dPortRmmAllocFreeDifferentGoroutinesAndQueues(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		p, qa, count := peerPool(t, pp, nil)
		qb := cltest.SecondQueue(t, qa, 0)
		k := cltest.SlowReadKernel(t, qb)
		n, iters := 64, cltest.Size(qa, 100, 1000000)
		items := cltest.Size(qa, 4, 10)
		size := int64(4 * n)
		outs := make([]*cl.Buffer, items)
		for i := range outs {
			out, err := qa.Context().CreateBuffer(cl.MemReadWrite, size)
			require.NoError(t, err)
			defer out.Release()
			outs[i] = out
		}
		onA := p.On(qa)
		type item struct {
			b *mempool.PooledBuffer
			i int
		}
		ch := make(chan item)
		ack := make(chan struct{}) // the consumer closed the block: the next request may reuse it
		var errs errSink
		var wg sync.WaitGroup
		wg.Go(func() { // producer
			defer close(ch)
			for i := range items {
				b, err := onA.Allocate(size)
				if err != nil {
					errs.add(err)
					return
				}
				fill, err := qa.EnqueueFillBuffer(b.Base(), cl.Bytes([]int32{int32(i + 1)}), b.Offset(), size)
				if err == nil {
					err = fill.Wait()
					fill.Release()
				}
				if err != nil {
					errs.add(err)
					b.Close()
					return
				}
				ch <- item{b, i}
				<-ack
			}
		})
		wg.Go(func() { // consumer
			for it := range ch {
				err := it.b.RecordQueue(qb)
				if err == nil {
					err = k.SetArgs(it.b.Buffer(), outs[it.i], int32(iters))
				}
				if err == nil {
					err = qb.EnqueueKernel(k, []int{n}, nil)
				}
				if err == nil {
					err = qb.Flush()
				}
				errs.add(err)
				errs.add(it.b.Close()) // legal at once
				ack <- struct{}{}
			}
		})
		if !withinWork(t, "the producer and the consumer", wg.Wait) {
			return
		}
		require.NoError(t, errs.err())
		require.NoError(t, qb.Finish())
		bad := 0
		for i, out := range outs {
			got := make([]int32, n)
			require.NoError(t, qb.ReadBuffer(out, 0, cl.Bytes(got)))
			for _, v := range got {
				if v != int32(iters*(i+1)) {
					bad++
					break
				}
			}
		}
		assert.Zero(t, bad, "reads on queue B saw their blocks refilled by queue A's later requests")
		s := p.Stats()
		assert.Zero(t, s.ActiveBlocks)
		assert.EqualValues(t, items, s.Allocation.All.Allocated)
		assert.NotZero(t, s.Hits, "the producer reused blocks the consumer gave back")
		s38CheckDevice(t, p, count, "end")
	})
}

// The spilling callback of cuDF under RMM's multithreaded tests: goroutines
// on queues of their own allocate 1 MiB blocks and hand each to a shared
// spill list; when the device (a budget of a few blocks) refuses a
// segment, the allocator's callback, on whichever goroutine asked,
// spills the oldest block of the list (Closes it), reads the pool
// (Stats, Snapshot), asks it to give back its wholly free segments
// (Pool.FreeHeld, and the asking queue's FreeHeld), and retries. Requests
// racing each other through the ladder (one waits for memory another's
// request has on its way, while that one's callback calls the pool)
// must all be served, with nothing hung and every buffer freed once.
func TestS40dPortRmmSpillingCallbackManyGoroutines(t *testing.T) {
	forPeerPolicies(t, func(t *testing.T, pp peerPolicy) {
		const budget = 8 << 20
		var mu sync.Mutex
		var spillable []*mempool.PooledBuffer
		var p *mempool.Pool
		var spills atomic.Int64
		var callbackErr errSink
		p, q, count := peerPool(t, pp, func(a allocator.Allocator) allocator.Allocator {
			return &s40dFailureCallback{Allocator: allocator.NewBudget(a, budget), callback: func(int64) bool {
				mu.Lock()
				if len(spillable) == 0 {
					mu.Unlock()
					return false
				}
				b := spillable[0]
				spillable = spillable[1:]
				mu.Unlock()
				spills.Add(1)
				callbackErr.add(b.Close())
				_ = p.Stats()
				_ = p.Snapshot()
				callbackErr.add(p.FreeHeld())
				return true
			}}
		})
		const workers = 4
		rounds := cltest.Size(q, 10, 30)
		var errs errSink
		var wg sync.WaitGroup
		for w := range workers {
			on := p.On(cltest.SecondQueue(t, q, 0))
			wg.Go(func() {
				for i := range rounds {
					b, err := on.Allocate(int64(1<<20) + int64((w+i)%3)*4096)
					if err != nil {
						errs.add(err)
						return
					}
					mu.Lock()
					spillable = append(spillable, b)
					mu.Unlock()
					if i%4 == 3 {
						errs.add(on.FreeHeld())
					}
				}
			})
		}
		if !withinWork(t, "goroutines whose requests spill through the allocator's callback", wg.Wait) {
			return
		}
		require.NoError(t, errs.err(), "every request is served: the callback spills the others' blocks")
		require.NoError(t, callbackErr.err())
		assert.NotZero(t, spills.Load())
		mu.Lock()
		rest := spillable
		spillable = nil
		mu.Unlock()
		mustClose(t, rest...)
		s38CheckDevice(t, p, count, "end")
	})
}
