package mempool_test

// Hostile review s40h: the ladder's last rung counts a block given back
// as an arrival only while p.waiting > 0, which the request raises just
// before its wait, after its decision and its allocator call.

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s40hRefuser refuses every Allocate once armed (the device is full) and
// runs onRefuse, once, inside the refused call.
type s40hRefuser struct {
	allocator.Allocator
	armed    atomic.Bool
	onRefuse atomic.Pointer[func()]
}

func (a *s40hRefuser) Allocate(size int64) (*cl.Buffer, error) {
	if a.armed.Load() {
		if f := a.onRefuse.Swap(nil); f != nil {
			(*f)()
		}
		return nil, cl.ErrMemObjectAllocationFailure
	}
	return a.Allocator.Allocate(size)
}

func (a *s40hRefuser) Unwrap() allocator.Allocator { return a.Allocator }

// TestS40hBlockGivenBackDuringRefusalMissed: block A of W's size is held;
// R is allocating its segment (gated: memory in flight); the device
// refuses W, which waits on the last rung. A small block C is closed: an
// arrival (gaveBack), W wakes and retries. While the device refuses that
// retry, the user closes A: its block goes back to the queue cache and
// could serve W at once. But p.waiting is 0 then (W lowered it after its
// first wait and raises it again only just before its next), so the Close
// counts no arrival; W's next wait compares with settledSeen from its
// decision and sleeps out the whole wait (a minute here, 500 ms by
// default), per doc.go step 7 "if anything came back ... since the
// refusal". Cause: release.go give (p.waiting.Load() > 0 before
// gaveBack) and ladder.go nextRung (p.waiting.Add(1) after the refusal).
func TestS40hBlockGivenBackDuringRefusalMissed(t *testing.T) {
	size := int64(1 << 20)
	g := newGated()
	ref := &s40hRefuser{}
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator {
		g.Allocator = a
		ref.Allocator = g
		return ref
	})
	mempool.SetInFlightWait(f.pool, time.Minute)
	a, err := f.pool.Allocate(size)
	require.NoError(t, err)
	c, err := f.pool.Allocate(4096)
	require.NoError(t, err)
	open := g.hold()
	var once sync.Once
	release := func() { once.Do(open) }
	defer release()
	r := heldInAllocator(t, f.pool, g, size)
	ref.armed.Store(true)
	w := downToLastRung(f.pool, size)
	if w.returned(0) {
		t.Skipf("W returned before the test: %v", w.err)
	}
	closedA := make(chan error, 1)
	hook := func() {
		done := make(chan error, 1)
		go func() { done <- a.Close() }()
		select {
		case err := <-done:
			closedA <- err
		case <-time.After(hangLimit):
		}
	}
	ref.onRefuse.Store(&hook)
	t0 := time.Now()
	require.NoError(t, c.Close()) // an arrival: W wakes and retries
	select {
	case err := <-closedA:
		require.NoError(t, err)
	case <-time.After(hangLimit):
		t.Fatal("W never retried after C's Close")
	}
	t.Logf("W retried %v after C closed", time.Since(t0))
	served := w.returned(3 * time.Second)
	t.Logf("served=%v at %v; stats %+v", served, time.Since(t0), f.pool.Stats())
	release()
	tr := time.Now()
	wb, wErr := w.result(t, "W")
	t.Logf("W returned %v after the gate opened: %v", time.Since(tr), wErr)
	if wErr == nil {
		require.NoError(t, wb.Close())
	}
	ref.armed.Store(false)
	rb, rErr := r.result(t, "R")
	t.Logf("R: %v", rErr)
	if rErr == nil {
		require.NoError(t, rb.Close())
	}
	assert.True(t, served, "W slept on though A's block came back during its refusal")
	assert.NoError(t, wErr)
}

// A block that fits, given back while the device refuses the request's
// segment (its Close runs inside the refused allocation): the ladder's
// free rung freed it, the largest wholly free segment, and asked the
// device again, which refused: out of memory with the block that fit gone
// back to the device. Found while s40h's test above ran on a busy machine
// (its hook fired during the request's first refusal). Now the rung
// retries first, and the block serves the request.
func TestS40hFreeRungKeepsABlockThatFits(t *testing.T) {
	size := int64(1 << 20)
	ref := &s40hRefuser{}
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator { ref.Allocator = a; return ref })
	a, err := f.pool.Allocate(size)
	require.NoError(t, err)
	closeA := func() { assert.NoError(t, a.Close()) }
	ref.onRefuse.Store(&closeA)
	ref.armed.Store(true) // the device is full from now on
	w, err := f.pool.Allocate(size)
	ref.armed.Store(false)
	require.NoError(t, err, "A's block, given back during the refusal, fits")
	s := f.pool.Stats()
	assert.Zero(t, s.DeviceFrees, "A's segment freed to ask the device again")
	assert.Equal(t, int64(1), s.DeviceAllocs)
	require.NoError(t, w.Close())
}
