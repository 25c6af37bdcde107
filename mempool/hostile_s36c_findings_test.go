package mempool_test

import (
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Findings' doc: it "completes the checks of every block closed so far,
// waiting for the commands that may still use them, checks the poison of
// the blocks still in quarantine, and returns every finding". A block in
// quarantine, written after its Close on its own queue, whose owner
// releases the queue (a queue per task) while another goroutine calls
// Findings: checkQuarantine only TryHolds the queue under s.mu and skips
// the block while the Release is under way, so Findings returns without
// the write after close, which it finds on the next call. Expected: the
// first Findings, made after the write was enqueued and flushed, reports
// it (it may wait for the Release, as it waits for other commands).
func TestHostileS36cFindingsSkipsBlockWhoseQueueIsBeingReleased(t *testing.T) {
	out := &syncBuffer{}
	f := newFixture(t, nil, mempool.WithSanitizer(), mempool.WithSanitizerOutput(out))
	const n = 64
	iters := int32(cltest.Size(f.q, 20000, 20000000))
	qa, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
	require.NoError(t, err)
	k := cltest.SlowReadKernel(t, qa)
	x, err := f.q.Context().CreateBuffer(cl.MemReadWrite, 4*n)
	require.NoError(t, err)
	defer x.Release()
	scratch, err := f.q.Context().CreateBuffer(cl.MemReadWrite, 4*n)
	require.NoError(t, err)
	defer scratch.Release()

	const size = 4000
	b, err := f.pool.On(qa).Allocate(size)
	require.NoError(t, err)
	id, base, off := b.ID(), b.Base(), b.Offset()
	require.NoError(t, b.Close()) // poisoned on qa, in quarantine

	// The task keeps qa busy, then writes the closed block (its bug), and
	// releases its queue.
	require.NoError(t, k.SetArgs(x, scratch, iters))
	require.NoError(t, qa.EnqueueKernel(k, []int{n}, nil))
	ev, err := qa.EnqueueFillBuffer(base, []byte{0x5a}, off, 16)
	require.NoError(t, err)
	require.NoError(t, ev.Release())
	require.NoError(t, qa.Flush())
	released := make(chan error, 1)
	start := time.Now()
	go func() { released <- qa.Release() }()
	for qa.TryHold() { // until the Release is under way
		qa.Unhold()
		time.Sleep(time.Millisecond)
	}
	first := f.pool.Findings()
	stillReleasing := !qa.FinishedNoWait()
	require.NoError(t, <-released)
	t.Logf("release took %v; Findings during it: %v", time.Since(start), stillReleasing)
	second := f.pool.Findings()
	found := func(fs []mempool.Finding) bool {
		for _, g := range fs {
			if g.Kind == mempool.WriteAfterClose && g.BlockID == id {
				return true
			}
		}
		return false
	}
	require.True(t, found(second), "control: the write after close is found once the queue is released: %v", second)
	assert.True(t, found(first), "Findings, called while the block's queue was being released, skipped the block in quarantine: %v", first)
}
