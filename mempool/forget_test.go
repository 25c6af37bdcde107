package mempool_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// useOnce allocates size bytes on a new queue of f's context, fills them
// there, gives them back and releases the queue: a task with a queue of
// its own. It returns the queue, released.
func useOnce(t *testing.T, f *fixture, size int64) *cl.CommandQueue {
	t.Helper()
	q, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
	require.NoError(t, err)
	b, err := f.pool.On(q).Allocate(size)
	require.NoError(t, err)
	ev, err := q.EnqueueFillBuffer(b.Buffer(), []byte{7}, 0, size)
	require.NoError(t, err)
	require.NoError(t, ev.Release())
	require.NoError(t, b.Close())
	require.NoError(t, q.Release())
	return q
}

// statesAfterNextQueue uses one new queue of q's context on p and
// releases it, and returns how many queue states p keeps then. Tests of
// concurrent tasks bound the states there rather than when the tasks end:
// a forgetting pass that ran long let other tasks register queues
// meanwhile, which count towards the pass the next new queue runs.
func statesAfterNextQueue(t *testing.T, p *mempool.Pool, q *cl.CommandQueue) int {
	t.Helper()
	nq, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
	require.NoError(t, err)
	b, err := p.On(nq).Allocate(512)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.NoError(t, nq.Release())
	return mempool.QueueStates(p)
}

// A program that makes a queue per task and releases it keeps the pool's
// queue states bounded: the pool forgets released queues (s35d: it kept
// every one, a few KiB each, and a miss locked each one's cache). Their
// cached blocks go back to the policy and are reused; their lines of
// Stats.Queues stay.
func TestPoolForgetsReleasedQueues(t *testing.T) {
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			f := newFixture(t, nil, policyOptions(arena)...)
			const tasks = 10 * mempool.ForgetMin
			for range tasks {
				useOnce(t, f, 4096)
				assert.LessOrEqual(t, mempool.QueueStates(f.pool), mempool.ForgetMin+1, "queue states kept")
			}
			s := f.pool.Stats()
			assert.Len(t, s.Queues, tasks+1, "a line per queue, the allocator's too")
			assert.LessOrEqual(t, s.DeviceAllocs, int64(2), "the tasks reused one block")
			var requests, cached int64
			for _, q := range s.Queues {
				requests += q.Requests
				cached += q.Cached
			}
			assert.Equal(t, int64(tasks), requests)
			assert.LessOrEqual(t, cached, int64(mempool.ForgetMin), "forgotten queues cache nothing")
			b, err := f.pool.Allocate(4096)
			require.NoError(t, err)
			require.NoError(t, b.Close())
		})
	}
}

// A buffer allocated on a queue the pool forgot, closed after, goes back
// to the policy and serves a request on another queue with nothing to
// wait for; RecordQueue of a released queue records nothing, and On of
// one is an error.
func TestBufferOfAForgottenQueue(t *testing.T) {
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			f := newFixture(t, nil, policyOptions(arena)...)
			q, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
			require.NoError(t, err)
			b, err := f.pool.On(q).Allocate(4096)
			require.NoError(t, err)
			other, err := f.pool.Allocate(4096)
			require.NoError(t, err)
			require.NoError(t, q.Release())
			for range mempool.ForgetMin + 1 {
				useOnce(t, f, 1<<16)
			}
			require.LessOrEqual(t, mempool.QueueStates(f.pool), mempool.ForgetMin+1)
			lines := len(f.pool.Stats().Queues)
			require.NoError(t, other.RecordQueue(q), "a released queue: nothing to record")
			assert.Len(t, f.pool.Stats().Queues, lines, "RecordQueue of a released queue registers nothing")
			_, err = f.pool.On(q).Allocate(4096)
			assert.ErrorIs(t, err, cl.ErrInvalidCommandQueue, "On of a released queue")
			require.NoError(t, b.Close())
			require.NoError(t, other.Close())
			before := f.pool.Stats()
			again, err := f.pool.Allocate(4096)
			require.NoError(t, err)
			after := f.pool.Stats()
			assert.Equal(t, before.DeviceAllocs, after.DeviceAllocs, "served from what the pool holds")
			assert.Equal(t, before.Queues[0].Barriers, after.Queues[0].Barriers, "no barrier for a forgotten queue")
			require.NoError(t, again.Close())
		})
	}
}

// Goroutines that each make, use and release queues, beside others
// allocating on the pool's queue and reading Stats and Snapshot: nothing
// hangs or races (-race), and every device allocation is freed once (the
// fixture's check).
func TestForgettingQueuesConcurrently(t *testing.T) {
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			f := newFixture(t, nil, policyOptions(arena)...)
			var wg sync.WaitGroup
			errs := make(chan error, 64)
			for g := range 3 {
				wg.Go(func() {
					for i := range 3 * mempool.ForgetMin {
						q, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
						if err != nil {
							errs <- err
							return
						}
						b, err := f.pool.On(q).Allocate(int64(512 << ((g + i) % 6)))
						if err == nil {
							err = b.Close()
						}
						if rerr := q.Release(); err == nil {
							err = rerr
						}
						if err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Go(func() {
				for i := range 200 {
					b, err := f.pool.Allocate(int64(512 << (i % 6)))
					if err == nil {
						err = b.Close()
					}
					if err != nil {
						errs <- err
						return
					}
					if i%20 == 0 {
						_ = f.pool.Stats()
						_ = f.pool.Snapshot()
					}
				}
			})
			ok := withinWork(t, "tasks on queues of their own", wg.Wait)
			require.True(t, ok)
			close(errs)
			for err := range errs {
				assert.NoError(t, err)
			}
			// A pass that ran long may have let the other goroutines
			// register many queues meanwhile (CI: 47 states at the end);
			// they count towards the next pass, which the next new queue
			// runs: each pass kept at most the 2 queues other goroutines
			// were using and the pool's own, so it set the next one at
			// forgetMin, and the next new queue leaves at most forgetMin.
			assert.LessOrEqual(t, statesAfterNextQueue(t, f.pool, f.q), mempool.ForgetMin)
			require.NoError(t, mempool.CheckBlockCounts(f.pool))
		})
	}
}

// Two goroutines asking for one new queue's allocator at once, each time
// the pool is due to forget: the one that forgets may find the other
// registered the queue meanwhile, and the pool still forgets after (it
// once stopped forgetting for good then).
func TestForgettingWhileAnotherRegistersTheQueue(t *testing.T) {
	f := newFixture(t, nil)
	for range 30 * mempool.ForgetMin {
		q, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
		require.NoError(t, err)
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() { f.pool.On(q) })
		}
		wg.Wait()
		require.NoError(t, q.Release())
	}
	assert.LessOrEqual(t, mempool.QueueStates(f.pool), mempool.ForgetMin+1, "queue states kept")
}

// An allocator of a queue released since On is an error, forgotten or
// not (s36a: it handed out blocks for the released queue).
func TestAllocatorOfAReleasedQueue(t *testing.T) {
	f := newFixture(t, nil)
	q, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
	require.NoError(t, err)
	on := f.pool.On(q)
	b, err := on.Allocate(4096)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.NoError(t, q.Release())
	_, err = on.Allocate(4096)
	assert.ErrorIs(t, err, cl.ErrInvalidCommandQueue, "released")
	for range mempool.ForgetMin + 1 {
		useOnce(t, f, 1<<16)
	}
	_, err = on.Allocate(4096)
	assert.ErrorIs(t, err, cl.ErrInvalidCommandQueue, "released and forgotten")
}

// With the sanitizer, two buffers each used on the other's queue are
// closed on goroutines of their own while both queues' owners release
// them: each Close orders its queue after the other's (a marker there,
// held) and checks its block on its own (held). Were a queue held across
// the other's marker, each Release would wait for a hold whose goroutine
// waits for the other Release: nothing may hang.
func TestCrossClosesWhileBothQueuesAreReleased(t *testing.T) {
	f := newFixture(t, nil, mempool.WithSanitizer(), mempool.WithSanitizerOutput(&syncBuffer{}))
	n := 64
	iters := int32(cltest.Size(f.q, 2000, 200000))
	for range 20 {
		a, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
		require.NoError(t, err)
		b, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
		require.NoError(t, err)
		ka, kb := cltest.SlowReadKernel(t, a), cltest.SlowReadKernel(t, b)
		out, err := f.q.Context().CreateBuffer(cl.MemReadWrite, int64(8*n))
		require.NoError(t, err)
		xa, err := f.pool.On(a).Allocate(int64(4 * n))
		require.NoError(t, err)
		xb, err := f.pool.On(b).Allocate(int64(4 * n))
		require.NoError(t, err)
		require.NoError(t, xa.RecordQueue(b))
		require.NoError(t, xb.RecordQueue(a))
		for _, c := range []struct {
			k *cl.Kernel
			q *cl.CommandQueue
			x *mempool.PooledBuffer
		}{{ka, a, xa}, {kb, b, xb}, {ka, a, xb}, {kb, b, xa}} {
			require.NoError(t, c.k.SetArgs(c.x.Buffer(), out, iters))
			require.NoError(t, c.q.EnqueueKernel(c.k, []int{n}, nil))
		}
		require.NoError(t, a.Flush())
		require.NoError(t, b.Flush())
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for _, fn := range []func() error{xa.Close, xb.Close, a.Release, b.Release} {
			wg.Go(func() { errs <- fn() })
		}
		require.True(t, withinWork(t, "closes and releases of two queues at once", wg.Wait))
		close(errs)
		for err := range errs {
			assert.NoError(t, err)
		}
		require.NoError(t, out.Release())
	}
}
