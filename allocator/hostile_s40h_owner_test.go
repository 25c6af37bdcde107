package allocator_test

import (
	"errors"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s40hPkgFree is a thin allocator (a logger) between two wrappers whose
// Free frees through allocator.Free, the package function, as
// s40gOwnerFree does.
type s40hPkgFree struct{ allocator.Allocator }

func (a *s40hPkgFree) Free(buf *cl.Buffer) error { return allocator.Free(buf) }

// TestS40hPackageFreeBetweenWrappersSkipsInnerBudget: Counting over a
// logger over a Budget. The logger frees with allocator.Free, which per
// its docs frees "through the allocator that handed it out ... so that the
// budget gets its bytes back". At 3b64820 the Counting disowned the
// buffer while its wrapped Free ran, so allocator.Free found no owner and
// released the buffer directly: the Budget never saw the Free and stayed
// short of those bytes for good. Now no one is disowned: the books stay
// right, and the Free is refused (ErrBeingFreed).
func TestS40hPackageFreeBetweenWrappersSkipsInnerBudget(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	b := allocator.NewBudget(d, 1<<20)
	c := allocator.NewCounting(&s40hPkgFree{Allocator: b})
	buf, err := c.Allocate(4096)
	require.NoError(t, err)
	require.EqualValues(t, 4096, b.Live())
	done := make(chan error, 1)
	go func() { done <- c.Free(buf) }()
	select {
	case err := <-done:
		// allocator.Free goes to the buffer's owner, the Counting, whose
		// Free of it is under way: refused. Nothing is freed, in either
		// book (the logger is to free through b, as a wrapped allocator
		// does: allocator.Free's doc).
		assert.ErrorIs(t, err, allocator.ErrBeingFreed)
	case <-time.After(10 * time.Second):
		t.Fatal("Counting.Free hung")
	}
	assert.False(t, buf.Released())
	assert.EqualValues(t, 1, c.Stats().Live)
	assert.Zero(t, c.Stats().BadFrees)
	assert.EqualValues(t, 4096, b.Live(), "the Budget's books: the buffer is live")
	require.NoError(t, b.Free(buf)) // past the Counting: its books keep buf, which the test's end releases
	assert.EqualValues(t, 0, b.Live())
}

// s40hGateFree holds its Free until gate closes.
type s40hGateFree struct {
	allocator.Allocator
	entered chan struct{}
	gate    chan struct{}
}

func (a *s40hGateFree) Free(buf *cl.Buffer) error {
	close(a.entered)
	<-a.gate
	return a.Allocator.Free(buf)
}

// TestS40hPackageFreeRacingWrapperFreeSkipsTurn: a Counting's Free is
// under way (its wrapped Free is slow); another goroutine frees the same
// buffer with allocator.Free, which per its docs goes through the
// Counting's Free ("so that ... the count sees the free"), and Counting's
// Frees "take turns, each seeing the outcome of the one before". At
// 3b64820 the buffer was disowned while the wrapped Free ran: allocator.Free
// released it directly, and the Counting booked its own, first, Free as a
// bad free (Frees 0, BadFrees 1). Now the second is refused
// (ErrBeingFreed) and counted a bad free once the first frees the buffer.
func TestS40hPackageFreeRacingWrapperFreeSkipsTurn(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	g := &s40hGateFree{Allocator: d, entered: make(chan struct{}), gate: make(chan struct{})}
	c := allocator.NewCounting(g)
	buf, err := c.Allocate(4096)
	require.NoError(t, err)
	first := make(chan error, 1)
	go func() { first <- c.Free(buf) }()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("wrapped Free never entered")
	}
	second := make(chan error, 1)
	go func() { second <- allocator.Free(buf) }()
	var early error
	returnedEarly := false
	select {
	case early = <-second:
		returnedEarly = true
	case <-time.After(200 * time.Millisecond):
	}
	close(g.gate)
	var e1, e2 error
	select {
	case e1 = <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("Counting.Free hung")
	}
	if returnedEarly {
		e2 = early
	} else {
		select {
		case e2 = <-second:
		case <-time.After(10 * time.Second):
			t.Fatal("allocator.Free hung")
		}
	}
	assert.True(t, returnedEarly, "allocator.Free waited for the Free under way")
	assert.NoError(t, e1, "the first Free, under way, is the one that frees")
	assert.True(t, errors.Is(e2, allocator.ErrBeingFreed), "the second Free, refused: %v", e2)
	st := c.Stats()
	assert.EqualValues(t, 1, st.Frees, "stats %+v", st)
	assert.EqualValues(t, 1, st.BadFrees, "the second raced a Free that freed the buffer: a second free, counted once the first ended")
	assert.EqualValues(t, 0, st.Live)
}

// s40hFailOnce fails its first Free, leaving the buffer.
type s40hFailOnce struct {
	allocator.Allocator
	failed bool
}

func (a *s40hFailOnce) Free(buf *cl.Buffer) error {
	if !a.failed {
		a.failed = true
		return errors.New("s40h transient")
	}
	return a.Allocator.Free(buf)
}

// TestS40hFailedInnerFreeStealsOwnership: Counting over Budget. A Free
// through the Budget (the inner wrapper) that fails leaves the buffer as
// it was; the owners map's doc says the owner is "the outermost one whose
// Allocate returned it (Counting over Budget: the Counting)". Since 3b64820
// Budget.end's own(buf, b) makes the Budget the owner after its failed
// Free (no outer Free is under way to take it back): allocator.Free then
// routes to the Budget, past the Counting, which counts the buffer live
// for good (a leak report for a freed buffer).
func TestS40hFailedInnerFreeStealsOwnership(t *testing.T) {
	q := cltest.Queue(t)
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	b := allocator.NewBudget(&s40hFailOnce{Allocator: d}, 1<<20)
	c := allocator.NewCounting(b)
	buf, err := c.Allocate(4096)
	require.NoError(t, err)
	require.Error(t, b.Free(buf)) // fails, buffer kept
	require.False(t, buf.Released())
	require.NoError(t, allocator.Free(buf))
	assert.True(t, buf.Released())
	st := c.Stats()
	assert.EqualValues(t, 1, st.Frees, "allocator.Free bypassed the Counting: %+v", st)
	assert.EqualValues(t, 0, st.Live, "stats %+v", st)
	assert.EqualValues(t, 0, b.Live())
}
