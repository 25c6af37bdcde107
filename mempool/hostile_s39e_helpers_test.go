package mempool_test

// Hostile review s39e: helpers shared by the s39e tests of this package.
// The owning kernel is s35bOwn (hostile_s35b_stress_test.go): it writes
// its value, then spins checking that no other owner of the memory wrote
// meanwhile, and counts every element where one did.

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/require"
)

// s39eHangLimit bounds every wait of the s39e tests: a hang fails the
// test (with every goroutine's stack) instead of hanging the run.
const s39eHangLimit = 60 * time.Second

// s39eOwn enqueues the owning kernel k on q over the first n ints of b
// (a buffer's block, or an SVM pool's), with value v, and flushes q.
func s39eOwn(k *cl.Kernel, q *cl.CommandQueue, b *mempool.PooledBuffer, n int, v int32, iters int, bad *cl.Buffer) error {
	var off int64
	if svm := b.SVM(); svm != nil {
		if err := k.SetArgSVMPointer(0, svm, b.Offset()); err != nil {
			return err
		}
	} else {
		if err := k.SetArg(0, b.Base()); err != nil {
			return err
		}
		off = b.Offset() / 4
	}
	for i, v := range []any{off, v, int32(iters), bad} {
		if err := k.SetArg(i+1, v); err != nil {
			return err
		}
	}
	if err := q.EnqueueKernel(k, []int{n}, nil); err != nil {
		return err
	}
	return q.Flush()
}

// s39eFollow makes kq wait for the commands enqueued on q so far (a
// marker there, a barrier on kq): the user's ordering of a block of q
// used on kq.
func s39eFollow(q, kq *cl.CommandQueue) error {
	m, err := q.EnqueueMarker()
	if err != nil {
		return err
	}
	err = q.Flush()
	if err == nil {
		err = kq.EnqueueBarrier(m)
	}
	return errors.Join(err, m.Release())
}

// s39eLoad is what the workers of s39eWorkers do.
type s39eLoad struct {
	queues   []*cl.CommandQueue
	alloc    func(q *cl.CommandQueue, size int64) (*mempool.PooledBuffer, error)
	kernel   func() *cl.Kernel // a kernel of s35bOwn for one goroutine
	bad      *cl.Buffer
	sizes    []int64
	iters    int
	rounds   int
	workers  int
	record   bool // now and then run the kernel on another queue, after RecordQueue
	seed     uint64
	done     *atomic.Int64 // rounds done by every goroutine, if not nil
	noKernel bool          // allocate and close only
}

// s39eAwait waits (bounded by the caller's s39eWithin) until the owners
// of l have done n rounds in all, or have all ended (ended closed).
func (l s39eLoad) await(n int64, ended <-chan struct{}) {
	for l.done != nil && l.done.Load() < n {
		select {
		case <-ended:
			return
		case <-time.After(time.Millisecond):
		}
	}
}

// s39eWorkers runs l.workers goroutines, each l.rounds times: allocate
// a block on a random queue, run an owning kernel over it (maybe on
// another queue, RecordQueue'd), close it at once. A request refused for
// memory is skipped; one refused because the pool is closed ends the
// goroutine. It returns the errors, joined, and the closed refusals seen.
func s39eWorkers(l s39eLoad) (error, int) {
	var wg sync.WaitGroup
	var sink errSink
	var mu sync.Mutex
	closed := 0
	for g := range l.workers {
		ks := map[*cl.CommandQueue]*cl.Kernel{}
		for _, q := range l.queues {
			if !l.noKernel {
				ks[q] = l.kernel()
			}
		}
		wg.Go(func() {
			r := rand.New(rand.NewPCG(l.seed, uint64(g)))
			for i := range l.rounds {
				if l.done != nil {
					l.done.Add(1)
				}
				size := l.sizes[r.IntN(len(l.sizes))]
				q := l.queues[r.IntN(len(l.queues))]
				b, err := l.alloc(q, size)
				if errors.Is(err, mempool.ErrPoolClosed) {
					mu.Lock()
					closed++
					mu.Unlock()
					return
				}
				if errors.Is(err, mempool.ErrOutOfMemory) {
					continue
				}
				if err != nil {
					sink.add(fmt.Errorf("goroutine %d: allocate: %w", g, err))
					return
				}
				kq := q
				if l.record && r.IntN(4) == 0 {
					kq = l.queues[r.IntN(len(l.queues))]
					if err := b.RecordQueue(kq); err != nil {
						sink.add(fmt.Errorf("goroutine %d: RecordQueue: %w", g, err))
						_ = b.Close()
						return
					}
					if err := s39eFollow(q, kq); err != nil {
						sink.add(err)
						_ = b.Close()
						return
					}
				}
				n := int(min(size, 4096) / 4)
				if l.noKernel {
					// nothing to run
				} else if err := s39eOwn(ks[kq], kq, b, n, int32(g<<20|i+1), l.iters, l.bad); err != nil {
					sink.add(fmt.Errorf("goroutine %d: kernel: %w", g, err))
				}
				if err := b.Close(); err != nil && !errors.Is(err, mempool.ErrPanicked) {
					sink.add(fmt.Errorf("goroutine %d: Close: %w", g, err))
				}
			}
		})
	}
	wg.Wait()
	return sink.err(), closed
}

// s39eBads finishes every queue and reads the owners' bad counter.
func s39eBads(t *testing.T, bad *cl.Buffer, queues ...*cl.CommandQueue) int32 {
	t.Helper()
	for _, q := range queues {
		require.NoError(t, q.Finish())
	}
	got := []int32{0}
	require.NoError(t, queues[0].ReadBuffer(bad, 0, cl.Bytes(got)))
	return got[0]
}
