package mempool_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 21: a block allocated on queue A and recorded on queue B
// (RecordQueue), read by a slow kernel on B and closed, then taken by an
// out-of-order queue C and filled there, must not change what the kernel
// reads. The handover waits for two markers, B's and A's (or C's own,
// when the block was allocated on C); POCL's out-of-order queues honour
// only the last of two barriers enqueued one after the other, so a
// barrier per marker let the fill overwrite the block under B's kernel
// (the issue saw 25-50% of results corrupted). Before the handover waited
// for every marker in one barrier, this test corrupted 14 to 19 of its 30
// results on POCL, in every run. From C itself, the handover waits for
// B's marker and C's own, which a barrier per marker got right (C's
// marker, enqueued after the barrier on B's, waits for it too): it checks
// the one barrier with C's own marker in it.
func TestHandoverToOutOfOrderQueueWaitsForEveryQueue(t *testing.T) {
	for _, from := range []string{"in-order queue", "the out-of-order queue itself"} {
		t.Run("from "+from, func(t *testing.T) {
			f := newFixture(t, nil)
			// Oclgrind simulates every work-item: small sizes there and
			// under -short, which check the ordering but hardly race.
			goroutines, trials := 3, cltest.Size(f.q, 2, 10)
			n, iters := 64, cltest.Size(f.q, 100, 300000)
			type queues struct {
				qa, qb, qc *cl.CommandQueue
				k          *cl.Kernel
				out        *cl.Buffer
			}
			qs := make([]queues, goroutines)
			for g := range qs {
				qb := cltest.SecondQueue(t, f.q, 0)
				qc := cltest.SecondQueue(t, f.q, cl.QueueOutOfOrder)
				qa := qc
				if from == "in-order queue" {
					qa = cltest.SecondQueue(t, f.q, 0)
				}
				out, err := f.q.Context().CreateBuffer(cl.MemReadWrite, int64(4*n))
				require.NoError(t, err)
				t.Cleanup(func() { out.Release() })
				qs[g] = queues{qa, qb, qc, cltest.SlowReadKernel(t, qb), out}
			}
			var wg sync.WaitGroup
			results := make([]orderingResult, goroutines)
			for g, q := range qs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[g] = handOverUnderAKernel(f.pool, q.qa, q.qb, q.qc, q.k, q.out, n, iters, trials)
				}()
			}
			wg.Wait()
			var sum orderingResult
			for g, r := range results {
				require.NoError(t, r.err, "goroutine %d", g)
				sum.corrupted += r.corrupted
				sum.reused += r.reused
			}
			assert.Zero(t, sum.corrupted, "results corrupted by a fill on an out-of-order queue after a handover, of %d", goroutines*trials)
			assert.Positive(t, sum.reused, "the test must exercise reuse")
			t.Logf("%d of %d results corrupted; %d blocks reused", sum.corrupted, goroutines*trials, sum.reused)
			for _, st := range f.pool.Stats().Queues {
				assert.GreaterOrEqual(t, st.Ready+st.Barriers, st.Handovers, "every handover waits for a queue at least")
			}
		})
	}
}

// orderingResult is what one goroutine of
// TestHandoverToOutOfOrderQueueWaitsForEveryQueue saw.
type orderingResult struct {
	corrupted, reused int
	err               error
}

// handOverUnderAKernel runs trials of: allocate a block on qa, fill it
// with ones, record it on qb, read it there with k (cltest.SlowRead) into
// out, Close it, then allocate on qc and fill that block with sevens. It
// counts the trials whose kernel read anything but ones, and those whose
// qc block was the one the kernel read.
func handOverUnderAKernel(p *mempool.Pool, qa, qb, qc *cl.CommandQueue, k *cl.Kernel, out *cl.Buffer, n, iters, trials int) (r orderingResult) {
	fail := func(what string, err error) orderingResult {
		r.err = fmt.Errorf("%s: %w", what, err)
		return r
	}
	ones := allOnes(n)
	got := make([]int32, n)
	size := int64(4 * n)
	for range trials {
		x, err := p.On(qa).Allocate(size)
		if err != nil {
			return fail("allocate on A", err)
		}
		if err := qa.WriteBuffer(x.Base(), x.Offset(), cl.Bytes(ones)); err != nil {
			return fail("write", err)
		}
		if err := x.RecordQueue(qb); err != nil {
			return fail("RecordQueue", err)
		}
		if err := k.SetArgs(x.Buffer(), out, int32(iters)); err != nil {
			return fail("kernel arguments", err)
		}
		if err := qb.EnqueueKernel(k, []int{n}, nil); err != nil {
			return fail("kernel", err)
		}
		if err := qb.Flush(); err != nil {
			return fail("flush", err)
		}
		base, off := x.Base(), x.Offset()
		if err := x.Close(); err != nil { // legal right after the enqueue
			return fail("close", err)
		}

		y, err := p.On(qc).Allocate(size)
		if err != nil {
			return fail("allocate on C", err)
		}
		if y.Base() == base && y.Offset() == off {
			r.reused++
		}
		fill, err := qc.EnqueueFillBuffer(y.Base(), cl.Bytes([]int32{7}), y.Offset(), y.Size())
		if err == nil {
			err = errors.Join(fill.Wait(), fill.Release())
		}
		if err := errors.Join(err, y.Close()); err != nil {
			return fail("fill on C", err)
		}

		if err := qb.ReadBuffer(out, 0, cl.Bytes(got)); err != nil {
			return fail("read the results", err)
		}
		for _, v := range got {
			if v != int32(iters) {
				r.corrupted++
				break
			}
		}
	}
	return r
}
