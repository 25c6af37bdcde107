package mempool_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// statsWriter is a sanitizer output that logs the pool's figures beside
// each finding it is given: it reads the pool's Stats at each Write.
type statsWriter struct {
	p     atomic.Pointer[mempool.Pool]
	lines atomic.Int64
}

func (w *statsWriter) Write(b []byte) (int, error) {
	if p := w.p.Load(); p != nil {
		_ = p.Stats().HeldBytes
	}
	w.lines.Add(1)
	return len(b), nil
}

// Fixed this session (a deadlock before): a sanitizer output that reads the pool's Stats hangs
// the pool.
//
// Contract: WithSanitizerOutput(w) "sets where the sanitizer prints each
// finding as it finds it, one line each ... A w that panics is called no
// more (the panic does not reach the pool's caller)": nothing says w may
// not call the pool, and hooks, which are called the same way from the
// pool's operations, "may call the pool's read-only methods (Stats)". A
// writer that logs the pool's memory beside each finding is a natural
// one. The sanitizer prints under its own mutex (report: "s.mu must be
// held"); Stats takes p.mu and then, for the quarantine
// (sanitizer.quarantined), s.mu again: the goroutine waits for itself.
// Here Close, which reports a LeakedAtClose, never returns.
func TestHostileS39cSanitizerOutputThatReadsStatsDeadlocks(t *testing.T) {
	w := &statsWriter{}
	_, p := sanPoolTo(t, w, mempool.WithLimit(0))
	w.p.Store(p)
	b, err := p.Allocate(1000)
	require.NoError(t, err)
	_ = b
	var closeErr error
	if !within(t, "Close of a pool with a leaked block, whose finding the writer logs with Stats", func() { closeErr = p.Close() }) {
		return // the pool's goroutine is stuck holding its locks: call nothing more of it
	}
	assert.NoError(t, closeErr)
	assert.Equal(t, int64(1), w.lines.Load(), "one LeakedAtClose line")
	require.NoError(t, b.Close())
}

// Fixed this session (a deadlock before): the same writer, for a finding reported at a harvest
// (an out-of-bounds write, read back by Findings): Findings never
// returns (harvest reports under s.mu; the writer's Stats waits for
// s.mu in sanitizer.quarantined).
func TestHostileS39cSanitizerOutputThatReadsStatsAtFindings(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	w := &statsWriter{}
	q, p := sanPoolTo(t, w, mempool.WithLimit(0))
	w.p.Store(p)
	b, err := p.Allocate(1000)
	require.NoError(t, err)
	ev, err := q.EnqueueWriteBuffer(b.Base(), true, b.Offset()+1000, []byte{1})
	require.NoError(t, err)
	_ = ev.Release()
	require.NoError(t, b.Close())
	var got []mempool.Finding
	if !within(t, "Findings, whose out-of-bounds finding the writer logs with Stats", func() { got = p.Findings() }) {
		return
	}
	assert.Len(t, got, 1)
	require.NoError(t, p.Close())
}
