package mempool_test

// Hostile review s39g: a Set's pools share the one sanitizer output the
// Set was given, each with its own serialization.

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

// s39gOverlapWriter blocks its first call until release is closed (then
// panics if panicky), and counts the calls under way at once.
type s39gOverlapWriter struct {
	panicky bool
	calls   atomic.Int64
	now     atomic.Int64
	most    atomic.Int64
	entered chan struct{} // closed at the first call
	second  chan struct{} // closed at the second call
	release chan struct{}
	once    sync.Once
}

func newS39gOverlapWriter(panicky bool) *s39gOverlapWriter {
	return &s39gOverlapWriter{panicky: panicky, entered: make(chan struct{}), second: make(chan struct{}), release: make(chan struct{})}
}

func (w *s39gOverlapWriter) Write(b []byte) (int, error) {
	n := w.now.Add(1)
	defer w.now.Add(-1)
	for {
		m := w.most.Load()
		if n <= m || w.most.CompareAndSwap(m, n) {
			break
		}
	}
	switch w.calls.Add(1) {
	case 1:
		close(w.entered)
		<-w.release
		if w.panicky {
			panic("s39g: output writer broken")
		}
	case 2:
		w.once.Do(func() { close(w.second) })
	}
	return len(b), nil
}

// s39gSetLeak makes a Set of two contexts' pools with the sanitizer and
// output w, and leaves a block open in each; it returns the two pools.
func s39gSetLeak(t *testing.T, w *s39gOverlapWriter) (*mempool.Pool, *mempool.Pool, func()) {
	qa, qb := cltest.Queue(t), cltest.Queue(t) // two contexts: two pools
	require.True(t, qa.Context() != qb.Context(), "two contexts")
	s := mempool.NewSet(nil, mempool.WithSanitizer(), mempool.WithSanitizerOutput(w))
	pa, err := s.Pool(qa)
	require.NoError(t, err)
	pb, err := s.Pool(qb)
	require.NoError(t, err)
	la, err := pa.Allocate(1000)
	require.NoError(t, err)
	lb, err := pb.Allocate(1000)
	require.NoError(t, err)
	return pa, pb, func() { _ = la.Close(); _ = lb.Close() }
}

// Fixed this session (it failed before): the output given to a Set was
// called by two of its pools at once.
//
// Contract: WithSanitizerOutput: "w is called ... one call at a time";
// NewSet: "Each pool is made with opts" -- the Set's user gives one w,
// once; nothing says that a Set calls it concurrently (a Set "is safe for
// concurrent use", and the pools it makes are its own business).
//
// Observed: pool A's Close prints its LeakedAtClose line and its call to
// w is under way; pool B's Close prints its own and calls w at once: two
// calls overlap.
//
// Likely cause: mempool/sanitize_output.go: the serialization
// (s.writing, s.outQ) is per sanitizer, i.e. per pool, and
// mempool/set.go, Set.poolOf gives every pool the Set's options, w
// included, unshared.
func TestHostileS39gSetsPoolsCallTheOutputAtOnce(t *testing.T) {
	cltest.Watchdog(t, 5*time.Minute)
	w := newS39gOverlapWriter(false)
	pa, pb, cleanup := s39gSetLeak(t, w)
	aDone := goErr(pa.Close)
	select {
	case <-w.entered:
	case <-time.After(hangLimit):
		close(w.release)
		t.Fatal("pool A's Close never printed its LeakedAtClose finding")
	}
	bDone := goErr(pb.Close)
	waits := []<-chan error{aDone, bDone}
	select {
	case <-w.second: // w called again while its first call is under way
	case err := <-bDone: // or pool B's Close returned, its line left for later
		assert.NoError(t, err)
		waits = waits[:1]
	case <-time.After(hangLimit):
		// Pool B's Close waits for A's writer: allowed (a write under
		// way), not what this test looks for.
	}
	close(w.release)
	for _, ch := range waits {
		select {
		case err := <-ch:
			assert.NoError(t, err)
		case <-time.After(hangLimit):
			t.Fatalf("a pool's Close did not return within %v", hangLimit)
		}
	}
	assert.Equal(t, int64(1), w.most.Load(), "w is called one call at a time: calls under way at once")
	cleanup()
}

// Fixed this session (it failed before): the output given to a Set was
// called again after it panicked, by the Set's other pool.
//
// Contract: WithSanitizerOutput: "A w that panics is called no more (the
// panic does not reach the pool's caller)".
//
// Observed: pool A's call panics; pool B, whose sanitizer never saw the
// panic, calls w at its Close's LeakedAtClose line.
//
// Likely cause: as above: "called no more" is s.out = nil in one pool's
// sanitizer (sanitize_output.go, sanitizer.write).
func TestHostileS39gSetsOtherPoolCallsAPanickedOutput(t *testing.T) {
	cltest.Watchdog(t, 5*time.Minute)
	w := newS39gOverlapWriter(true)
	pa, pb, cleanup := s39gSetLeak(t, w)
	close(w.release) // the first call panics at once
	if !within(t, "pool A's Close, whose writer panics", func() { assert.NoError(t, pa.Close()) }) {
		return
	}
	require.Equal(t, int64(1), w.calls.Load(), "pool A's Close printed its LeakedAtClose line")
	if !within(t, "pool B's Close", func() { assert.NoError(t, pb.Close()) }) {
		return
	}
	assert.Equal(t, int64(1), w.calls.Load(), "a w that panics is called no more")
	assert.Len(t, pb.Findings(), 1, "Findings still has every finding")
	cleanup()
}
