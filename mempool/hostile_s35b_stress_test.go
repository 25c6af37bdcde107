package mempool_test

import (
	"errors"
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

// s35bOwn is a kernel that owns x[off .. off+n) while it runs: it writes
// v there first, then spins iters times checking that v is still there,
// and counts one in bad[0] per element where it found anything else: a
// kernel of another owner of the memory ran at the same time (the pool
// handed the block over before this one was done with it, or this one
// started before the previous owner's was done).
const s35bOwn = `
kernel void own(volatile global int *x, long off, int v, int iters, global int *bad) {
	int i = get_global_id(0);
	x[off + i] = v;
	int wrong = 0;
	for (int k = 0; k < iters; k++) wrong |= x[off + i] != v;
	if (wrong || x[off + i] != v) atomic_inc(bad);
}`

// s35bOwners builds s35bOwn and gives each caller a kernel of its own.
type s35bOwners struct {
	prog *cl.Program
	bad  *cl.Buffer
}

func newS35bOwners(t *testing.T, q *cl.CommandQueue) *s35bOwners {
	t.Helper()
	prog, err := q.Context().BuildProgram(s35bOwn, "")
	require.NoError(t, err)
	t.Cleanup(func() { prog.Release() })
	bad, err := q.Context().CreateBuffer(cl.MemReadWrite, 4)
	require.NoError(t, err)
	t.Cleanup(func() { bad.Release() })
	require.NoError(t, q.WriteBuffer(bad, 0, cl.Bytes([]int32{0})))
	return &s35bOwners{prog: prog, bad: bad}
}

func (o *s35bOwners) kernel(t *testing.T) *cl.Kernel {
	t.Helper()
	k, err := o.prog.Kernel("own")
	require.NoError(t, err)
	t.Cleanup(func() { k.Release() })
	return k
}

// run enqueues k on q over the n ints at byte off of base, and flushes.
func (o *s35bOwners) run(k *cl.Kernel, q *cl.CommandQueue, base *cl.Buffer, off int64, n int, v int32, iters int) error {
	if err := k.SetArgs(base, off/4, v, int32(iters), o.bad); err != nil {
		return err
	}
	if err := q.EnqueueKernel(k, []int{n}, nil); err != nil {
		return err
	}
	return q.Flush()
}

func (o *s35bOwners) bads(t *testing.T, q *cl.CommandQueue, queues ...*cl.CommandQueue) int32 {
	t.Helper()
	for _, qq := range queues {
		require.NoError(t, qq.Finish())
	}
	got := []int32{0}
	require.NoError(t, q.ReadBuffer(o.bad, 0, cl.Bytes(got)))
	return got[0]
}

// PASSES (exploration). Four goroutines share eight queues (two out of
// order); each loop takes a block of a random size on a random queue
// (or through pool.Allocate, the allocator's queue), runs an owning
// kernel over it there (sometimes on another queue, after RecordQueue),
// and closes it at once; now and then a goroutine calls FreeHeld, a
// queue's FreeHeld, or lowers and raises the limit (the ladder's drains
// and frees). Under a limit of a few segments, so that requests on one
// queue take what others gave back (arena: split and merged). No two
// owning kernels of overlapping memory may run at once.
func TestHostileS35bOwnersNeverOverlap(t *testing.T) {
	for _, pol := range s35bPolicies {
		t.Run(pol.name, func(t *testing.T) {
			q := cltest.Queue(t)
			queues := s35bQueues(t, q, 8, 4)
			own := newS35bOwners(t, q)
			const limit = 2 << 20
			p := pooltest.New(t, q, append([]mempool.Option{mempool.WithLimit(limit)}, pol.opts...)...)
			iters := cltest.Size(q, 50, 50000)
			rounds := cltest.Size(q, 5, 30)
			sizes := []int64{512, 4096, 8192, 65536, 256 << 10, 1 << 20}
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := range 4 {
				ks := map[*cl.CommandQueue]*cl.Kernel{}
				for _, qq := range append([]*cl.CommandQueue{q}, queues...) {
					ks[qq] = own.kernel(t)
				}
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(g), 35))
					fail := func(err error) bool {
						if err != nil {
							errs <- fmt.Errorf("goroutine %d: %w", g, err)
							return true
						}
						return false
					}
					for i := range rounds {
						size := sizes[r.IntN(len(sizes))]
						qq := queues[r.IntN(len(queues))]
						var b *mempool.PooledBuffer
						var err error
						if r.IntN(6) == 0 {
							qq = q
							b, err = p.Allocate(size)
						} else {
							b, err = p.On(qq).Allocate(size)
						}
						if errors.Is(err, mempool.ErrOutOfMemory) {
							continue // the others hold the room, split: legal under the limit
						}
						if fail(err) {
							return
						}
						kq := qq
						if r.IntN(4) == 0 {
							kq = queues[r.IntN(len(queues))]
							if fail(b.RecordQueue(kq)) {
								return
							}
							// The block is qq's: kq waits for qq first (the
							// user's ordering, as the README's example does).
							m, err := qq.EnqueueMarker()
							if fail(err) {
								return
							}
							err = qq.Flush()
							if err == nil {
								err = kq.EnqueueBarrier(m)
							}
							_ = m.Release()
							if fail(err) {
								return
							}
						}
						n := int(min(size, 4096) / 4)
						if fail(own.run(ks[kq], kq, b.Base(), b.Offset(), n, int32(g<<20|i), iters)) {
							return
						}
						if fail(b.Close()) {
							return
						}
						switch r.IntN(20) {
						case 0:
							if fail(p.FreeHeld()) {
								return
							}
						case 1:
							if fail(p.On(qq).FreeHeld()) {
								return
							}
						case 2:
							if fail(p.SetLimit(limit / 2)) {
								return
							}
							if fail(p.SetLimit(limit)) {
								return
							}
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				require.NoError(t, err)
			}
			bad := own.bads(t, q, append(queues, q)...)
			assert.Zero(t, bad, "elements where an owning kernel saw another owner's write")
			s := p.Stats()
			var handovers, barriers int64
			for _, qs := range s.Queues {
				handovers += qs.Handovers
				barriers += qs.Barriers
			}
			t.Logf("%d hits, %d handovers, %d barriers, %d OOM retries, %d device allocs", s.Hits, handovers, barriers, s.OOMRetries, s.DeviceAllocs)
		})
	}
}
