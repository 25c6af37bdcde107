package cl_test

import (
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// subBufferConcurrentCases are the shapes mempool's arena gives NVIDIA's
// driver when several goroutines use one segment, each on a queue of its
// own: sub-buffers of one parent made, used and released at once on
// several threads. mempool's TestHostileS36aAllocateFailsWhileAnotherTaskReleasesItsQueue
// crashed there (SIGSEGV in clEnqueueFillBuffer, two goroutines inside
// it, session 44); these cases tell which shape the driver cannot take.
var subBufferConcurrentCases = []childCase{
	{"disjoint slots, a queue each", nil, func(t *testing.T, q *cl.CommandQueue) { subConcurrent(t, q, false, true) }},
	{"slots shared, each range released after its fill", nil, func(t *testing.T, q *cl.CommandQueue) { subConcurrent(t, q, true, true) }},
	{"slots shared, the next fill waits for the last", nil, func(t *testing.T, q *cl.CommandQueue) { subConcurrent(t, q, true, false) }},
}

// TestSubBufferConcurrentPatterns runs each concurrent pattern in a child
// process (see TestSubBufferPatterns).
func TestSubBufferConcurrentPatterns(t *testing.T) {
	runInChildren(t, "TestSubBufferConcurrentPatterns", "subconc:", subBufferConcurrentCases)
}

// subConcurrent runs three goroutines, each with a queue of its own, that
// make a sub-buffer of one parent, fill it and release it, 300 times. Each
// range lies in a 64 KiB slot: a goroutine's own (shared false), or any
// slot free at the time (shared true), at an offset that moves by 4 KiB
// each time, so that a slot's successive ranges partly overlap, never
// while both are live. If waitFill, a goroutine waits for its fill before
// it releases the sub-buffer and gives the slot back; else the slot keeps
// the fill's event, and the next fill in it waits for that event, as a
// pool orders a block's reuse on another queue.
func subConcurrent(t *testing.T, q *cl.CommandQueue, shared, waitFill bool) {
	p := subParent(t, q)
	const slots, slot = 16, 65536
	var mu sync.Mutex
	free := make([]bool, slots)
	last := make([]*cl.Event, slots)
	for i := range free {
		free[i] = true
	}
	take := func(g int, rng *rand.Rand) int {
		for {
			mu.Lock()
			i := g
			if shared {
				i = rng.IntN(slots)
			}
			if free[i] {
				free[i] = false
				mu.Unlock()
				return i
			}
			mu.Unlock()
		}
	}
	var wg sync.WaitGroup
	for g := range 3 {
		gq, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
		require.NoError(t, err)
		wg.Go(func() {
			defer func() { assert.NoError(t, gq.Release()) }()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range 300 {
				k := take(g, rng)
				s, err := p.CreateSubBuffer(cl.MemReadWrite, int64(k)*slot+int64(i%4)*4096, slot/2)
				if !assert.NoError(t, err) {
					return
				}
				var wait []*cl.Event
				if last[k] != nil {
					wait = append(wait, last[k])
				}
				ev, err := gq.EnqueueFillBuffer(s, []byte{byte(g), byte(i)}, 0, s.Size(), wait...)
				assert.NoError(t, err)
				if last[k] != nil {
					assert.NoError(t, last[k].Release())
					last[k] = nil
				}
				if waitFill && ev != nil {
					assert.NoError(t, ev.Wait())
					assert.NoError(t, ev.Release())
					ev = nil
				}
				assert.NoError(t, gq.Flush())
				assert.NoError(t, s.Release())
				mu.Lock()
				last[k], free[k] = ev, true
				mu.Unlock()
			}
			assert.NoError(t, gq.Finish())
		})
	}
	wg.Wait()
	for _, ev := range last {
		if ev != nil {
			assert.NoError(t, ev.Release())
		}
	}
}
