package mempool_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s33fChurn allocates and closes blocks of random sizes on a, keeping up
// to keep of them open at a time, until stop is closed; a refusal by the
// limit is fine, so is ErrPoolClosed. The blocks left open are returned.
func s33fChurn(a interface {
	Allocate(int64) (*mempool.PooledBuffer, error)
}, seed uint64, stop <-chan struct{}, errs chan<- error) []*mempool.PooledBuffer {
	r := rand.New(rand.NewPCG(seed, 7))
	var open []*mempool.PooledBuffer
	for i := 0; ; i++ {
		select {
		case <-stop:
			return open
		default:
		}
		size := int64(1 + r.IntN(64<<10))
		if r.IntN(8) == 0 {
			size = int64(1 + r.IntN(2<<20))
		}
		b, err := a.Allocate(size)
		switch {
		case errors.Is(err, mempool.ErrPoolClosed), errors.Is(err, mempool.ErrOutOfMemory):
		case err != nil:
			select {
			case errs <- err:
			default:
			}
		default:
			open = append(open, b)
		}
		for len(open) > 6 || (len(open) > 0 && r.IntN(3) == 0) {
			j := r.IntN(len(open))
			if err := open[j].Close(); err != nil {
				select {
				case errs <- fmt.Errorf("Close: %w", err):
				default:
				}
			}
			open = append(open[:j], open[j+1:]...)
		}
	}
}

// s33fChurnLimitStopClose runs a goroutine churning (s33fChurn) on each
// of queues (nil: pool.Allocate, no queue) while the test changes the
// limit, frees what is held, stops holding and closes the pool; then it
// closes the blocks left open. It reports false if the goroutines hung.
func s33fChurnLimitStopClose(t *testing.T, p *mempool.Pool, queues []*cl.CommandQueue) bool {
	t.Helper()
	stop := make(chan struct{})
	errs := make(chan error, 64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var left []*mempool.PooledBuffer
	for g, qq := range queues {
		wg.Go(func() {
			var a interface {
				Allocate(int64) (*mempool.PooledBuffer, error)
			} = p
			if qq != nil {
				a = p.On(qq)
			}
			open := s33fChurn(a, uint64(g), stop, errs)
			mu.Lock()
			left = append(left, open...)
			mu.Unlock()
		})
	}
	limits := []int64{0, 1 << 20, 8 << 20, 3 << 20, 64 << 20, 0, 2 << 20}
	for i := range 40 {
		assert.NoError(t, p.SetLimit(limits[i%len(limits)]))
		if i%5 == 0 {
			assert.NoError(t, p.FreeHeld())
		}
		if i == 25 {
			assert.NoError(t, p.StopHolding())
		}
		if i == 32 {
			assert.NoError(t, p.Close())
		}
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	if !withinWork(t, "the churning goroutines", wg.Wait) {
		return false
	}
	close(errs)
	for err := range errs {
		t.Errorf("unexpected error: %v", err)
	}
	for _, b := range left {
		assert.NoError(t, b.Close())
	}
	return true
}

// PASSES (so far): goroutines allocating on three queues (one out of
// order) through pool.On while another changes the limit, frees what is
// held, stops holding and closes the pool, and the blocks still open are
// closed after the pool's Close. Nothing hangs, every device allocation
// is freed exactly once, and the closed pool manages nothing.
func TestHostileS33FLimitStopCloseRaceOnQueues(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			q := cltest.Queue(t)
			q2 := cltest.SecondQueue(t, q, 0)
			q3 := cltest.SecondQueue(t, q, cl.QueueOutOfOrder)
			imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
			require.NoError(t, err)
			count := allocator.NewCounting(imm)
			p, err := mempool.New(count, policyOptions(arena)...)
			require.NoError(t, err)

			if !s33fChurnLimitStopClose(t, p, []*cl.CommandQueue{q, q2, q3, q, q2, nil}) {
				return
			}
			require.NoError(t, q.Finish())
			require.NoError(t, q2.Finish())
			require.NoError(t, q3.Finish())
			s, c := p.Stats(), count.Stats()
			assert.Zero(t, s.ActiveBlocks)
			assert.Zero(t, s.HeldBlocks)
			assert.Zero(t, s.ManagedBytes)
			assert.Zero(t, c.Live, "device buffers never freed")
			assert.Zero(t, c.BadFrees, "device buffers freed twice")
			assert.Equal(t, c.Allocs, s.DeviceAllocs)
			assert.Equal(t, c.Frees, s.DeviceFrees)
		})
	}
}

// s33fSVMCount counts an SVM allocator's allocations and frees, by
// pointer, as allocator.Counting does for buffers.
type s33fSVMCount struct {
	inner               allocator.SVMAllocator
	mu                  sync.Mutex
	live                map[*cl.SVM]bool
	allocs, frees, bads int64
	liveBytes, peak     int64
}

func newS33fSVMCount(a allocator.SVMAllocator) *s33fSVMCount {
	return &s33fSVMCount{inner: a, live: map[*cl.SVM]bool{}}
}

func (c *s33fSVMCount) Allocate(size int64) (*cl.SVM, error) {
	s, err := c.inner.Allocate(size)
	if err != nil || s == nil {
		return s, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.live[s] = true
	c.allocs++
	c.liveBytes += s.Size()
	c.peak = max(c.peak, c.liveBytes)
	return s, nil
}

func (c *s33fSVMCount) Free(s *cl.SVM) error {
	c.mu.Lock()
	if !c.live[s] {
		c.bads++
		c.mu.Unlock()
		return allocator.ErrFreed
	}
	delete(c.live, s)
	c.frees++
	c.liveBytes -= s.Size()
	c.mu.Unlock()
	return c.inner.Free(s)
}

func (c *s33fSVMCount) Unwrap() allocator.SVMAllocator { return c.inner }

// PASSES (so far): the race above over an SVM pool (NewSVM over
// ImmediateSVM), whose frees wait on the host for the queues.
func TestHostileS33FSVMLimitStopCloseRaceOnQueues(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
			q2 := cltest.SecondQueue(t, q, 0)
			q3 := cltest.SecondQueue(t, q, cl.QueueOutOfOrder)
			imm, err := allocator.NewImmediateSVM(q, false)
			require.NoError(t, err)
			count := newS33fSVMCount(imm)
			p, err := mempool.NewSVM(count, policyOptions(arena)...)
			require.NoError(t, err)

			if !s33fChurnLimitStopClose(t, p, []*cl.CommandQueue{q, q2, q3, q2, nil}) {
				return
			}
			require.NoError(t, q.Finish())
			require.NoError(t, q2.Finish())
			require.NoError(t, q3.Finish())
			s := p.Stats()
			count.mu.Lock()
			defer count.mu.Unlock()
			assert.Zero(t, s.ActiveBlocks)
			assert.Zero(t, s.HeldBlocks)
			assert.Zero(t, s.ManagedBytes)
			assert.Empty(t, count.live, "SVM never freed")
			assert.Zero(t, count.bads, "SVM freed twice")
			assert.Equal(t, count.allocs, s.DeviceAllocs)
			assert.Equal(t, count.frees, s.DeviceFrees)
		})
	}
}

// s33fPeak records the peak of the bytes live on the allocator it wraps.
type s33fPeak struct {
	allocator.Allocator
	mu         sync.Mutex
	live, peak int64
}

func (a *s33fPeak) Allocate(size int64) (*cl.Buffer, error) {
	b, err := a.Allocator.Allocate(size)
	if err == nil && b != nil {
		a.mu.Lock()
		a.live += b.Size()
		a.peak = max(a.peak, a.live)
		a.mu.Unlock()
	}
	return b, err
}

func (a *s33fPeak) Free(b *cl.Buffer) error {
	if b != nil {
		a.mu.Lock()
		a.live -= b.Size()
		a.mu.Unlock()
	}
	return a.Allocator.Free(b)
}

func (a *s33fPeak) Unwrap() allocator.Allocator { return a.Allocator }

// FAILED on c81ac60 (5 of 12 runs under -race; peak 6,564,939 bytes
// under a 6 MiB limit): a fixed limit holds under goroutines allocating
// on several queues while FreeHeld runs: the bytes live on the device
// never pass it. The limit's room left out the segments being freed
// outside the lock (core.room now counts them).
func TestHostileS33FLimitHoldsUnderConcurrency(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	const limit = 6 << 20
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			var peak *s33fPeak
			f := newFixture(t, func(a allocator.Allocator) allocator.Allocator {
				peak = &s33fPeak{Allocator: a}
				return peak
			}, append(policyOptions(arena), mempool.WithLimit(limit))...)
			q := f.q
			q2 := cltest.SecondQueue(t, q, 0)
			stop := make(chan struct{})
			errs := make(chan error, 64)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var left []*mempool.PooledBuffer
			for g, qq := range []*cl.CommandQueue{q, q2, q, q2} {
				wg.Go(func() {
					open := s33fChurn(f.pool.On(qq), uint64(g+10), stop, errs)
					mu.Lock()
					left = append(left, open...)
					mu.Unlock()
				})
			}
			for range 20 {
				assert.NoError(t, f.pool.FreeHeld())
				s := f.pool.Stats()
				assert.LessOrEqual(t, s.ManagedBytes, int64(limit))
				time.Sleep(3 * time.Millisecond)
			}
			close(stop)
			if !withinWork(t, "the churning goroutines", wg.Wait) {
				return
			}
			close(errs)
			for err := range errs {
				t.Errorf("unexpected error: %v", err)
			}
			for _, b := range left {
				assert.NoError(t, b.Close())
			}
			peak.mu.Lock()
			defer peak.mu.Unlock()
			assert.LessOrEqual(t, peak.peak, int64(limit), "device bytes live at once passed the limit")
			assert.LessOrEqual(t, f.pool.Stats().PeakManagedBytes, int64(limit))
		})
	}
}
