package mempool_test

// Hostile tests (s32c) of queue ordering with goroutines on several
// queues at once: a block closed right after a slow kernel is enqueued
// must not be overwritten by another queue's command before the kernel
// is done.

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Holds (passing exploration): three goroutines, on in-order queues A
// and B and out-of-order queue C, each loop: allocate X, write ones,
// enqueue a slow kernel reading X, Close X at once, then allocate,
// fill with 7 and close a few blocks of random sizes (taking, in the
// arena, splits and merges of blocks the other queues gave back), and
// check that the kernel read only ones. A RecordQueue of another
// goroutine's queue is added on some X, with the kernel on that queue.
func TestHostileS32cConcurrentQueuesNeverOverwriteAKernelsInput(t *testing.T) {
	for _, pol := range []struct {
		name string
		opts []mempool.Option
	}{
		{"bins", nil},
		{"arena", []mempool.Option{mempool.WithArena()}},
		{"arena/nocache", []mempool.Option{mempool.WithArena(), mempool.WithoutQueueCaches()}},
	} {
		t.Run(pol.name, func(t *testing.T) {
			q := cltest.Queue(t)
			queues := []*cl.CommandQueue{cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, cl.QueueOutOfOrder)}
			// kernels[g][h]: goroutine g's kernel, built for queue h's use.
			kernels := make([][]*cl.Kernel, len(queues))
			outs := make([]*cl.Buffer, len(queues))
			n := 64
			iters := cltest.Size(q, 100, 300000)
			for g := range queues {
				for range queues {
					kernels[g] = append(kernels[g], cltest.SlowReadKernel(t, q))
				}
				b, err := q.Context().CreateBuffer(cl.MemReadWrite, int64(4*n))
				require.NoError(t, err)
				t.Cleanup(func() { b.Release() })
				outs[g] = b
			}
			p := pooltest.New(t, q, pol.opts...)
			rounds := cltest.Size(q, 4, 25)
			sizes := []int64{4096, 8192, 65536, 1 << 20, 2 << 20}
			var wg sync.WaitGroup
			errs := make(chan error, 3*rounds+3)
			var mu sync.Mutex
			corrupted, total := 0, 0
			for g, qu := range queues {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(g), 7))
					on := p.On(qu)
					fail := func(err error) bool {
						if err != nil {
							errs <- fmt.Errorf("goroutine %d: %w", g, err)
							return true
						}
						return false
					}
					for range rounds {
						x, err := on.Allocate(sizes[r.IntN(len(sizes))])
						if fail(err) {
							return
						}
						if fail(qu.WriteBuffer(x.Base(), x.Offset(), cl.Bytes(allOnes(n)))) {
							return
						}
						if fail(qu.Finish()) { // the write done, on C too
							return
						}
						kq, h := qu, g
						if r.IntN(3) == 0 { // the kernel on another goroutine's queue
							h = (g + 1 + r.IntN(len(queues)-1)) % len(queues)
							kq = queues[h]
							if fail(x.RecordQueue(kq)) {
								return
							}
						}
						k := kernels[g][h]
						if fail(k.SetArgs(x.Buffer(), outs[g], int32(iters))) {
							return
						}
						if fail(kq.EnqueueKernel(k, []int{n}, nil)) {
							return
						}
						if fail(kq.Flush()) {
							return
						}
						if fail(x.Close()) {
							return
						}
						for range 1 + r.IntN(4) {
							y, err := on.Allocate(sizes[r.IntN(len(sizes))])
							if fail(err) {
								return
							}
							ev, err := qu.EnqueueFillBuffer(y.Base(), cl.Bytes([]int32{7}), y.Offset(), y.Size())
							if fail(err) {
								return
							}
							_ = ev.Release()
							if fail(y.Close()) {
								return
							}
						}
						if fail(qu.Finish()) || fail(kq.Finish()) {
							return
						}
						got := make([]int32, n)
						if fail(q.ReadBuffer(outs[g], 0, cl.Bytes(got))) {
							return
						}
						bad := false
						for _, v := range got {
							if v != int32(iters) {
								bad = true
							}
						}
						mu.Lock()
						total++
						if bad {
							corrupted++
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			s := p.Stats()
			var handovers int64
			for _, qs := range s.Queues {
				handovers += qs.Handovers
			}
			t.Logf("%d kernels, %d corrupted; %d handovers, %d hits, %d misses", total, corrupted, handovers, s.Hits, s.Misses)
			assert.Zero(t, corrupted, "a kernel read a block another command overwrote, in %d of %d", corrupted, total)
		})
	}
}
