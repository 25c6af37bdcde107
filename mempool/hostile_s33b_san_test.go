package mempool_test

import (
	"fmt"
	"github.com/clpool/clpool/cl"
	"sync"
	"testing"
	"time"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s33bAgree checks that Stats and a Snapshot taken right after agree on
// every block count of the pool.
func s33bAgree(t *testing.T, p *mempool.Pool, when string) {
	t.Helper()
	st := p.Stats()
	blocks, bytes, req := s33bSnapCount(p.Snapshot())
	assert.Equal(t, st.ActiveBlocks, blocks[mempool.StateActive], "%s: active", when)
	assert.Equal(t, st.HeldBlocks, blocks[mempool.StateHeld]+blocks[mempool.StateInactiveSplit], "%s: held", when)
	assert.Equal(t, st.HeldBytes, bytes[mempool.StateHeld]+bytes[mempool.StateInactiveSplit], "%s: held bytes", when)
	assert.Equal(t, st.ActiveBytes, req, "%s: requested", when)
	assert.Equal(t, st.InactiveSplit.All.Current, int64(blocks[mempool.StateInactiveSplit]), "%s: inactive split blocks", when)
	assert.Equal(t, st.InactiveSplitBytes.All.Current, bytes[mempool.StateInactiveSplit], "%s: inactive split bytes", when)
	assert.Equal(t, st.AllocatedBytes.All.Current, bytes[mempool.StateActive], "%s: allocated bytes", when)
}

// PASSES: Stats and Snapshot agree on a sanitized pool's blocks, the quarantine's
// included, as blocks are allocated, closed and quarantined.
func TestHostileS33BSanitizerStatsAgreeWithSnapshot(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			f := newSanFixture(t, pol.opts...)
			on := f.pool.On(f.q)
			var bs []*mempool.PooledBuffer
			for _, n := range []int64{1000, 3000, 5000, 7000} {
				b, err := on.Allocate(n)
				require.NoError(t, err)
				bs = append(bs, b)
			}
			s33bAgree(t, f.pool, "all open")
			require.NoError(t, bs[1].Close())
			s33bAgree(t, f.pool, "one quarantined")
			require.NoError(t, bs[0].Close())
			require.NoError(t, bs[2].Close())
			s33bAgree(t, f.pool, "three quarantined")
			require.NoError(t, bs[3].Close())
			s33bAgree(t, f.pool, "all quarantined")
			// push them out of the quarantine
			for i := range mempool.SanitizerQuarantineBlocks + 2 {
				b, err := on.Allocate(int64(100 + i))
				require.NoError(t, err)
				if i == 3 {
					s33bAgree(t, f.pool, "while pushing")
				}
				require.NoError(t, b.Close())
			}
			s33bAgree(t, f.pool, "pushed out")
			require.NoError(t, f.pool.FreeHeld())
			s33bAgree(t, f.pool, "after FreeHeld")
			assert.Empty(t, f.pool.Findings())
		})
	}
}

// PASSES: goroutines on queues of their own write one element past some of their
// blocks (an off-by-one kernel) while another reads Findings, Snapshot
// and Stats: every bad write is found once, naming its block and offset,
// and no correct block is named.
func TestHostileS33BSanitizerConcurrentFindingsNameTheirBlocks(t *testing.T) {
	cltest.Watchdog(t, 120*time.Second)
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			f := newSanFixture(t, pol.opts...)
			type bad struct {
				id  uint64
				off int64
			}
			const workers = 3
			var queues [workers]*cl.CommandQueue
			var ks [workers]*cl.Kernel
			for i := range workers {
				queues[i] = cltest.SecondQueue(t, f.q, 0)
				ks[i] = kernel(t, queues[i], offByOne, "upto")
			}
			var mu sync.Mutex
			want := map[uint64]int64{}
			stop := make(chan struct{})
			var reader sync.WaitGroup
			reader.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					_ = f.pool.Findings()
					_ = f.pool.Snapshot()
					_ = f.pool.Stats()
				}
			})
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					q, k := queues[w], ks[w]
					on := f.pool.On(q)
					for i := range 60 {
						n := 1 + (i*37+w*11)%700
						b, err := on.Allocate(int64(4 * n))
						if !assert.NoError(t, err) {
							return
						}
						over := (i+w)%5 == 0
						m := n - 1
						if over {
							m = n
							mu.Lock()
							want[b.ID()] = int64(4 * n)
							mu.Unlock()
						}
						if b.SVM() == nil {
							if !assert.NoError(t, k.SetArgs(b.Base(), b.Offset()/4, int64(m))) {
								return
							}
						}
						if !assert.NoError(t, q.EnqueueKernel(k, []int{m + 1}, nil)) {
							return
						}
						// ids of closed PooledBuffers may be reused by later ones:
						// keep the buffer reachable until the end.
						keep[w] = append(keep[w], b)
						assert.NoError(t, b.Close())
					}
				})
			}
			wg.Wait()
			close(stop)
			reader.Wait()
			got := f.pool.Findings()
			seen := map[uint64]int64{}
			for _, x := range got {
				assert.Equal(t, mempool.OutOfBounds, x.Kind, "%v", x)
				_, dup := seen[x.BlockID]
				assert.False(t, dup, "found twice: %v", x)
				seen[x.BlockID] = x.Offset
			}
			assert.Equal(t, want, seen)
			keep = [3][]*mempool.PooledBuffer{}
		})
	}
}

var keep [3][]*mempool.PooledBuffer

// PASSES: a zero-byte block of a sanitized pool is all guard: a write at
// offset 0 is out of bounds at 0; a write after Close found when FreeHeld
// takes the quarantine back.
func TestHostileS33BSanitizerZeroSizeAndFreeHeld(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	for _, pol := range sanPolicies {
		t.Run(pol.name, func(t *testing.T) {
			f := newSanFixture(t, pol.opts...)
			b, err := f.pool.Allocate(0)
			require.NoError(t, err)
			id := b.ID()
			require.NoError(t, f.q.WriteBuffer(b.Base(), b.Offset(), []byte{1}))
			require.NoError(t, b.Close())
			c, err := f.pool.Allocate(5000)
			require.NoError(t, err)
			cid := c.ID()
			base, off := c.Base(), c.Offset()
			require.NoError(t, c.Close())
			require.NoError(t, f.q.WriteBuffer(base, off+4999, []byte{1}))
			require.NoError(t, f.q.Finish())
			require.NoError(t, f.pool.FreeHeld())
			got := f.pool.Findings()
			require.Len(t, got, 2, "%v", got)
			assert.Equal(t, mempool.OutOfBounds, got[0].Kind)
			assert.Equal(t, id, got[0].BlockID)
			assert.Equal(t, int64(0), got[0].Offset)
			assert.Equal(t, mempool.WriteAfterClose, got[1].Kind)
			assert.Equal(t, cid, got[1].BlockID)
			assert.Equal(t, int64(4999), got[1].Offset)
		})
	}
}

// PASSES: a hook that blocks one goroutine's Close does not keep other
// goroutines from allocating, closing and reading the pool, sanitized or
// not, with queue caches in use before the hook came.
func TestHostileS33BBlockingHookBlocksOnlyItsCaller(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	for _, san := range []bool{false, true} {
		for _, arena := range []bool{false, true} {
			t.Run(fmt.Sprintf("san=%v,arena=%v", san, arena), func(t *testing.T) {
				opts := policyOptions(arena)
				if san {
					opts = append(opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil))
				}
				f := newFixture(t, nil, opts...)
				p := f.pool
				q2 := cltest.SecondQueue(t, f.q, 0)
				for _, on := range []*mempool.QueueAllocator{p.On(f.q), p.On(q2)} {
					b, err := on.Allocate(256)
					require.NoError(t, err)
					require.NoError(t, b.Close())
				}
				victim, err := p.On(f.q).Allocate(4096)
				require.NoError(t, err)
				entered, release := make(chan struct{}), make(chan struct{})
				vid := victim.ID()
				remove := p.AddHook(mempool.HookFunc(func(e mempool.Event) {
					if e.Kind == mempool.FreeBefore && e.BlockID == vid {
						close(entered)
						<-release
					}
				}))
				done := make(chan error, 1)
				go func() { done <- victim.Close() }()
				<-entered
				ok := within(t, "the pool's other calls while a hook blocks", func() {
					for _, on := range []*mempool.QueueAllocator{p.On(f.q), p.On(q2)} {
						for _, n := range []int64{256, 4096, 1 << 20} {
							b, err := on.Allocate(n)
							if err == nil {
								_ = b.Close()
							}
						}
					}
					_ = p.Stats()
					_ = p.Snapshot()
					_ = p.FreeHeld()
					_ = p.Findings()
				})
				close(release)
				if !ok {
					return
				}
				require.NoError(t, <-done)
				remove()
				s33bAgree(t, p, "after")
			})
		}
	}
}
