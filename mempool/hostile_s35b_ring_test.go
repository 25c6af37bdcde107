package mempool_test

// Hostile review s35b: queue-ordered reuse, checked by what the kernels
// of every previous owner of a block leave in it. Helpers shared by the
// s35b tests of this package.

import (
	"fmt"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s35bLate is a kernel that reads x[off+i] first, spins iters times on it
// (volatile: no read is hoisted), and only then writes v there: a command
// that uses the block long after it was enqueued and writes last. If what
// it read first is not expect (expect -1: anything goes), it counts one
// in bad[0].
const s35bLate = `
kernel void late(volatile global int *x, long off, int v, int expect, int iters, global int *bad) {
	int i = get_global_id(0);
	int first = x[off + i];
	int acc = 0;
	for (int k = 0; k < iters; k++) acc += x[off + i];
	if (expect != -1 && first != expect) atomic_inc(bad);
	x[off + i] = v + (acc & 0);
}`

// s35bRig is a context's late kernel (one per queue, so that goroutines
// never share one) and its bad counter.
type s35bRig struct {
	ks  map[*cl.CommandQueue]*cl.Kernel
	bad *cl.Buffer
	n   int
}

func newS35bRig(t *testing.T, q *cl.CommandQueue, n int, queues ...*cl.CommandQueue) *s35bRig {
	t.Helper()
	prog, err := q.Context().BuildProgram(s35bLate, "")
	require.NoError(t, err)
	t.Cleanup(func() { prog.Release() })
	r := &s35bRig{ks: map[*cl.CommandQueue]*cl.Kernel{}, n: n}
	for _, qq := range append([]*cl.CommandQueue{q}, queues...) {
		if r.ks[qq] != nil {
			continue
		}
		k, err := prog.Kernel("late")
		require.NoError(t, err)
		t.Cleanup(func() { k.Release() })
		r.ks[qq] = k
	}
	r.bad, err = q.Context().CreateBuffer(cl.MemReadWrite, 4)
	require.NoError(t, err)
	t.Cleanup(func() { r.bad.Release() })
	require.NoError(t, q.WriteBuffer(r.bad, 0, cl.Bytes([]int32{0})))
	return r
}

// late enqueues the late kernel on q over b's first n ints: it expects
// expect there, and writes v last. It flushes q.
func (r *s35bRig) late(t *testing.T, q *cl.CommandQueue, b *mempool.PooledBuffer, v, expect int32, iters int) {
	t.Helper()
	k := r.ks[q]
	require.NotNil(t, k, "no kernel for the queue")
	require.NoError(t, k.SetArgs(b.Base(), b.Offset()/4, v, expect, int32(iters), r.bad))
	require.NoError(t, q.EnqueueKernel(k, []int{r.n}, nil))
	require.NoError(t, q.Flush())
}

// bads reads the bad counter (through q, after finishing every queue).
func (r *s35bRig) bads(t *testing.T, q *cl.CommandQueue, queues ...*cl.CommandQueue) int32 {
	t.Helper()
	for _, qq := range queues {
		require.NoError(t, qq.Finish())
	}
	got := []int32{0}
	require.NoError(t, q.ReadBuffer(r.bad, 0, cl.Bytes(got)))
	return got[0]
}

// readInts reads n ints of b's block through q (blocking, after q's
// commands before it).
func s35bRead(t *testing.T, q *cl.CommandQueue, base *cl.Buffer, off int64, n int) []int32 {
	t.Helper()
	got := make([]int32, n)
	require.NoError(t, q.ReadBuffer(base, off, cl.Bytes(got)))
	return got
}

// s35bPolicies are the configurations the ring runs over.
var s35bPolicies = []struct {
	name string
	opts []mempool.Option
}{
	{"bins", nil},
	{"bins/nodrop", []mempool.Option{mempool.WithDropSafety(false)}},
	{"bins/nocache", []mempool.Option{mempool.WithoutQueueCaches()}},
	{"arena", []mempool.Option{mempool.WithArena()}},
	{"arena/nodrop", []mempool.Option{mempool.WithArena(), mempool.WithDropSafety(false)}},
	{"arena/nocache", []mempool.Option{mempool.WithArena(), mempool.WithoutQueueCaches()}},
}

// PASSES (exploration). One block goes round nine queues (three of them
// out of order), eight rounds: each owner in turn allocates it, enqueues
// a late kernel that first checks it holds the previous owner's value and
// last writes its own, and closes it at once; every other owner runs its
// kernel on another queue (RecordQueue, some out of order, after a
// marker and barrier of its own: a handover then waits for two queues). Every handover must order
// the new owner after the old one (directly, or through the queues in
// between), so each kernel reads its predecessor's value and the block
// ends with the last owner's. Over both policies, with and without queue
// caches and drop safety.
func TestHostileS35bBlockRoundNineQueues(t *testing.T) {
	for _, pol := range s35bPolicies {
		t.Run(pol.name, func(t *testing.T) {
			q := cltest.Queue(t)
			queues := s35bQueues(t, q, 9, 3)
			n := 64
			iters := cltest.Size(q, 100, 200000)
			rig := newS35bRig(t, q, n, queues...)
			p := pooltest.New(t, q, pol.opts...)
			const size = 4096
			var base *cl.Buffer
			var off int64
			var fill []*mempool.PooledBuffer
			defer func() {
				for _, b := range fill {
					require.NoError(t, b.Close())
				}
			}()
			prev, v := int32(-1), int32(0)
			rounds := cltest.Size(q, 2, 8)
			step := 0
			for range rounds {
				for i, qq := range queues {
					step++
					b, err := p.On(qq).Allocate(size)
					require.NoError(t, err)
					if base == nil {
						base, off = b.Base(), b.Offset()
						fill = fillSegmentOf(t, p, b) // the rest of the arena's segment: only b's block serves
					}
					require.Same(t, base, b.Base(), "the test must exercise reuse")
					require.Equal(t, off, b.Offset())
					v++
					kq := qq
					if step%2 == 0 { // the kernel on another queue, recorded (some out of order)
						kq = queues[(i+4)%len(queues)]
						require.NoError(t, b.RecordQueue(kq))
						m, err := qq.EnqueueMarker() // the block is qq's: kq waits for it (the user's ordering)
						require.NoError(t, err)
						require.NoError(t, qq.Flush())
						require.NoError(t, kq.EnqueueBarrier(m))
						require.NoError(t, m.Release())
					}
					rig.late(t, kq, b, v, prev, iters)
					prev = v
					require.NoError(t, b.Close())
				}
			}
			bad := rig.bads(t, q, queues...)
			got := s35bRead(t, q, base, off, n)
			assert.Zero(t, bad, "kernels that did not find their predecessor's value, of %d", rounds*len(queues))
			for i, g := range got {
				if !assert.Equal(t, v, g, fmt.Sprintf("element %d: the last owner's value", i)) {
					break
				}
			}
		})
	}
}

// s35bQueues returns n queues of q's context, every k-th out of order.
func s35bQueues(t *testing.T, q *cl.CommandQueue, n, k int) []*cl.CommandQueue {
	var queues []*cl.CommandQueue
	for i := range n {
		props := cl.QueueProperties(0)
		if i%k == k-1 {
			props = cl.QueueOutOfOrder
		}
		queues = append(queues, cltest.SecondQueue(t, q, props))
	}
	return queues
}
