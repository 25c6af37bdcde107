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

// s36a made forgetReleased use FinishedNoWait ("an On waited for another
// queue's kernel"). The sanitizer's queueOf still calls Finished, which
// waits for a Release under way, and it does so with the sanitizer's
// lock held (leaveQuarantine, checkQuarantine): while task Y's Release
// waits for Y's long kernel, a Close on X that pushes Y's block out of
// the quarantine holds s.mu for as long, and an unrelated Allocate on a
// third queue Z (the sanitizer's track takes s.mu) waits for Y's kernel
// too.
func TestHostileS36bSanitizerAllocateWaitsForAnotherTasksRelease(t *testing.T) {
	f := newFixture(t, nil, mempool.WithSanitizer())
	size := int64(mempool.SanitizerQuarantineBytes*5/8)&^4095 - 64
	qy, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
	require.NoError(t, err)
	qx := cltest.SecondQueue(t, f.q, 0)
	qz := cltest.SecondQueue(t, f.q, 0)
	k := cltest.SlowReadKernel(t, f.q)
	const n = 64
	x, err := f.q.Context().CreateBuffer(cl.MemReadWrite, 4*n)
	require.NoError(t, err)
	t.Cleanup(func() { x.Release() })
	outb, err := f.q.Context().CreateBuffer(cl.MemReadWrite, 4*n)
	require.NoError(t, err)
	t.Cleanup(func() { outb.Release() })

	by, err := f.pool.On(qy).Allocate(size)
	require.NoError(t, err)
	ev, err := qy.EnqueueFillBuffer(by.Buffer(), []byte{1}, 0, size)
	require.NoError(t, err)
	require.NoError(t, ev.Release())
	require.NoError(t, by.Close()) // quarantined, poisoned on Y
	// Y's long kernel, on other memory.
	require.NoError(t, k.SetArgs(x, outb, int32(cltest.Size(f.q, 1000, 200000000))))
	require.NoError(t, qy.EnqueueKernel(k, []int{n}, nil))
	require.NoError(t, qy.Flush())
	relDone := make(chan time.Duration, 1)
	start := time.Now()
	go func() { _ = qy.Release(); relDone <- time.Since(start) }()
	time.Sleep(50 * time.Millisecond)

	xDone := make(chan error, 1)
	go func() {
		bx, err := f.pool.On(qx).Allocate(size)
		if err == nil {
			err = bx.Close() // pushes Y's block out of the quarantine
		}
		xDone <- err
	}()
	time.Sleep(50 * time.Millisecond)
	t0 := time.Now()
	bz, err := f.pool.On(qz).Allocate(4096)
	zTook := time.Since(t0)
	require.NoError(t, err)
	require.NoError(t, bz.Close())
	yTook := <-relDone
	require.NoError(t, <-xDone)
	t.Logf("Y's Release took %v; Z's Allocate took %v", yTook, zTook)
	if yTook < 500*time.Millisecond {
		t.Skipf("Y's kernel too short to tell (%v)", yTook)
	}
	assert.Less(t, zTook, yTook/4, "an Allocate on Z waited for Y's kernel (the sanitizer's lock held across Finished)")
}
