package mempool_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A queue whose cache holds blocks, released and forgotten: its line of
// Stats.Queues stays, with nothing cached ("caches go back to the
// policy"), and Stats agrees with Snapshot on what is held.
func TestHostileS36cForgottenQueueCountsAgree(t *testing.T) {
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			f := newFixture(t, nil, policyOptions(arena)...)
			q, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
			require.NoError(t, err)
			a := f.pool.On(q, mempool.QueueName("gone"))
			var bs []*mempool.PooledBuffer
			for i := range 6 {
				b, err := a.Allocate(int64(512 * (i + 1)))
				require.NoError(t, err)
				bs = append(bs, b)
			}
			for _, b := range bs {
				require.NoError(t, b.Close())
			}
			before := f.pool.Stats()
			require.Greater(t, before.Queues[1].Cached, int64(0), "the queue's cache holds its blocks")
			require.NoError(t, q.Release())
			for range mempool.ForgetMin + 2 {
				useOnce(t, f, 1<<16)
			}
			require.LessOrEqual(t, mempool.QueueStates(f.pool), mempool.ForgetMin+1)
			s := f.pool.Stats()
			pooltest.CheckStats(t, s)
			assert.Equal(t, "gone", s.Queues[1].Name)
			assert.Equal(t, int64(6), s.Queues[1].Requests)
			assert.Equal(t, int64(0), s.Queues[1].Cached, "released and forgotten: caches nothing")
			var cached int64
			for i, qs := range s.Queues {
				_ = i
				cached += qs.Cached
			}
			snap := f.pool.Snapshot()
			checkSnapshot(t, snap)
			var held, active int
			for _, seg := range snap.Segments {
				for _, b := range seg.Blocks {
					switch b.State {
					case mempool.StateHeld:
						held++
					case mempool.StateActive:
						active++
					}
				}
			}
			assert.Equal(t, s.ActiveBlocks, active, "Stats and Snapshot: active blocks")
			assert.Equal(t, 0, active)
			assert.Equal(t, int64(s.Segment.All.Current), int64(len(snap.Segments)), "segments")
			assert.Equal(t, s.ManagedBytes, snap.ManagedBytes)
			require.NoError(t, f.pool.FreeHeld())
			s = f.pool.Stats()
			assert.Equal(t, 0, s.HeldBlocks, "FreeHeld freed what the forgotten queue cached")
			assert.Equal(t, int64(0), s.ManagedBytes)
		})
	}
}

// A buffer allocated on a queue, dropped without Close after its queue was
// released and forgotten, is given back by its finalizer: with the
// sanitizer, a Dropped finding, no warning, and every device allocation
// freed once (the fixture).
func TestHostileS36cDroppedOnForgottenQueue(t *testing.T) {
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			out := &syncBuffer{}
			opts := append(policyOptions(arena), mempool.WithSanitizer(), mempool.WithSanitizerOutput(out))
			f := newFixture(t, nil, opts...)
			q, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
			require.NoError(t, err)
			func() {
				for range 4 {
					b, err := f.pool.On(q).Allocate(3000)
					require.NoError(t, err)
					ev, err := q.EnqueueFillBuffer(b.Buffer(), []byte{1}, 0, 3000)
					require.NoError(t, err)
					require.NoError(t, ev.Release())
				}
			}()
			require.NoError(t, q.Release())
			for range mempool.ForgetMin + 2 {
				useOnce(t, f, 1<<16)
			}
			deadline := time.Now().Add(5 * time.Second)
			for f.pool.Stats().ActiveBlocks > 0 && time.Now().Before(deadline) {
				runtime.GC()
				time.Sleep(10 * time.Millisecond)
			}
			require.Equal(t, 0, f.pool.Stats().ActiveBlocks, "the finalizers gave the blocks back")
			n := 0
			for _, fd := range f.pool.Findings() {
				if fd.Kind == mempool.Dropped {
					n++
				} else {
					t.Errorf("unexpected finding %v", fd)
				}
			}
			assert.Equal(t, 4, n, "a Dropped finding per buffer")
			assert.NotContains(t, out.String(), "cannot check")
		})
	}
}
