package mempool_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
)

// Tasks, a queue each, write one block after its Close (on their own
// queue, flushed) and release their queue, while a poller calls Findings
// (FreeHeld drains the quarantine, with its check, by design: a write
// enqueued after that is not seen, so it is left out). At the end every such write is reported, exactly once,
// and nothing else.
func TestHostileS36dWriteAfterCloseAcrossReleases(t *testing.T) {
	for _, tc := range []struct{ arena, freeHeld bool }{{false, false}, {true, false}} {
		arena, freeHeld := tc.arena, tc.freeHeld
		t.Run(fmt.Sprintf("arena=%v/freeHeld=%v", arena, freeHeld), func(t *testing.T) {
			out := &syncBuffer{}
			opts := append(policyOptions(arena), mempool.WithSanitizer(), mempool.WithSanitizerOutput(out))
			f := newFixture(t, nil, opts...)
			tasks := cltest.Size(f.q, 8, 40)
			var sink errSink
			fail := sink.add
			var badMu sync.Mutex
			bad := map[uint64]bool{} // ids are addresses: reused
			writes := 0
			var done atomic.Bool
			var seen []mempool.Finding
			var seenMu sync.Mutex
			ok := withinWork(t, "the workload", func() {
				var workers, pollers sync.WaitGroup
				pollers.Go(func() {
					for !done.Load() {
						fs := f.pool.Findings()
						seenMu.Lock()
						seen = fs
						seenMu.Unlock()
						if freeHeld {
							fail(f.pool.FreeHeld())
						}
					}
				})
				for g := range 3 {
					workers.Go(func() {
						for i := range tasks {
							q, err := cl.NewCommandQueue(f.q.Context(), f.q.Device(), 0)
							if err != nil {
								fail(err)
								return
							}
							a := f.pool.On(q)
							size := int64(256 + 512*((g+i)%5))
							b, err := a.Allocate(size)
							if err != nil {
								fail(err)
								_ = q.Release()
								continue
							}
							buf, off, id := b.Base(), b.Offset(), b.ID()
							fail(b.Close())
							ev, err := q.EnqueueFillBuffer(buf, []byte{0x77}, off, 4)
							if err != nil {
								fail(err)
							} else {
								_ = ev.Release()
								badMu.Lock()
								bad[id] = true
								writes++
								badMu.Unlock()
							}
							fail(q.Flush())
							fail(q.Release())
						}
					})
				}
				workers.Wait()
				done.Store(true)
				pollers.Wait()
			})
			if !ok {
				return
			}
			assert.NoError(t, sink.err())
			final := f.pool.Findings()
			got := map[uint64]int{}
			for _, g := range final {
				if g.Kind == mempool.WriteAfterClose {
					got[g.BlockID]++
				} else {
					t.Errorf("unexpected finding %v", g)
				}
			}
			total := 0
			for id, n := range got {
				total += n
				if !bad[id] {
					t.Logf("block %#x: %d findings, never written", id, n)
				}
			}
			missing := max(0, writes-total)
			dup := max(0, total-writes)
			seenMu.Lock()
			t.Logf("%d writes after close, %d findings (%d at the poller's last call)", writes, total, len(seen))
			seenMu.Unlock()
			assert.Zero(t, missing, "writes after close never reported")
			assert.Zero(t, dup, "findings repeated or on blocks not written")
		})
	}
}
