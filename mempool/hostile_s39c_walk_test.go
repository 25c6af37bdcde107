package mempool_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s39cCheckBlocks checks that the snapshot's active blocks are exactly the
// open buffers: each with its ID, requested size and queue number.
func s39cCheckBlocks(t *testing.T, p *mempool.Pool, open map[*mempool.PooledBuffer]bool, when string) {
	t.Helper()
	snap := p.Snapshot()
	st := p.Stats()
	qnum := map[*cl.CommandQueue]int{}
	for i, q := range st.Queues {
		qnum[q.Queue] = i + 1
	}
	want := map[uint64][2]int64{}
	for b := range open {
		want[b.ID()] = [2]int64{b.Size(), int64(qnum[b.Queue()])}
	}
	got := map[uint64][2]int64{}
	for _, seg := range snap.Segments {
		var end int64
		for _, b := range seg.Blocks {
			assert.Equal(t, end, b.Offset, "%s: segment %d tiles", when, seg.ID)
			end += b.Size
			if b.State == mempool.StateActive {
				got[b.ID] = [2]int64{b.Requested, int64(b.Queue)}
			}
		}
		assert.Equal(t, seg.Size, end, "%s: segment %d covered", when, seg.ID)
	}
	assert.Equal(t, want, got, "%s: the active blocks are the open buffers (id -> requested, queue)", when)
}

// A random walk over a sanitized pool, both
// policies, three queues (one released midway), closes, FreeHeld,
// SetLimit up and down, refusals: after each step the snapshot tiles, its
// active blocks are exactly the open buffers (ID, requested, queue), and it
// agrees with Stats block for block (s32bCheckSnapshot, s33bAgree).
func TestHostileS39cSanitizedWalkSnapshotAgrees(t *testing.T) {
	cltest.Watchdog(t, 240*time.Second)
	steps := 800
	if testing.Short() {
		steps = 120
	}
	for _, pol := range sanPolicies {
		for _, san := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/sanitized=%v", pol.name, san), func(t *testing.T) {
				var f *sanFixture
				if san {
					f = newSanFixture(t, pol.opts...)
				} else {
					fx := newFixture(t, nil, append([]mempool.Option{mempool.WithoutSanitizer()}, pol.opts...)...)
					f = &sanFixture{q: fx.q, pool: fx.pool}
				}
				rng := rand.New(rand.NewPCG(39, 3))
				q2 := cltest.SecondQueue(t, f.q, 0)
				q3 := cltest.SecondQueue(t, f.q, cl.QueueOutOfOrder)
				allocs := []func(int64) (*mempool.PooledBuffer, error){f.pool.Allocate, f.pool.On(q2).Allocate, f.pool.On(q3).Allocate}
				open := map[*mempool.PooledBuffer]bool{}
				var list []*mempool.PooledBuffer
				released := false
				var remove func()
				rng2 := rand.New(rand.NewPCG(7, 7))
				for step := range steps {
					when := fmt.Sprintf("step %d", step)
					switch r := rng.IntN(100); {
					case r < 50:
						n := int64(rng.IntN(8000))
						if rng.IntN(6) == 0 {
							n = int64(rng.IntN(3 << 20))
						}
						k := rng.IntN(len(allocs))
						if released && k == 2 {
							k = 0
						}
						b, err := allocs[k](n)
						if err != nil {
							require.True(t, errors.Is(err, mempool.ErrOutOfMemory) || errors.Is(err, mempool.ErrPanicked), "%s: %v", when, err)
							break
						}
						open[b] = true
						list = append(list, b)
					case r < 85:
						if len(list) == 0 {
							break
						}
						i := rng.IntN(len(list))
						b := list[i]
						list = append(list[:i], list[i+1:]...)
						delete(open, b)
						if err := b.Close(); err != nil {
							require.ErrorIs(t, err, mempool.ErrPanicked, when)
						}
					case r < 89:
						s39cOK(t, f.pool.FreeHeld(), when)
					case r < 94:
						lim := int64(0)
						if rng.IntN(3) > 0 {
							lim = f.pool.Stats().ManagedBytes/2 + int64(rng.IntN(8<<20))
						}
						s39cOK(t, f.pool.SetLimit(lim), when)
					case r < 96:
						if !released && step > steps/2 {
							// release q3 after its buffers are closed
							for _, b := range list {
								if b.Queue() == q3 {
									if err := b.Close(); err != nil {
										require.ErrorIs(t, err, mempool.ErrPanicked, when)
									}
									delete(open, b)
								}
							}
							list = list[:0]
							for b := range open {
								list = append(list, b)
							}
							require.NoError(t, q3.Release())
							released = true
						}
					case r < 98:
						if remove == nil {
							remove = f.pool.AddHook(mempool.HookFunc(func(e mempool.Event) {
								if rng2.IntN(4) == 0 {
									panic("hostile hook")
								}
							}))
						} else {
							remove()
							remove = nil
						}
					default:
						_ = f.pool.Findings()
					}
					s39cCheckBlocks(t, f.pool, open, when)
					s33bAgree(t, f.pool, when)
					s32bCheckSnapshot(t, f.pool)
					if t.Failed() {
						t.Fatalf("stopped at %s", when)
					}
				}
				if remove != nil {
					remove()
				}
				for _, b := range list {
					require.NoError(t, b.Close())
				}
				assert.Empty(t, f.pool.Findings())
			})
		}
	}
}

// s39cOK requires err nil, or a hook's panic (the walk's hook panics at
// times).
func s39cOK(t *testing.T, err error, when string) {
	t.Helper()
	if err != nil {
		require.ErrorIs(t, err, mempool.ErrPanicked, when)
	}
}
