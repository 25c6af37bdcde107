package allocator_test

import (
	"errors"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s39aFreeThenPanic is an allocator whose Free releases the buffer, then
// panics (a wrapper with a bug after the release: a logging call, say).
type s39aFreeThenPanic struct{ allocator.Allocator }

func (a s39aFreeThenPanic) Free(buf *cl.Buffer) error {
	err := a.Allocator.Free(buf)
	panic(errors.Join(errors.New("free bug"), err))
}

// s39aRecover calls f and returns whether it panicked.
func s39aRecover(f func()) (panicked bool) {
	defer func() { panicked = recover() != nil }()
	f()
	return false
}

// Fixed this session (it failed before): a Budget or a Counting over an allocator whose Free releases the
// buffer and then panics loses track of the buffer for good. Each takes
// the buffer out of its set before it calls the wrapped Free, and counts
// its bytes back (or the free) only after it returns; the panic skips
// that. The Budget keeps the bytes charged forever (Live stays at the
// buffer's size, a later Free of it is refused with ErrFreed), so every
// later request of the budget has that much less room; the Counting
// reports the buffer live (a leak) and its retry as a bad free. A
// mempool.Pool recovers an allocator's panic and promises that "every
// device buffer is freed exactly once" (mempool doc, Misuse), but the
// Budget beneath it then refuses what fits.
//
// Contracts: Budget.Free: "If the wrapped allocator's Free fails, buf
// stays b's for a retry, unless it was released all the same: then its
// bytes go back"; Counting.Free: "A free the wrapped allocator fails
// leaves buf counted live, for a retry, unless buf was released all the
// same: then it counts as freed". A panic is a failure of the wrapped
// Free, and the buffer was released all the same.
//
// Cause (guess): allocator/wrappers.go, Budget.Free (bufs.LoadAndDelete
// before inner.Free, live.Add after it, no defer) and Counting.Free
// (delete(c.live, buf) before inner.Free, the counts after it); the same
// in allocator/svm.go, SVMBudget.Free.
func TestHostileS39aWrappersOverAPanickingFree(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)

	t.Run("Budget", func(t *testing.T) {
		b := allocator.NewBudget(s39aFreeThenPanic{imm}, 1<<20)
		buf, err := b.Allocate(1 << 20)
		require.NoError(t, err)
		require.True(t, s39aRecover(func() { _ = b.Free(buf) }), "the wrapped Free panics")
		require.True(t, buf.Released(), "the buffer was released all the same")
		if b.Live() != 0 {
			// Not given back: then buf must still be b's, for a retry.
			assert.NotErrorIs(t, b.Free(buf), allocator.ErrFreed, "buf is b's still, for a retry")
		}
		assert.Zero(t, b.Live(), "the released buffer's bytes went back to the budget")
		buf2, err := b.Allocate(1 << 20)
		if err == nil {
			require.NoError(t, imm.Free(buf2))
		}
		assert.NoError(t, err, "the whole budget is there again")
	})
	t.Run("Counting", func(t *testing.T) {
		c := allocator.NewCounting(s39aFreeThenPanic{imm})
		buf, err := c.Allocate(4096)
		require.NoError(t, err)
		require.True(t, s39aRecover(func() { _ = c.Free(buf) }), "the wrapped Free panics")
		require.True(t, buf.Released(), "the buffer was released all the same")
		s := c.Stats()
		assert.Zero(t, s.Live, "a released buffer is not live")
		assert.Zero(t, s.LiveBytes)
		assert.Equal(t, int64(1), s.Frees+s.BadFrees, "the free is counted")
	})
}

// s39aAllocPanics is an allocator whose Allocate panics.
type s39aAllocPanics struct{ allocator.Allocator }

func (a s39aAllocPanics) Allocate(size int64) (*cl.Buffer, error) { panic("allocate bug") }

// Fixed this session (it failed before): a Budget over an allocator whose Allocate panics keeps the
// request's bytes reserved for good: reserve adds them to the live bytes
// before the wrapped Allocate, and only an error return takes them back.
// After one recovered panic of a 1 MiB request, a 1 MiB budget refuses
// every request (Live() is 1 MiB with no buffer live). mempool recovers
// its allocator's panics and says its own limit loses nothing
// (TestPanickingAllocatorLosesNoLimit); a Budget, "the way to test what
// CPU runtimes never report" and a program's "share of a device", loses
// its room.
//
// Contract: Budget.Live: "Live returns the bytes allocated and not yet
// freed" (nothing was allocated); Budget.Allocate: "reserves size bytes of
// the budget and allocates from the wrapped allocator".
//
// Cause (guess): allocator/wrappers.go, Budget.Allocate (b.live.Add(-size)
// only on an error return, not deferred); allocator/svm.go,
// SVMBudget.Allocate the same.
func TestHostileS39aBudgetOverAPanickingAllocate(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	b := allocator.NewBudget(s39aAllocPanics{imm}, 1<<20)
	require.True(t, s39aRecover(func() { _, _ = b.Allocate(1 << 20) }), "the wrapped Allocate panics")
	assert.Zero(t, b.Live(), "nothing was allocated: no bytes are live")
}
