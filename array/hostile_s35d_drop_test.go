package array_test

// Hostile review s35d of 0b7d015: ptr keeps its storage, and run,
// copyElems, read and write keep their operands until the enqueue. Other
// operations, views, and pools of every kind, with the operand dropped by
// the caller while another goroutine collects garbage and allocates on
// another queue (the method of hostile_s35b_drop_test.go).
//
//	OCL_ICD_VENDORS=$PWD/build/icd CLPOOL_DEVICE=pocl \
//	  timeout 300 nice -n 10 go test ./array -count=1 -run 'TestHostileS35d'

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s35dSpot is where a pooled block's bytes are: its memory (a buffer or
// an SVM) and offset.
type s35dSpot struct {
	mem any
	off int64
}

func s35dSpotOf(b *mempool.PooledBuffer) s35dSpot {
	if s := b.SVM(); s != nil {
		return s35dSpot{s, b.Offset()}
	}
	return s35dSpot{b.Base(), b.Offset()}
}

// s35dOp is an operation on x, of n ones, that the caller drops as soon
// as the operation has it; it returns what the operation computed, which
// should be want.
type s35dOp struct {
	name string
	run  func(x *array.Array[int32], stage *array.Staging) (int64, error)
	want func(n int) int64
}

var s35dOps = []s35dOp{
	{"Sum", func(x *array.Array[int32], _ *array.Staging) (int64, error) {
		s, err := array.Sum(x)
		return int64(s), err
	}, func(n int) int64 { return int64(n) }},
	{"Dot", func(x *array.Array[int32], _ *array.Staging) (int64, error) {
		s, err := array.Dot(x, x)
		return int64(s), err
	}, func(n int) int64 { return int64(n) }},
	{"Max", func(x *array.Array[int32], _ *array.Staging) (int64, error) {
		s, err := array.Max(x)
		return int64(s), err
	}, func(int) int64 { return 1 }},
	{"SumOfView", func(x *array.Array[int32], _ *array.Staging) (int64, error) {
		v, err := x.Slice(1, x.Len()) // x is dropped here: v keeps the storage
		if err != nil {
			return 0, err
		}
		s, err := array.Sum(v)
		return int64(s), err
	}, func(n int) int64 { return int64(n - 1) }},
	{"CopyOfView", func(x *array.Array[int32], _ *array.Staging) (int64, error) {
		v, err := x.Slice(0, x.Len())
		if err != nil {
			return 0, err
		}
		c, err := v.Copy()
		if err != nil {
			return 0, err
		}
		defer c.Close()
		got, err := c.Get()
		if err != nil {
			return 0, err
		}
		var s int64
		for _, e := range got {
			s += int64(e)
		}
		return s, nil
	}, func(n int) int64 { return int64(n) }},
	{"GetPinned", func(x *array.Array[int32], stage *array.Staging) (int64, error) {
		dst := make([]int32, x.Len())
		if err := x.GetPinned(stage, dst); err != nil {
			return 0, err
		}
		var s int64
		for _, e := range dst {
			s += int64(e)
		}
		return s, nil
	}, func(n int) int64 { return int64(n) }},
}

// s35dDropped makes x = n ones on q, publishes its block's spot, and
// returns op on x, which it then drops.
//
//go:noinline
func s35dDropped(t *testing.T, q *cl.CommandQueue, alloc func(int64) (*mempool.PooledBuffer, error), n int, op s35dOp, stage *array.Staging, spot *atomic.Pointer[s35dSpot]) (int64, error) {
	ones := make([]int32, n)
	for i := range ones {
		ones[i] = 1
	}
	var blk *mempool.PooledBuffer
	x, err := array.FromHost(q, ones, func(size int64) (*mempool.PooledBuffer, error) {
		b, err := alloc(size)
		blk = b
		return b, err
	})
	require.NoError(t, err)
	require.NoError(t, q.Finish())
	s := s35dSpotOf(blk)
	blk = nil
	spot.Store(&s)
	return op.run(x, stage) // x is dead from here on, for the garbage collector
}

// PASSES (exploration that holds). Reductions (Sum, Dot, Max), a Sum and
// a Copy of a view whose array was dropped, and GetPinned, each of an
// operand dropped by the caller on a new context (the kernels are built
// inside the call), over exact bins, an arena and an SVM pool, while
// another goroutine collects garbage and allocates on another queue: the
// operand's block is never handed over before the operation's commands
// are enqueued (ptr's keep, run's KeepAlive). Two trials of each. The
// method catches reuse: an operation written to read x's buffer after
// letting x go (tried during the review, not kept) read the other
// goroutine's 7s in every trial of every pool kind.
func TestHostileS35dDroppedOperandsOfOtherOperations(t *testing.T) {
	kinds := []string{"bins", "arena", "svm"}
	for _, kind := range kinds {
		for _, op := range s35dOps {
			t.Run(kind+"/"+op.name, func(t *testing.T) {
				cltest.Watchdog(t, 60*time.Second)
				for trial := range 2 {
					qa := cltest.Queue(t)
					n := cltest.Size(qa, 256, 4096)
					if kind == "svm" && qa.Context().SVMCapabilities()&cl.SVMCoarseGrainBuffer == 0 {
						t.Skip("no SVM")
					}
					qb := cltest.SecondQueue(t, qa, 0)
					var pool *mempool.Pool
					switch kind {
					case "bins":
						pool = pooltest.New(t, qa)
					case "arena":
						pool = pooltest.New(t, qa, mempool.WithArena())
					case "svm":
						imm, err := allocator.NewImmediateSVM(qa, false)
						require.NoError(t, err)
						pool, err = mempool.NewSVM(imm)
						require.NoError(t, err)
						t.Cleanup(func() { assert.NoError(t, pool.Close()) })
					}
					pinned, err := allocator.NewPinned(qa)
					require.NoError(t, err)
					stagePool, err := mempool.New(pinned)
					require.NoError(t, err)
					t.Cleanup(func() { stagePool.Close() })
					stage, err := array.NewStaging(pinned, stagePool.Allocate)
					require.NoError(t, err)

					var spot atomic.Pointer[s35dSpot]
					var stop, stolen atomic.Bool
					var held []*mempool.PooledBuffer
					var advErr error
					var wg sync.WaitGroup
					wg.Go(func() {
						for !stop.Load() {
							runtime.GC()
							want := spot.Load()
							if want == nil || stolen.Load() {
								time.Sleep(time.Millisecond)
								continue
							}
							y, err := pool.On(qb).Allocate(int64(4 * n))
							if err != nil {
								advErr = err
								return
							}
							held = append(held, y)
							if s35dSpotOf(y) != *want {
								time.Sleep(time.Millisecond)
								continue
							}
							var ev *cl.Event
							if s := y.SVM(); s != nil {
								ev, err = qb.EnqueueSVMMemFill(s, cl.Bytes([]int32{7}), y.Offset(), int64(4*n))
							} else {
								ev, err = qb.EnqueueFillBuffer(y.Base(), cl.Bytes([]int32{7}), y.Offset(), int64(4*n))
							}
							if err == nil {
								err = ev.Wait()
								_ = ev.Release()
							}
							if err != nil {
								advErr = err
								return
							}
							stolen.Store(true)
						}
					})
					got, err := s35dDropped(t, qa, pool.On(qa).Allocate, n, op, stage, &spot)
					stop.Store(true)
					wg.Wait()
					require.NoError(t, advErr)
					require.NoError(t, err)
					require.NoError(t, qa.Finish())
					require.NoError(t, qb.Finish())
					for _, y := range held {
						require.NoError(t, y.Close())
					}
					for range 3 { // x back, if it was not
						runtime.GC()
						time.Sleep(5 * time.Millisecond)
					}
					assert.Equal(t, op.want(n), got, "trial %d: %s of a dropped operand (its block taken on qb: %v)", trial, op.name, stolen.Load())
				}
			})
		}
	}
}
