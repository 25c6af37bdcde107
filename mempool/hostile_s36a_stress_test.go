package mempool_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Goroutines making, using (On, RecordQueue), and releasing queues, beside
// others calling Stats, Snapshot, FreeHeld, QueueAllocator.FreeHeld and
// SetLimit: nothing hangs, Stats and Snapshot agree at the end, every
// allocation is freed once.
func TestHostileS36aStressForgetting(t *testing.T) {
	for _, arena := range []bool{false, true} {
		for _, drop := range []bool{true, false} {
			t.Run(fmt.Sprintf("arena=%v/drop=%v", arena, drop), func(t *testing.T) {
				opts := append(policyOptions(arena), mempool.WithDropSafety(drop))
				f := newFixture(t, nil, opts...)
				long := cltest.SecondQueue(t, f.q, 0)
				var wg sync.WaitGroup
				var stop atomic.Bool
				// Releases exclude the pool's calls (read-held): the pool's
				// marker on a queue being released is another test's
				// (hostile_s36a_releaserace_test.go).
				var relMu sync.RWMutex
				errs := make(chan error, 256)
				for g := range 3 {
					wg.Go(func() {
						for i := range 4 * mempool.ForgetMin {
							q, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
							if err != nil {
								errs <- err
								return
							}
							relMu.RLock()
							a := f.pool.On(q)
							var bs []*mempool.PooledBuffer
							for j := range 3 {
								b, err := a.Allocate(int64(256 << ((g + i + j) % 8)))
								if err != nil {
									errs <- err
									continue
								}
								ev, err := q.EnqueueFillBuffer(b.Buffer(), []byte{byte(i)}, 0, b.Size())
								if err == nil {
									ev.Release()
								}
								bs = append(bs, b)
							}
							if len(bs) > 0 {
								_ = bs[0].RecordQueue(long)
							}
							// close some before release, some after
							if len(bs) > 1 {
								bs[1].Close()
							}
							if i%3 == 0 {
								_ = a.FreeHeld()
							}
							relMu.RUnlock()
							relMu.Lock()
							if err := q.Release(); err != nil {
								errs <- err
							}
							relMu.Unlock()
							relMu.RLock()
							if len(bs) > 0 {
								bs[0].Close()
							}
							if len(bs) > 2 {
								_ = bs[2].RecordQueue(q) // released: nothing
								bs[2].Close()
							}
							relMu.RUnlock()
						}
					})
				}
				var iw sync.WaitGroup
				iw.Go(func() {
					for i := 0; !stop.Load(); i++ {
						relMu.RLock()
						_ = f.pool.Stats()
						_ = f.pool.Snapshot()
						if i%5 == 0 {
							_ = f.pool.FreeHeld()
						}
						if i%7 == 0 {
							_ = f.pool.SetLimit(int64(1 << 30))
						}
						b, err := f.pool.On(long).Allocate(int64(512 << (i % 6)))
						if err == nil {
							b.Close()
						}
						relMu.RUnlock()
					}
				})
				ok := withinWork(t, "queue per task with inspectors", func() { wg.Wait() })
				stop.Store(true)
				require.True(t, ok)
				ok = withinWork(t, "the inspector", func() { iw.Wait() })
				require.True(t, ok)
				close(errs)
				for err := range errs {
					assert.NoError(t, err)
				}
				s := f.pool.Stats()
				pooltest.CheckStats(t, s)
				require.NoError(t, mempool.CheckBlockCounts(f.pool))
				act, held, inact, hb := s36aSnapCounts(f.pool.Snapshot())
				assert.Zero(t, act)
				assert.Equal(t, s.ActiveBlocks, act)
				assert.Equal(t, s.HeldBlocks, held+inact)
				assert.Equal(t, s.HeldBytes, hb)
				var cached, req int64
				for _, ql := range s.Queues {
					assert.GreaterOrEqual(t, ql.Cached, int64(0))
					cached += ql.Cached
					req += ql.Requests
				}
				t.Logf("states %d lines %d cached %d requests %d held %d", mempool.QueueStates(f.pool), len(s.Queues), cached, req, s.HeldBlocks)
				assert.LessOrEqual(t, statesAfterNextQueue(t, f.pool, f.q), 3+2*mempool.ForgetMin+2)
			})
		}
	}
}

// s36aSnapCounts counts a snapshot's blocks by state, and the held bytes.
func s36aSnapCounts(s mempool.Snapshot) (active, held, inactive int, heldBytes int64) {
	for _, seg := range s.Segments {
		for _, b := range seg.Blocks {
			switch b.State {
			case mempool.StateActive:
				active++
			case mempool.StateHeld:
				held++
				heldBytes += b.Size
			case mempool.StateInactiveSplit:
				inactive++
				heldBytes += b.Size
			}
		}
	}
	return
}
