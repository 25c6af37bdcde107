package mempool_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s39fCloserWriter is a sanitizer output that stops the program's use of
// the pool at the first finding: it closes the pool (a fail-fast check
// in a test harness). entered is closed when it is first called, closed
// once its Close returned.
type s39fCloserWriter struct {
	p       atomic.Pointer[mempool.Pool]
	once    sync.Once
	entered chan struct{}
	closed  chan struct{}
}

func (w *s39fCloserWriter) Write(b []byte) (int, error) {
	w.once.Do(func() {
		close(w.entered)
		if p := w.p.Load(); p != nil {
			_ = p.Close()
		}
		close(w.closed)
	})
	return len(b), nil
}

// Fixed this session (a deadlock before): a sanitizer output that closes the pool at the first
// finding hangs, when that finding is read at a harvest (here: a
// PooledBuffer's Close, once a batch of 1024 checks is full).
//
// Contract: WithSanitizerOutput (after f341535): "w is called with none
// of the pool's locks held: it may read the pool (Stats, Snapshot,
// Summary), but not call Findings"; Close: "Close is idempotent"; nothing
// forbids w to close the pool. The fix moved the write out of s.mu, but
// harvest (sanitize_device.go) still holds harvestMu when its deferred
// s.unlock writes: the writer runs under harvestMu, and Close's
// poolClosing calls harvest(true) first, which waits for harvestMu, held
// by its own goroutine. (So does a PooledBuffer's Close after the pool's,
// through done → harvest, and releaseIfIdle.)
//
// Likely cause: mempool/sanitize_device.go, sanitizer.harvest: `defer
// s.unlock()` runs before `defer s.harvestMu.Unlock()`.
func TestHostileS39fSanitizerOutputThatClosesThePoolAtAHarvest(t *testing.T) {
	cltest.Watchdog(t, 5*time.Minute)
	w := &s39fCloserWriter{entered: make(chan struct{}), closed: make(chan struct{})}
	q, p := sanPoolTo(t, w, mempool.WithLimit(0))
	w.p.Store(p)

	bad, err := p.Allocate(1000)
	require.NoError(t, err)
	ev, err := q.EnqueueWriteBuffer(bad.Base(), true, bad.Offset()+1000, []byte{1})
	require.NoError(t, err)
	_ = ev.Release()
	require.NoError(t, bad.Close()) // its guard's check: the first of a batch

	// Small blocks, allocated and closed, until a Close reads the full
	// batch (done → harvest(false)) and prints the out-of-bounds finding.
	go func() {
		for range 4096 {
			select {
			case <-w.entered:
				return
			default:
			}
			b, err := p.Allocate(64)
			if err != nil {
				return // closed by the writer, on another Close
			}
			_ = q.Finish() // the checks complete: the harvest reads them
			_ = b.Close()
		}
	}()
	select {
	case <-w.entered:
	case <-time.After(workLimit):
		t.Fatal("the writer was never given the out-of-bounds finding")
	}
	select {
	case <-w.closed:
	case <-time.After(hangLimit):
		t.Errorf("the writer's Close of the pool did not return within %v: it hangs (harvest holds harvestMu while it writes; Close's poolClosing harvests)", hangLimit)
		return // the pool's goroutines are stuck: touch nothing more
	}
	assert.NotEmpty(t, p.Findings())
}

// s39fPanicOnceWriter blocks at its first call until release is closed,
// then panics; every later call is counted in after.
type s39fPanicOnceWriter struct {
	calls   atomic.Int64
	after   atomic.Int64
	entered chan struct{}
	release chan struct{}
}

func (w *s39fPanicOnceWriter) Write(b []byte) (int, error) {
	if w.calls.Add(1) == 1 {
		close(w.entered)
		<-w.release
		panic("s39f: output writer broken")
	}
	w.after.Add(1)
	return len(b), nil
}

// Fixed this session (it failed before): a sanitizer output that panics
// was called again, with a line another goroutine printed while the
// panicking call was under way.
//
// Contract: WithSanitizerOutput: "A w that panics is called no more (the
// panic does not reach the pool's caller)". Before f341535 the write and
// the reset of s.out were under one hold of s.mu; now unlock takes its
// lines and s.out under s.mu, lets go, and writes under outMu: a second
// goroutine's unlock that took `out` (still w) before the first call
// panicked waits on outMu, and once the panic is recovered (s.out = nil)
// it writes to the w it took.
//
// Here: the pool's Close prints the LeakedAtClose of two open blocks and
// its writer call blocks; meanwhile one of those blocks is closed on
// another goroutine, and its out-of-bounds finding, harvested at once
// (the pool is closed), waits for outMu; then the first call panics.
//
// Now one goroutine writes at a time, and lines printed meanwhile are
// queued for it (sanitize_output.go): the queued line is dropped with the
// output when the call under way panics.
func TestHostileS39fPanickedOutputWriterIsCalledAgain(t *testing.T) {
	cltest.Watchdog(t, 5*time.Minute)
	w := &s39fPanicOnceWriter{entered: make(chan struct{}), release: make(chan struct{})}
	q, p := sanPoolTo(t, w, mempool.WithLimit(0))
	leaked, err := p.Allocate(1000)
	require.NoError(t, err)
	bad, err := p.Allocate(1000)
	require.NoError(t, err)
	ev, err := q.EnqueueWriteBuffer(bad.Base(), true, bad.Offset()+1000, []byte{1})
	require.NoError(t, err)
	_ = ev.Release()

	closeDone := make(chan error, 1)
	go func() { closeDone <- p.Close() }()
	select {
	case <-w.entered:
	case <-time.After(hangLimit):
		close(w.release)
		t.Fatal("the pool's Close never printed its LeakedAtClose findings")
	}
	// The Close of bad has its finding while the writer's first call is
	// under way: the line is queued for that call, and the Close returns.
	select {
	case err := <-goErr(bad.Close):
		assert.NoError(t, err, "the Close of the block written out of bounds")
	case <-time.After(hangLimit):
		close(w.release)
		t.Fatal("the Close of the block written out of bounds waited for the writer")
	}
	close(w.release)
	select {
	case err := <-closeDone:
		assert.NoError(t, err, "the pool's Close")
	case <-time.After(hangLimit):
		t.Fatalf("the pool's Close did not return within %v", hangLimit)
	}
	assert.Zero(t, w.after.Load(), "the writer panicked: it is called no more")
	kinds := findingKinds(p.Findings())
	assert.Equal(t, 2, kinds[mempool.LeakedAtClose], "Findings still has every finding")
	assert.Equal(t, 1, kinds[mempool.OutOfBounds], "Findings still has every finding")
	require.NoError(t, leaked.Close())
}

// goErr runs f on a goroutine and returns the channel its error comes on.
func goErr(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}
