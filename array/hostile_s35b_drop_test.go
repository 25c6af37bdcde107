package array_test

// Hostile review s35b: queue-ordered reuse of the blocks under arrays
// that the program drops (no Close), which array's doc allows: "Arrays
// over a pool that are dropped without Close come back after garbage
// collection, as pooled buffers do".

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s35bScaleOfDropped makes x = n ones on q, publishes its buffer in xb
// and returns Scale(2, x) with x dropped: the caller keeps no reference
// to x, which is how a program writes array.Scale(2, tmp) for a tmp it
// never uses again (and never closes, relying on the garbage collector).
//
//go:noinline
func s35bScaleOfDropped(t *testing.T, q *cl.CommandQueue, alloc func(int64) (*mempool.PooledBuffer, error), n int, xb *atomic.Pointer[cl.Buffer]) (*array.Array[int32], error) {
	ones := make([]int32, n)
	for i := range ones {
		ones[i] = 1
	}
	x, err := array.FromHost(q, ones, alloc)
	require.NoError(t, err)
	require.NoError(t, q.Finish())
	xb.Store(x.Buffer())
	return array.Scale(2, x) // x is dead from here on, for the garbage collector
}

// FAILED before its fix (session 35; defect in array: no operation keeps its operands reachable until
// its kernel is enqueued). The package doc allows dropping arrays
// ("Arrays over a pool that are dropped without Close come back after
// garbage collection, as pooled buffers do"), and mempool's PooledBuffer
// doc asks that a buffer "stay reachable while the device uses its
// buffer": here the array package itself lets go of it, inside Scale,
// before the kernel that reads it is even enqueued. Scale's closure
// (array/ops.go, enqueueScale) evaluates x.ptr(), which holds the
// *cl.Buffer but not the PooledBuffer, and x is dead from there on while
// run (array/kernels.go:216) looks up, or builds, the kernels and takes
// their lock. Add, Tridiag and Fill (a write into memory given back) let
// their operands go the same way; Sum and Copy happened to keep theirs.
//
// Scale(2, x), with x dropped by the caller, is the first operation on a
// new context, so run builds the kernels first (tens of ms on POCL, under
// the process-wide lock built.mu, which any goroutine building kernels
// for another context or element type holds as long). Meanwhile another
// goroutine of the program collects garbage (any allocation can) and
// allocates on queue qb: x's PooledBuffer, unreachable, is finalized and
// goes back to the pool with qa's use recorded at that moment (no command
// of Scale enqueued yet); qb is handed the block after a marker on qa
// that covers nothing of Scale, and fills it with 7s. Scale's kernel,
// enqueued after, reads 7s: z holds 14s, not 2s. Observed on POCL: 3 of
// 3 trials in every run.
//
// Expected: z holds 2s: an operation keeps its operands until its
// kernels are enqueued (a runtime.KeepAlive of the operands after run, in
// every operation, would do).
func TestHostileS35bDroppedOperandReusedBeforeItsKernel(t *testing.T) {
	s35bDroppedOperand(t, false)
}

// FAILED before its fix (session 35; the same defect as TestHostileS35bDroppedOperandReusedBeforeItsKernel),
// with the kernels of Scale built already: every operation first takes
// the process-wide lock built.mu (array/kernels.go:149, kernelsFor), which
// a goroutine building the kernels of another context or element type
// holds for the whole build. Here another goroutine makes its first int64
// array on a context of its own while Scale(2, x) waits for that lock
// with x dropped: x's block goes back to the pool, qb takes and fills it,
// and Scale reads 7s. Observed on POCL: 3 of 3 trials in every run.
func TestHostileS35bDroppedOperandReusedWhileAnotherBuilds(t *testing.T) {
	s35bDroppedOperand(t, true)
}

// s35bDroppedOperand runs the dropped-operand trials; warm: Scale's
// kernels are built already, and Scale waits instead for a build of
// another goroutine's.
func s35bDroppedOperand(t *testing.T, warm bool) {
	const n = 4096
	bad := 0
	trials := 3
	for trial := range trials {
		qa := cltest.Queue(t) // a context of its own: no array kernels built there yet
		qb := cltest.SecondQueue(t, qa, 0)
		pool := pooltest.New(t, qa) // drop safety on, the default
		var building chan struct{}
		var qz *cl.CommandQueue
		if warm {
			w, err := array.Full[int32](qa, 16, 1, pool.On(qa).Allocate)
			require.NoError(t, err)
			w2, err := array.Scale(2, w) // Scale's kernels for int32 on qa's context: built
			require.NoError(t, err)
			require.NoError(t, w2.Close())
			require.NoError(t, w.Close())
			qz = cltest.Queue(t) // another context, where int64 kernels are not built yet
			building = make(chan struct{})
		}
		var xb atomic.Pointer[cl.Buffer]
		var stop, stolen atomic.Bool
		var held []*mempool.PooledBuffer
		var wg sync.WaitGroup
		var advErr error
		wg.Go(func() { // the rest of the program: collects, and allocates on qb
			for !stop.Load() {
				runtime.GC()
				want := xb.Load()
				if want == nil || stolen.Load() {
					time.Sleep(time.Millisecond)
					continue
				}
				y, err := pool.On(qb).Allocate(4 * n)
				if err != nil {
					advErr = err
					return
				}
				if y.Base() != want {
					held = append(held, y) // not x's block: keep it, so that the next request cannot get it again
					time.Sleep(time.Millisecond)
					continue
				}
				fill, err := qb.EnqueueFillBuffer(y.Base(), cl.Bytes([]int32{7}), y.Offset(), 4*n)
				if err == nil {
					err = fill.Wait()
					_ = fill.Release()
				}
				if err != nil {
					advErr = err
					return
				}
				stolen.Store(true)
				held = append(held, y)
			}
		})
		var buildErr error
		if warm {
			wg.Go(func() { // another part of the program: its first int64 array
				close(building)
				z, err := array.Zeros[int64](qz, 16, array.Alloc(nil))
				if err == nil {
					err = z.Close()
				}
				buildErr = err
			})
			<-building
			time.Sleep(2 * time.Millisecond) // it holds built.mu, building
		}
		t0 := time.Now()
		z, err := s35bScaleOfDropped(t, qa, pool.On(qa).Allocate, n, &xb)
		took := time.Since(t0)
		stop.Store(true)
		wg.Wait()
		require.NoError(t, advErr)
		require.NoError(t, buildErr)
		require.NoError(t, err)
		got, err := z.Get()
		require.NoError(t, err)
		require.NoError(t, z.Close())
		require.NoError(t, qb.Finish())
		for _, y := range held {
			require.NoError(t, y.Close())
		}
		for range 3 { // x is back, if it was not
			runtime.GC()
			time.Sleep(10 * time.Millisecond)
		}
		wrong := 0
		for _, v := range got {
			if v != 2 {
				wrong++
			}
		}
		if wrong > 0 {
			bad++
			t.Logf("trial %d: %d of %d elements of Scale(2, ones) are not 2 (got[0] %d; x's block taken on qb: %v; Scale took %v)", trial, wrong, n, got[0], stolen.Load(), took)
		}
	}
	assert.Zero(t, bad, "Scale read another owner's data in %d of %d trials", bad, trials)
}
