package mempool_test

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

// fixture is a pool over a counting Immediate allocator on the test device.
type fixture struct {
	q     *cl.CommandQueue
	count *allocator.Counting
	pool  *mempool.Pool
}

// newFixture builds the pool over wrap(Immediate), counting what reaches
// the device. When the test ends, with every buffer closed, it stops the
// pool and checks that every device allocation was freed exactly once.
func newFixture(t *testing.T, wrap func(allocator.Allocator) allocator.Allocator, opts ...mempool.Option) *fixture {
	t.Helper()
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	count := allocator.NewCounting(imm)
	var a allocator.Allocator = count
	if wrap != nil {
		a = wrap(count)
	}
	p, err := mempool.New(a, opts...)
	require.NoError(t, err)
	f := &fixture{q: q, count: count, pool: p}
	t.Cleanup(func() { f.requireNoLeaks(t) })
	return f
}

// requireNoLeaks stops the pool and checks nothing is left on the device.
func (f *fixture) requireNoLeaks(t *testing.T) {
	t.Helper()
	require.Zero(t, f.pool.ActiveBlocks(), "a test left buffers open")
	f.pool.StopHolding()
	s, c := f.pool.Stats(), f.count.Stats()
	assert.Zero(t, s.HeldBlocks)
	assert.Zero(t, s.ManagedBytes)
	assert.Zero(t, c.Live, "device buffers never freed")
	assert.Zero(t, c.BadFrees, "device buffers freed twice")
	assert.Equal(t, c.Allocs, c.Frees)
	assert.Equal(t, c.Allocs, s.DeviceAllocs)
	assert.Equal(t, c.Frees, s.DeviceFrees)
}

// counters is the part of Stats the pool's semantics pin.
type counters struct {
	Active, Held                    int
	Managed, ActiveBytes, HeldBytes int64
}

func countersOf(s mempool.Stats) counters {
	return counters{s.ActiveBlocks, s.HeldBlocks, s.ManagedBytes, s.ActiveBytes, s.HeldBytes}
}

// injector fails the next allocations with the errors queued in it, then
// passes through to the wrapped allocator.
type injector struct {
	allocator.Allocator
	mu    sync.Mutex
	fails []error
	calls int
}

func (i *injector) failNext(errs ...error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.fails = append(i.fails, errs...)
}

func (i *injector) Allocate(size int64) (*cl.Buffer, error) {
	i.mu.Lock()
	i.calls++
	if len(i.fails) > 0 {
		err := i.fails[0]
		i.fails = i.fails[1:]
		i.mu.Unlock()
		return nil, err
	}
	i.mu.Unlock()
	return i.Allocator.Allocate(size)
}

// newFixtureHoldingOneBlock is a fixture whose allocator an injector wraps,
// with one 64-byte block held for the pool to free on an out-of-memory.
func newFixtureHoldingOneBlock(t *testing.T) (*fixture, *injector) {
	var inj *injector
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator {
		inj = &injector{Allocator: a}
		return inj
	})
	held, err := f.pool.Allocate(64)
	require.NoError(t, err)
	require.NoError(t, held.Close())
	return f, inj
}

// freeRecorder records the sizes of the buffers freed, in order.
type freeRecorder struct {
	allocator.Allocator
	mu    sync.Mutex
	freed []int64
}

func (r *freeRecorder) Free(buf *cl.Buffer) error {
	r.mu.Lock()
	r.freed = append(r.freed, buf.Size())
	r.mu.Unlock()
	return r.Allocator.Free(buf)
}
