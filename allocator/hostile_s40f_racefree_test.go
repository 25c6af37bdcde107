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

// s40fStuckFree is an allocator whose Free, while fail is set, waits for
// release and then fails without releasing the buffer (a transient error:
// the caller may retry, as Budget's and Counting's docs provide for).
type s40fStuckFree struct {
	allocator.Allocator
	entered, release chan struct{}
}

var errS40fTransient = errors.New("transient free failure")

func (a *s40fStuckFree) Free(buf *cl.Buffer) error {
	if a.entered != nil {
		close(a.entered)
		a.entered = nil
		<-a.release
		return errS40fTransient
	}
	return a.Allocator.Free(buf)
}

// TestS40fFreeRacingAFailingFree: a Free of a buffer racing another Free of
// it that fails (transiently: the buffer stays allocated, the wrapper's for
// a retry) was answered ErrFreed, "already freed", and Counting counted it
// a bad free, though no one freed the buffer and the wrapper did hand it
// out. Now it is refused with ErrBeingFreed, counted a bad free only if
// the other Free frees the buffer. Budget's doc: "A buffer b did not hand out, or has freed, is refused
// with an error matching ErrFreed ...; of racing Frees of one buffer, one
// frees it" (here none does); Counting's: "A buffer freed twice, or never
// allocated here, is refused with ErrFreed and counted as a bad free" (it
// is neither). A leak hunt then reports a double free that never happened.
func TestS40fFreeRacingAFailingFree(t *testing.T) {
	cltest.Watchdog(t, 30*time.Second)
	d, wrappers := bookkeepers(t)
	for name, wrap := range wrappers {
		t.Run(name, func(t *testing.T) {
			inner := &s40fStuckFree{Allocator: d}
			w := wrap(inner)
			buf, err := w.Allocate(64)
			require.NoError(t, err)
			inner.entered, inner.release = make(chan struct{}), make(chan struct{})
			entered := inner.entered
			first := make(chan error, 1)
			go func() { first <- w.Free(buf) }()
			select {
			case <-entered:
			case <-time.After(10 * time.Second):
				t.Fatal("the first Free never reached the wrapped allocator")
			}
			second := w.Free(buf) // while the first is under way, and will fail
			close(inner.release)
			var firstErr error
			select {
			case firstErr = <-first:
			case <-time.After(10 * time.Second):
				t.Fatal("the first Free never returned")
			}
			require.ErrorIs(t, firstErr, errS40fTransient)
			require.False(t, buf.Released(), "no one freed the buffer")
			assert.ErrorIs(t, second, allocator.ErrBeingFreed)
			assert.NotErrorIs(t, second, allocator.ErrFreed,
				"a Free racing a Free that failed was told the buffer was already freed; it is allocated, and %s's", name)
			if c, ok := w.(*allocator.Counting); ok {
				assert.Zero(t, c.Stats().BadFrees, "a bad free counted where no buffer was freed twice: %+v", c.Stats())
			}
			require.NoError(t, w.Free(buf), "the retry the docs provide for")
			assert.True(t, buf.Released())
		})
	}
}
