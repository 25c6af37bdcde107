package mempool_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The feature's model: each task makes a queue, allocates on it (On),
// closes its buffers and releases the queue ("A queue may be released
// before the pool: its commands finished, nothing waits for it", doc.go;
// On: "q may be released before the pool"). With tasks on several
// goroutines, one task's request takes a block another task gave back,
// and the pool enqueues a marker on that task's queue (mark: Finished()
// is false, then EnqueueMarker and Flush) while its goroutine releases
// it: the pool's call on a queue its owner is releasing, which package cl
// calls a data race ("releasing an object while another goroutine uses
// it is a data race on it, which no check makes safe"). On POCL it shows
// as an Allocate failing with "mempool: ordering after the commands that
// may use a block: clFlush: CL_INVALID_COMMAND_QUEUE (-36): queue is nil
// or released". No task did anything the docs forbid: each released its
// own queue after closing its own buffers, and never used another's.
// (FreeHeld here stands for any miss: both drain every queue's cache into
// the policy, recording each queue's use.)
func TestHostileS36aAllocateFailsWhileAnotherTaskReleasesItsQueue(t *testing.T) {
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			f := newFixture(t, nil, policyOptions(arena)...)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var errs []error
			for g := range 3 {
				wg.Go(func() {
					for i := range 1000 {
						q, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
						if err != nil {
							return
						}
						a := f.pool.On(q)
						var bs []*mempool.PooledBuffer
						for j := range 3 {
							b, err := a.Allocate(int64(256 << ((g + i + j) % 8)))
							if err != nil {
								mu.Lock()
								errs = append(errs, err)
								mu.Unlock()
								continue
							}
							if ev, err := q.EnqueueFillBuffer(b.Buffer(), []byte{byte(i)}, 0, b.Size()); err == nil {
								_ = ev.Release()
							} else {
								mu.Lock()
								errs = append(errs, fmt.Errorf("fill: %w", err))
								mu.Unlock()
							}
							bs = append(bs, b)
						}
						for _, b := range bs {
							_ = b.Close()
						}
						if i%3 == 0 {
							_ = f.pool.FreeHeld() // drains every queue's cache into the policy, as a miss does
						}
						_ = q.Release()
					}
				})
			}
			require.True(t, withinWork(t, "the tasks", wg.Wait))
			t.Logf("%d Allocates or fills failed", len(errs))
			for _, err := range errs[:min(len(errs), 3)] {
				assert.NoError(t, err, "a task's Allocate or fill failed")
			}
		})
	}
}
