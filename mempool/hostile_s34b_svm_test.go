package mempool_test

import (
	"fmt"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PASSES: the RMM ports, on SVM pools: limit, statistics, tracking, errors.
func TestHostileS34bSVMLimitingAndStats(t *testing.T) {
	for _, pp := range peerPolicies {
		for _, on := range []bool{false, true} {
			for _, by := range []string{"limit", "budget"} {
				t.Run(fmt.Sprintf("%s/%v/%s", pp.name, on, by), func(t *testing.T) {
					const n = 600 << 10
					const k = 3
					limit := int64(k) * s34bBlockSize(pp.arena, n)
					opts := append([]mempool.Option(nil), pp.opts...)
					var wrap func(allocator.SVMAllocator) allocator.SVMAllocator
					if by == "limit" {
						opts = append(opts, mempool.WithLimit(limit))
					} else {
						wrap = func(a allocator.SVMAllocator) allocator.SVMAllocator { return allocator.NewSVMBudget(a, limit) }
					}
					t.Setenv(mempool.LimitEnv, "")
					f := newSVMFixture(t, false, wrap, opts...)
					p := f.pool
					alloc := p.Allocate
					if on {
						alloc = p.On(f.q).Allocate
					}
					var bufs []*mempool.PooledBuffer
					defer func() {
						for _, b := range bufs {
							b.Close()
						}
					}()
					for i := 0; i < k; i++ {
						b, err := alloc(n)
						require.NoError(t, err, "request %d", i)
						require.NotNil(t, b.SVM())
						assert.Nil(t, b.Buffer())
						bufs = append(bufs, b)
					}
					before := p.Stats()
					_, err := alloc(n)
					require.ErrorIs(t, err, mempool.ErrOutOfMemory)
					require.ErrorIs(t, err, allocator.ErrOutOfMemory)
					var oom *mempool.OutOfMemoryError
					require.ErrorAs(t, err, &oom)
					if by == "budget" {
						assert.ErrorIs(t, err, cl.ErrMemObjectAllocationFailure)
					} else {
						assert.Nil(t, oom.Err)
						assert.Equal(t, limit, oom.Limit)
					}
					assert.Equal(t, k, oom.ActiveBlocks)
					after := p.Stats()
					assert.Equal(t, countersOf(before), countersOf(after))
					assert.Equal(t, before.Allocation, after.Allocation)
					assert.Equal(t, before.OOMs+1, after.OOMs)
					snap := p.Snapshot()
					active := 0
					for _, seg := range snap.Segments {
						for _, blk := range seg.Blocks {
							if blk.State == mempool.StateActive {
								active++
								assert.Equal(t, int64(n), blk.Requested)
							}
						}
					}
					assert.Equal(t, k, active)
					require.NoError(t, bufs[0].Close())
					b, err := alloc(n)
					require.NoError(t, err)
					bufs[0] = b
					for _, b := range bufs {
						require.NoError(t, b.Close())
					}
					bufs = nil
					s := p.Stats()
					assert.Equal(t, mempool.Stat{Current: 0, Peak: k, Allocated: k + 1, Freed: k + 1}, s.Allocation.All)
					require.NoError(t, p.FreeHeld())
					assert.Zero(t, p.ManagedBytes())
				})
			}
		}
	}
}
