// Package pooltest holds the test helpers that make mempool pools on the
// test device, written once for the tests of every package: a pool over a
// counting allocator that checks, when the test ends, that every block
// was closed and every device buffer freed exactly once (New, NewOver);
// and a goroutine that reads a pool's Stats while others use the pool,
// checking that the figures agree (ReadStats).
//
// It imports mempool, so mempool's in-package tests (package mempool)
// cannot import it; external test packages (package x_test), mempool's
// included, can. That is why these helpers are not in internal/cltest,
// which every test, in-package ones included, must be free to import.
package pooltest

import (
	"sync"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Counting wraps a in an allocator.Counting and, when the test ends,
// checks that every buffer it allocated was freed exactly once.
func Counting(tb testing.TB, a allocator.Allocator) *allocator.Counting {
	tb.Helper()
	c := allocator.NewCounting(a)
	tb.Cleanup(func() { checkFreed(tb, c) })
	return c
}

// checkFreed checks that every buffer c allocated was freed exactly once.
func checkFreed(tb testing.TB, c *allocator.Counting) {
	tb.Helper()
	s := c.Stats()
	assert.Zero(tb, s.Live, "device buffers never freed")
	assert.Zero(tb, s.BadFrees, "device buffers freed twice")
	assert.Equal(tb, s.Allocs, s.Frees)
}

// New returns a pool made with opts over a counting Immediate allocator
// of cl.MemReadWrite buffers on q (nil: a queue of its own, from
// cltest.Queue). When the test ends it checks that every block was
// closed, closes the pool, and checks that the pool holds nothing and
// that every device buffer was freed exactly once. Make it after the
// queues the test uses, so that it closes the pool before they go.
func New(tb testing.TB, q *cl.CommandQueue, opts ...mempool.Option) *mempool.Pool {
	tb.Helper()
	p, _ := NewOver(tb, q, nil, opts...)
	return p
}

// NewOver is New with the allocator between the counting one and the
// pool of wrap's choice: the pool is made over wrap(count) (over count
// itself for a nil wrap), so that count sees only what reaches the
// device. It returns the pool and count. Besides New's checks, it checks
// that the pool's counts of device allocations and frees are count's.
func NewOver(tb testing.TB, q *cl.CommandQueue, wrap func(allocator.Allocator) allocator.Allocator, opts ...mempool.Option) (*mempool.Pool, *allocator.Counting) {
	tb.Helper()
	if q == nil {
		q = cltest.Queue(tb)
	}
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(tb, err)
	count := allocator.NewCounting(imm)
	var a allocator.Allocator = count
	if wrap != nil {
		a = wrap(count)
	}
	p, err := mempool.New(a, opts...)
	require.NoError(tb, err)
	tb.Cleanup(func() {
		// Blocks left open (a test stopped by require, say) leave their
		// buffers allocated: nothing more to check.
		require.Zero(tb, p.ActiveBlocks(), "a test left blocks open")
		assert.NoError(tb, p.Close())
		s, c := p.Stats(), count.Stats()
		assert.Zero(tb, s.HeldBlocks)
		assert.Zero(tb, s.ManagedBytes)
		assert.Equal(tb, c.Allocs, s.DeviceAllocs, "the pool counts what reached the device")
		assert.Equal(tb, c.Frees, s.DeviceFrees)
		checkFreed(tb, count)
	})
	return p, count
}

// ReadStats starts a goroutine that reads p.Stats() over and over, and
// checks each with CheckStats, until the stop it returns is called; stop
// waits for the goroutine to end. each, if not nil, is called after the
// i-th read (from 0), for what the test wants to race with the pool's
// users besides Stats (a GC, FreeHeld, Snapshot). Checks fail the test
// with assert, never require: they run off the test's goroutine.
func ReadStats(tb testing.TB, p *mempool.Pool, each func(i int)) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-quit:
				return
			default:
			}
			CheckStats(tb, p.Stats())
			if each != nil {
				each(i)
			}
		}
	})
	return func() {
		close(quit)
		wg.Wait()
	}
}

// CheckStats checks that the figures of s agree with each other, as those
// of any one Stats call must, however busy the pool: no count below zero;
// All the sum of Small and Large; the bytes handed out and held within
// those reserved; and with exact bins, where each block is a segment of
// its own, as many segments as active and held blocks.
func CheckStats(tb testing.TB, s mempool.Stats) {
	tb.Helper()
	assert.GreaterOrEqual(tb, s.ActiveBlocks, 0)
	assert.GreaterOrEqual(tb, s.HeldBlocks, 0)
	assert.GreaterOrEqual(tb, s.HeldBytes, int64(0))
	assert.Equal(tb, s.Allocation.All.Current, s.Allocation.Small.Current+s.Allocation.Large.Current)
	assert.Equal(tb, s.ReservedBytes.All.Current, s.ReservedBytes.Small.Current+s.ReservedBytes.Large.Current)
	assert.LessOrEqual(tb, s.AllocatedBytes.All.Current+s.HeldBytes, s.ReservedBytes.All.Current)
	if s.Policy == "bins" {
		assert.Equal(tb, int64(s.ActiveBlocks+s.HeldBlocks), s.Segment.All.Current, "exact bins: a segment per block")
	}
}
