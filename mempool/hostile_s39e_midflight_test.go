package mempool_test

// Hostile review s39e: owners of pooled memory on several queues (two
// out of order) while another goroutine changes the pool under them:
// FreeHeld, a queue's FreeHeld, SetLimit down and up, Stats, Snapshot,
// then StopHolding, then Close of the pool (or the Set) while the owners
// still allocate and close. The doc's Queues contract: "the pool never
// hands its memory to any queue before the commands enqueued before
// Close may have finished with it"; its SVM section: "before it frees
// SVM (FreeHeld, StopHolding, Close, the out-of-memory ladder, or a
// Close after StopHolding), the pool waits on the host for the queues
// whose commands may still use it". No two owning kernels of
// overlapping memory may run at once, and every device allocation is
// freed exactly once (the fixtures' checks).

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s39eAdmin is what the changing goroutine may call; a Pool's or a
// Set's.
type s39eAdmin struct {
	freeHeld  func() error
	freeQueue func(q *cl.CommandQueue) error
	setLimit  func(bytes int64) error
	inspect   func()
	stop      func() error // StopHolding; nil where there is none (a Set)
	close     func() error
}

// s39eChurn runs the owners (l) and, beside them, the changes of a: ops
// rounds of FreeHeld, a queue's FreeHeld, SetLimit (limit/2, then limit)
// and an inspection, StopHolding halfway, and Close at the end, all while
// the owners run. It fails on a hang, an error, or an overlap.
func s39eChurn(t *testing.T, l s39eLoad, a s39eAdmin, limit int64, ops int) {
	t.Helper()
	var owners error
	var closedSeen int
	var admin errSink
	l.done = new(atomic.Int64)
	total := int64(l.rounds * l.workers)
	ok := withinLimit(t, "owners and changes", s39eHangLimit, func() {
		done := make(chan struct{})
		go func() {
			defer close(done)
			owners, closedSeen = s39eWorkers(l)
		}()
		for i := range ops {
			l.await(total*int64(i+1)/int64(2*ops), done) // over the first half
			q := l.queues[i%len(l.queues)]
			switch i % 4 {
			case 0:
				admin.add(a.freeHeld())
			case 1:
				admin.add(a.freeQueue(q))
			case 2:
				if limit > 0 {
					admin.add(a.setLimit(limit / 2))
					admin.add(a.setLimit(limit))
				}
			case 3:
				a.inspect()
			}
			if i == ops/2 && a.stop != nil {
				admin.add(a.stop())
			}
		}
		l.await(total*3/4, done)
		admin.add(a.close())
		<-done
	})
	if !ok {
		return
	}
	require.NoError(t, owners)
	require.NoError(t, admin.err())
	bad := s39eBads(t, l.bad, l.queues...)
	assert.Zero(t, bad, "elements where an owning kernel saw another owner's write")
	t.Logf("%d goroutines met the closed pool", closedSeen)
}

func s39eQueues(t *testing.T, q *cl.CommandQueue) []*cl.CommandQueue {
	t.Helper()
	return append([]*cl.CommandQueue{q}, s35bQueues(t, q, 5, 3)...) // 2 out of order
}

// A pool of buffers, every policy, changed under its owners.
func TestHostileS39eBufferPoolChangedUnderOwners(t *testing.T) {
	for _, pol := range s35bPolicies {
		t.Run(pol.name, func(t *testing.T) {
			q := cltest.Queue(t)
			p := pooltest.New(t, q, append([]mempool.Option{mempool.WithLimit(s39eLimit)}, pol.opts...)...)
			s39ePoolChurn(t, q, p, 39)
		})
	}
}

// The same over an SVM pool (coarse grain): here a segment freed too
// early is freed under a running kernel (clSVMFree does not wait), and
// the next clSVMAlloc may hand its address to another owner.
func TestHostileS39eSVMPoolChangedUnderOwners(t *testing.T) {
	for _, pol := range s35bPolicies {
		t.Run(pol.name, func(t *testing.T) {
			f := newSVMFixture(t, false, nil, append([]mempool.Option{mempool.WithLimit(s39eLimit)}, pol.opts...)...)
			s39ePoolChurn(t, f.q, f.pool, 3939)
		})
	}
}

// s39eLimit is the limit of the pools changed under their owners.
const s39eLimit = 2 << 20

// s39ePoolChurn is s39eChurn of owners on queues of q's context over p,
// which the admin changes with p's own methods.
func s39ePoolChurn(t *testing.T, q *cl.CommandQueue, p *mempool.Pool, seed uint64) {
	queues := s39eQueues(t, q)
	own := newS35bOwners(t, q)
	l := s39eLoad{
		queues: queues, bad: own.bad, kernel: func() *cl.Kernel { return own.kernel(t) },
		alloc: func(q *cl.CommandQueue, size int64) (*mempool.PooledBuffer, error) {
			return p.On(q).Allocate(size)
		},
		sizes: []int64{512, 4096, 8192, 65536, 256 << 10}, iters: cltest.Size(q, 50, 30000),
		rounds: cltest.Size(q, 8, 60), workers: 4, record: true, seed: seed,
	}
	s39eChurn(t, l, s39eAdmin{
		freeHeld:  p.FreeHeld,
		freeQueue: func(q *cl.CommandQueue) error { return p.On(q).FreeHeld() },
		setLimit:  p.SetLimit,
		inspect:   func() { pooltest.CheckStats(t, p.Stats()); _ = p.Snapshot() },
		stop:      p.StopHolding,
		close:     p.Close,
	}, s39eLimit, cltest.Size(q, 8, 40))
}

// A Set of one context: Set.On routes each queue to the context's pool;
// Set.SetLimit, Set.FreeHeld, Set.Stats and Set.Close change it under the
// owners. Close of the Set while they run: later requests fail with
// ErrPoolClosed, blocks closed after it are freed, and the device sees
// every allocation freed once.
func TestHostileS39eSetChangedUnderOwners(t *testing.T) {
	for _, pol := range s35bPolicies {
		t.Run(pol.name, func(t *testing.T) {
			q := cltest.Queue(t)
			queues := s39eQueues(t, q)
			own := newS35bOwners(t, q)
			const limit = s39eLimit
			var count atomic.Pointer[allocator.Counting]
			set := mempool.NewSet(func(q *cl.CommandQueue) (allocator.Allocator, error) {
				imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
				if err != nil {
					return nil, err
				}
				c := allocator.NewCounting(imm)
				count.Store(c)
				return c, nil
			}, append([]mempool.Option{mempool.WithLimit(limit)}, pol.opts...)...)
			t.Cleanup(func() {
				require.NoError(t, set.Close())
				s := set.Stats()
				assert.Zero(t, s.ActiveBlocks, "blocks left open")
				assert.Zero(t, s.ManagedBytes)
				if h := count.Load(); h != nil {
					c := h.Stats()
					assert.Zero(t, c.Live, "device buffers never freed")
					assert.Zero(t, c.BadFrees)
					assert.Equal(t, c.Allocs, s.DeviceAllocs)
					assert.Equal(t, c.Frees, s.DeviceFrees)
				}
			})
			l := s39eLoad{
				queues: queues, bad: own.bad, kernel: func() *cl.Kernel { return own.kernel(t) },
				alloc: func(q *cl.CommandQueue, size int64) (*mempool.PooledBuffer, error) {
					return set.On(q).Allocate(size)
				},
				sizes: []int64{512, 4096, 8192, 65536, 256 << 10}, iters: cltest.Size(q, 50, 30000),
				rounds: cltest.Size(q, 8, 60), workers: 4, record: true, seed: 393939,
			}
			ctx := q.Context()
			s39eChurn(t, l, s39eAdmin{
				freeHeld:  set.FreeHeld,
				freeQueue: func(q *cl.CommandQueue) error { return ignoreClosed(set.On(q).FreeHeld()) },
				setLimit:  func(n int64) error { return ignoreClosed(set.SetLimit(ctx, n)) },
				inspect: func() {
					for _, d := range set.Stats().Devices {
						pooltest.CheckStats(t, d.Stats)
					}
				},
				close: set.Close,
			}, limit, cltest.Size(q, 8, 40))
		})
	}
}

func ignoreClosed(err error) error {
	if errors.Is(err, mempool.ErrPoolClosed) {
		return nil
	}
	return err
}
