package mempool_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
)

// slowFree delays every Free, so that segments stay "being freed" a
// while (the window the limit now counts).
type slowFree struct {
	allocator.Allocator
	d time.Duration
}

func (s slowFree) Free(b *cl.Buffer) error {
	time.Sleep(s.d)
	return s.Allocator.Free(b)
}

// PASSES (exploration). Four goroutines on two queues, each with at most
// one 1 MiB block live, a fifth calling FreeHeld (pool's and queues') and
// SetLimit between 4.25 and 4.5 MiB, frees slowed to 2 ms: the limit always has room
// for every goroutine's block once frees in flight complete, so no
// request may fail, none may hang, and the device never holds more than
// the limit.
func TestHostileS33GLimitFreeingRace(t *testing.T) {
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			const MiB = 1 << 20
			opts := []mempool.Option{}
			if arena {
				opts = append(opts, mempool.WithArena())
			}
			var live, peak atomic.Int64
			var mu sync.Mutex
			f := newCappedFixture(t, "limit", 4*MiB+512<<10, func(a allocator.Allocator) allocator.Allocator {
				return &peakAlloc{Allocator: slowFree{a, 2 * time.Millisecond}, live: &live, peak: &peak, mu: &mu}
			}, opts...)
			q2 := cltest.SecondQueue(t, f.q, 0)
			allocs := []*mempool.QueueAllocator{f.pool.On(f.q), f.pool.On(q2)}
			var ooms, errs atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			ok := withinWork(t, "the race", func() {
				for g := 0; g < 4; g++ {
					wg.Add(1)
					go func(g int) {
						defer wg.Done()
						a := allocs[g%2]
						for i := 0; i < 300; i++ {
							size := int64(MiB)
							b, err := a.Allocate(size)
							if err != nil {
								if errors.Is(err, mempool.ErrOutOfMemory) {
									ooms.Add(1)
								} else {
									errs.Add(1)
								}
								continue
							}
							_ = b.Close()
						}
					}(g)
				}
				done := make(chan struct{})
				go func() {
					defer close(done)
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						_ = f.pool.FreeHeld()
						_ = allocs[i%2].FreeHeld()
						_ = f.pool.SetLimit(4*MiB + int64(1+i%2)*256<<10)
					}
				}()
				wg.Wait()
				close(stop)
				<-done
			})
			if !ok {
				return
			}
			t.Logf("ooms %d errs %d peak %d stats %+v", ooms.Load(), errs.Load(), peak.Load(), f.pool.Stats().OOMRetries)
			assert.Zero(t, ooms.Load(), "out-of-memory errors with at most 4 MiB live under a 4.25 MiB limit")
			assert.Zero(t, errs.Load())
			assert.LessOrEqual(t, peak.Load(), int64(4*MiB+512<<10), "device bytes held at once")
		})
	}
}

// peakAlloc tracks the bytes allocated and not yet freed, and their peak.
type peakAlloc struct {
	allocator.Allocator
	live, peak *atomic.Int64
	mu         *sync.Mutex
	sizes      sync.Map
}

func (p *peakAlloc) Allocate(n int64) (*cl.Buffer, error) {
	b, err := p.Allocator.Allocate(n)
	if err == nil && b != nil {
		p.sizes.Store(b, n)
		v := p.live.Add(n)
		p.mu.Lock()
		if v > p.peak.Load() {
			p.peak.Store(v)
		}
		p.mu.Unlock()
	}
	return b, err
}

func (p *peakAlloc) Free(b *cl.Buffer) error {
	n, _ := p.sizes.LoadAndDelete(b)
	err := p.Allocator.Free(b)
	if n != nil {
		p.live.Add(-n.(int64))
	}
	return err
}
