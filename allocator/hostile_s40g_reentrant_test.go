package allocator_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s40gOwnerFree is a thin allocator (a logger, a tracer) whose Free frees
// through allocator.Free, the package function that "frees buf through
// the allocator that handed it out, for code that holds a buffer but not
// its allocator". Under a Budget or a Counting, that owner is the wrapper
// itself: its Free is called again, re-entrantly, for the same buffer.
type s40gOwnerFree struct {
	allocator.Allocator
	calls int
}

func (a *s40gOwnerFree) Free(buf *cl.Buffer) error {
	a.calls++
	if a.calls > 1 { // the re-entrant call: free it for real
		return a.Allocator.Free(buf)
	}
	return allocator.Free(buf)
}

// TestS40gReentrantFreeWaitsForItself: before 8f46212 a Free of a buffer
// reached again from inside the wrapped allocator's Free of it (here via
// allocator.Free, which routes to the buffer's owner: the wrapper) was
// answered at once (ErrFreed: not in the books while the first Free ran).
// Now the books make Frees of one buffer take turns, and the inner call
// waits for the outer one, which waits for the inner one: the goroutine
// hangs for good, holding the buffer and its budget. The docs ("Frees of
// one buffer take turns, each seeing the outcome of the one before") say
// nothing of a wait that can never end; a hang is no outcome. Now the
// inner Free is refused with ErrBeingFreed, at once.
func TestS40gReentrantFreeWaitsForItself(t *testing.T) {
	d, wrappers := bookkeepers(t)
	for name, wrap := range wrappers {
		t.Run(name, func(t *testing.T) {
			inner := &s40gOwnerFree{Allocator: d}
			w := wrap(inner)
			buf, err := w.Allocate(64)
			require.NoError(t, err)
			done := make(chan error, 1)
			go func() { done <- w.Free(buf) }()
			select {
			case err := <-done:
				// The inner Free of it, while the outer is under way, is
				// refused; the outer fails with it, and buf stays w's.
				assert.ErrorIs(t, err, allocator.ErrBeingFreed)
			case <-time.After(5 * time.Second):
				t.Fatalf("%s.Free whose wrapped Free frees the buffer through allocator.Free (its owner, the %s) never returned: it waits for itself", name, name)
			}
			require.False(t, buf.Released())
			require.NoError(t, w.Free(buf), "the retry (the wrapped Free frees it directly this time)")
			assert.True(t, buf.Released())
			if c, ok := w.(*allocator.Counting); ok {
				assert.Zero(t, c.Stats().BadFrees, "%+v", c.Stats())
				assert.Zero(t, c.Stats().Live)
			}
		})
	}
}

// s40gExitFree is an allocator whose first Free ends its goroutine
// (runtime.Goexit: what t.FailNow, require.* in a test allocator, does)
// without releasing the buffer.
type s40gExitFree struct {
	allocator.Allocator
	exited bool
}

func (a *s40gExitFree) Free(buf *cl.Buffer) error {
	if !a.exited {
		a.exited = true
		runtime.Goexit()
	}
	return a.Allocator.Free(buf)
}

// TestS40gFreeThatNeverReturnsClaimsForever: the wrapped Free ends its
// goroutine with runtime.Goexit (a require.NoError failing inside a test
// allocator's Free). freeInner's recover sees no panic, and the wrapper's
// Free unwinds with the buffer claimed in its books ("a Free of it under
// way"): keep/drop never run. Every later Free of that buffer, on any
// goroutine, now waits forever (before 8f46212 it was refused at once
// with ErrFreed). The docs promise panics are handled ("a Free that panics
// is a failure too: b's books are set so"); an unwinding that is not a
// panic leaves the books claimed and the next Free hangs.
func TestS40gFreeThatNeverReturnsClaimsForever(t *testing.T) {
	d, wrappers := bookkeepers(t)
	for name, wrap := range wrappers {
		t.Run(name, func(t *testing.T) {
			inner := &s40gExitFree{Allocator: d}
			w := wrap(inner)
			buf, err := w.Allocate(64)
			require.NoError(t, err)
			exited := make(chan struct{})
			go func() {
				defer close(exited)
				_ = w.Free(buf) // ends in Goexit
			}()
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				t.Fatal("the first Free's goroutine never ended")
			}
			require.False(t, buf.Released())
			done := make(chan error, 1)
			go func() { done <- w.Free(buf) }()
			select {
			case err := <-done:
				t.Logf("the retry returned %v", err)
			case <-time.After(5 * time.Second):
				t.Fatalf("a retry of %s.Free after a wrapped Free that ended its goroutine waits forever: the buffer stays claimed", name)
			}
		})
	}
}
