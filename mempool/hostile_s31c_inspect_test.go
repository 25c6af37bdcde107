package mempool_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/trace"
)

// s31cPanickyHistory is a hook that keeps a history (as memhooks.History
// does) whose History panics.
type s31cPanickyHistory struct{}

func (s31cPanickyHistory) Handle(mempool.Event) {}
func (s31cPanickyHistory) History() []trace.Event {
	panic("s31c: History fails")
}

// FAILS on 0001afb: expected, after a Snapshot whose history hook
// panicked (and whose panic the caller recovered), Stats to return;
// actual: it never does (the watchdog gives up after 3 s). Snapshot calls
// the hook's History (snapshot.go:129) between lockCaches
// (snapshot.go:91) and unlockCaches (snapshot.go:137) with no defer, so a
// panic leaves p.mu and every queue cache's lock held, and p.inspecting
// at 1 (qcache.go:348): every later operation of the pool waits forever,
// and were the locks let go, joining would stay off for good
// (othersBusy and flushLocked read p.inspecting > 0 as "only Stats or
// Snapshot"). Every other hook call is recovered (hooks.go:142, callHook):
// a hook's panic is meant to leave the pool working. Now Snapshot
// recovers it too (historyOf): the snapshot then has no history.
func TestHostileS31cSnapshotHistoryPanicLeaksLocks(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	p, err := mempool.New(imm)
	require.NoError(t, err)
	remove := p.AddHook(s31cPanickyHistory{})
	x, err := p.On(q).Allocate(4096)
	require.NoError(t, err)
	require.NoError(t, x.Close())

	func() {
		defer func() { _ = recover() }()
		_ = p.Snapshot()
	}()
	remove()

	done := make(chan mempool.Stats, 1)
	go func() { done <- p.Stats() }()
	select {
	case s := <-done:
		require.Zero(t, s.ActiveBlocks)
		require.NoError(t, p.Close())
	case <-time.After(3 * time.Second):
		// The pool is left as is (its Close would wait forever too).
		t.Fatal("Stats after a Snapshot whose History hook panicked waits forever: the pool's and the caches' locks are still held")
	}
}
