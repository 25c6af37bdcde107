package allocator_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// noPanic runs f and returns the panic it raised, as an error, or nil.
func s32aNoPanic(f func()) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("panic: %v", v)
		}
	}()
	f()
	return nil
}

// FAILED on a363727: a wrapper over a typed nil allocator (a nil *Deferred in the
// Allocator interface) panics in Allocate, where the same wrapper over an
// untyped nil returns errNoInner's error matching cl.ErrInvalidValue; and
// ContextOf/QueueOf/DeviceOf, documented to return nil "if none says",
// panic on a nil *Budget or *Immediate.
func TestHostileS32aTypedNilAllocatorsPanic(t *testing.T) {
	var d *allocator.Deferred
	var imm *allocator.Immediate
	var b *allocator.Budget
	var c *allocator.Counting

	for name, f := range map[string]func(){
		"NewBudget(nil *Deferred).Allocate":   func() { _, _ = allocator.NewBudget(d, 100).Allocate(8) },
		"NewCounting(nil *Deferred).Allocate": func() { _, _ = allocator.NewCounting(d).Allocate(8) },
		"ContextOf(nil *Budget)":              func() { _ = allocator.ContextOf(b) },
		"ContextOf(nil *Counting)":            func() { _ = allocator.ContextOf(c) },
		"ContextOf(nil *Deferred)":            func() { _ = allocator.ContextOf(d) },
		"QueueOf(nil *Immediate)":             func() { _ = allocator.QueueOf(imm) },
		"DeviceOf(nil *Budget)":               func() { _ = allocator.DeviceOf(b) },
		// mempool.New refuses a typed nil itself, but not one a level down:
		"mempool.New(NewBudget(nil *Deferred))": func() { _, _ = mempool.New(allocator.NewBudget(d, 100)) },
	} {
		assert.NoError(t, s32aNoPanic(f), name)
	}
}

// FAILED on a363727: Counting's doc: "A buffer freed twice, or never allocated here,
// is refused with ErrFreed and counted as a bad free." A buffer released
// behind the Counting's back (buf.Release(), as arr.Buffer().Release()
// would) and then freed through it is refused with ErrFreed, but counted
// as a good free, not a bad one: the Counting reports no leak and no
// double free for a buffer released twice.
func TestHostileS32aCountingDoubleFreeAfterDirectRelease(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	c := allocator.NewCounting(d)
	buf, err := c.Allocate(64)
	require.NoError(t, err)
	require.NoError(t, buf.Release()) // first free, behind c's back
	err = c.Free(buf)                 // second free
	require.ErrorIs(t, err, allocator.ErrFreed, "the free is refused as a double free")
	s := c.Stats()
	assert.Equal(t, int64(1), s.BadFrees, "refused with ErrFreed, yet not counted as a bad free: %+v", s)
	assert.Equal(t, int64(0), s.Frees, "a refused free counted as a free: %+v", s)
}

// PASSES (exploration): a Budget over a Counting over a Deferred, with
// concurrent allocations that the budget refuses half of and frees
// through the package function, all with -race: counts add up and every
// buffer is freed once.
func TestHostileS32aNestedWrappersConcurrentPackageFree(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	c := allocator.NewCounting(d)
	b := allocator.NewBudget(c, 64*8)
	outer := allocator.NewCounting(b)
	var wg sync.WaitGroup
	var mu sync.Mutex
	refused := 0
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				buf, err := outer.Allocate(64 + int64(i%3)*32)
				if err != nil {
					require.ErrorIs(t, err, allocator.ErrOutOfMemory)
					mu.Lock()
					refused++
					mu.Unlock()
					continue
				}
				require.NoError(t, allocator.Free(buf))
				require.ErrorIs(t, allocator.Free(buf), allocator.ErrFreed)
			}
		}()
	}
	wg.Wait()
	so, si := outer.Stats(), c.Stats()
	assert.Zero(t, b.Live())
	assert.Zero(t, so.Live)
	assert.Zero(t, si.Live)
	assert.Equal(t, so.Allocs, so.Frees)
	assert.Equal(t, si.Allocs, si.Frees)
	assert.Equal(t, so.Allocs, si.Allocs)
	assert.Equal(t, int64(refused), so.Failures)
	assert.Zero(t, si.Failures)
	assert.Zero(t, si.BadFrees)
}
