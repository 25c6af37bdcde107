package memhooks_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s41dLockedBuf is a bytes.Buffer that the test reads while a recorder
// may still write (it never should after Close; the lock makes -race
// quiet about the test's own reads only).
type s41dLockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *s41dLockedBuf) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *s41dLockedBuf) Bytes() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return bytes.Clone(w.b.Bytes())
}

// s41dCheck checks a recorded trace as the recorder's doc promises: it
// reads back whole (ReadComplete, which checks times and the live ids),
// blocks numbered 1, 2, ... in the order of their allocations, segments
// too, apart, and queues 1, 2, ... in the order of their first use. It
// returns the blocks and segment bytes live at the end.
func s41dCheck(t *testing.T, data []byte) (events []trace.Event, liveBlocks int, liveSegBytes int64) {
	t.Helper()
	events, err := trace.ReadComplete(bytes.NewReader(data))
	require.NoError(t, err)
	require.NoError(t, trace.Check(events))
	var lastBlock, lastSeg int64
	maxQueue := 0
	blocks, segs := map[int64]bool{}, map[int64]int64{}
	for i, ev := range events {
		if ev.Queue > maxQueue {
			assert.Equal(t, maxQueue+1, ev.Queue, "event %d: queues are numbered in the order of their first use", i+1)
			maxQueue = ev.Queue
		}
		switch ev.Op {
		case trace.Alloc:
			assert.Equal(t, lastBlock+1, ev.ID, "event %d: blocks numbered 1, 2, ...", i+1)
			lastBlock = ev.ID
			blocks[ev.ID] = true
		case trace.Free:
			delete(blocks, ev.ID)
		case trace.SegmentAlloc:
			assert.Equal(t, lastSeg+1, ev.ID, "event %d: segments numbered 1, 2, ...", i+1)
			lastSeg = ev.ID
			segs[ev.ID] = ev.Size
		case trace.SegmentFree:
			delete(segs, ev.ID)
		}
	}
	for _, n := range segs {
		liveSegBytes += n
	}
	return events, len(blocks), liveSegBytes
}

// TestHostileS41dHooksChurnOnQueues: goroutines allocate and close (and
// drop, with drop safety) on several queues while other goroutines add
// and remove recorders and Histories, Flush, WriteTrace, Close them; one
// recorder and one History stay from before the first request until
// after Pool.Close. Every trace written must read back and pass trace's
// checks, with ids as documented; the ever-registered recorder must see
// every block freed and every segment given back, as many as the
// counting allocator counts.
func TestHostileS41dHooksChurnOnQueues(t *testing.T) {
	cltest.Watchdog(t, 200*time.Second)
	for _, c := range []struct{ arena, drop, san bool }{
		{false, true, false}, {true, true, false}, {true, false, false}, {false, false, false}, {true, true, true}, {false, false, true},
	} {
		t.Run(fmt.Sprintf("arena=%v/drop=%v/san=%v", c.arena, c.drop, c.san), func(t *testing.T) {
			q := cltest.Queue(t)
			qs := []*cl.CommandQueue{q, cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, cl.QueueOutOfOrder)}
			p, count := s41BudgetPool(t, q, c.arena, c.drop, c.san, 8<<20)

			var mainBuf s41dLockedBuf
			mainRec := memhooks.NewTraceRecorder(&mainBuf, memhooks.WithSites(), memhooks.WithFlushEvery(time.Millisecond))
			mainHist := memhooks.NewHistory(50, memhooks.WithSites())
			p.AddHook(mainRec)
			p.AddHook(mainHist)

			const G = 3
			n := cltest.Size(q, 60, 250)
			var wg sync.WaitGroup
			var stop atomic.Bool
			sizes := []int64{0, 1, 100, 4096, 5000, 65536, 300 << 10, 1 << 20, 3 << 20}
			var kept sync.Mutex
			var leftOpen []*mempool.PooledBuffer
			for g := range G {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 41))
					a := p.On(qs[g%len(qs)])
					var mine []*mempool.PooledBuffer
					for i := range n {
						if rng.IntN(3) > 0 || len(mine) == 0 {
							b, err := a.Allocate(sizes[rng.IntN(len(sizes))])
							if err != nil {
								assert.ErrorIs(t, err, mempool.ErrOutOfMemory)
								continue
							}
							mine = append(mine, b)
						} else {
							j := rng.IntN(len(mine))
							b := mine[j]
							mine = append(mine[:j], mine[j+1:]...)
							if c.drop && i%7 == 0 {
								continue // dropped: the finalizer gives it back
							}
							assert.NoError(t, b.Close())
						}
						if i%25 == 0 {
							runtime.GC()
						}
					}
					kept.Lock()
					leftOpen = append(leftOpen, mine...)
					kept.Unlock()
				})
			}
			// Recorders and Histories come and go.
			type done struct {
				rec  *memhooks.TraceRecorder
				buf  *s41dLockedBuf
				hist *memhooks.History
			}
			var churned []done
			var churnWG sync.WaitGroup
			churnWG.Go(func() {
				for i := 0; !stop.Load(); i++ {
					buf := &s41dLockedBuf{}
					var rec *memhooks.TraceRecorder
					if i%2 == 0 {
						rec = memhooks.NewTraceRecorder(buf, memhooks.WithFlushEvery(time.Duration(i%3)*time.Millisecond))
					} else {
						rec = memhooks.NewTraceRecorder(buf, memhooks.WithStacks(3))
					}
					hist := memhooks.NewHistory(1+i%9, memhooks.WithSites())
					r1 := p.AddHook(rec)
					r2 := p.AddHook(hist)
					for range 3 {
						runtime.Gosched()
						var hb bytes.Buffer
						assert.NoError(t, hist.WriteTrace(&hb))
						_, err := trace.ReadComplete(bytes.NewReader(hb.Bytes()))
						assert.NoError(t, err, "a History's WriteTrace while events arrive:\n%s", hb.String())
						assert.NoError(t, rec.Flush())
					}
					if i%2 == 0 {
						assert.NoError(t, rec.Close()) // Close racing Handle, the hook still registered
						r1()
					} else {
						r1()
						assert.NoError(t, rec.Close())
					}
					r2()
					churned = append(churned, done{rec, buf, hist})
					time.Sleep(200 * time.Microsecond)
				}
			})
			wg.Wait()
			stop.Store(true)
			churnWG.Wait()

			for _, b := range leftOpen[:len(leftOpen)/2] {
				require.NoError(t, b.Close())
			}
			// Pool.Close while hooked, with blocks still open.
			require.NoError(t, p.Close())
			for _, b := range leftOpen[len(leftOpen)/2:] {
				require.NoError(t, b.Close())
			}
			s41dSettle(t, p)
			require.NoError(t, mainRec.Close())

			for i, d := range churned {
				t.Run(fmt.Sprint("churned", i), func(t *testing.T) {
					s41dCheck(t, d.buf.Bytes())
					var hb bytes.Buffer
					require.NoError(t, d.hist.WriteTrace(&hb))
					_, err := trace.ReadComplete(bytes.NewReader(hb.Bytes()))
					require.NoError(t, err, "%s", hb.String())
				})
			}
			events, live, liveSeg := s41dCheck(t, mainBuf.Bytes())
			assert.Zero(t, live, "blocks the recorder saw allocated and never freed")
			assert.Zero(t, liveSeg, "segment bytes the recorder saw allocated and never freed")
			s := trace.Summarize(events)
			cs := count.Stats()
			assert.Equal(t, int(cs.Allocs), s.SegmentAllocs, "the trace's segments are the device allocations")
			assert.Equal(t, int(cs.Frees), s.SegmentFrees)
			assert.Zero(t, cs.Live)
			assert.Zero(t, cs.BadFrees)

			var hb bytes.Buffer
			require.NoError(t, mainHist.WriteTrace(&hb))
			hev, err := trace.ReadComplete(bytes.NewReader(hb.Bytes()))
			require.NoError(t, err, "%s", hb.String())
			_, _, hseg := s41dCheckWindow(hev)
			assert.Zero(t, hseg, "the History's trace leaves no segment live after Pool.Close freed them all")
		})
	}
}

// s41dCheckWindow returns the blocks and segment bytes a History's trace
// leaves live.
func s41dCheckWindow(events []trace.Event) (int, int, int64) {
	blocks, segs := map[int64]bool{}, map[int64]int64{}
	for _, ev := range events {
		switch ev.Op {
		case trace.Alloc:
			blocks[ev.ID] = true
		case trace.Free:
			delete(blocks, ev.ID)
		case trace.SegmentAlloc:
			segs[ev.ID] = ev.Size
		case trace.SegmentFree:
			delete(segs, ev.ID)
		}
	}
	var b int64
	for _, n := range segs {
		b += n
	}
	return len(events), len(blocks), b
}

// s41dSettle runs the collector until the finalizers gave back every
// dropped block and the pool freed every segment: the pool counts a
// device free (DeviceFrees) after telling the hooks of it, so once the
// counts agree every segment_free has been told.
func s41dSettle(t *testing.T, p *mempool.Pool) {
	t.Helper()
	settled := func() bool {
		s := p.Stats()
		return s.ActiveBlocks == 0 && s.ManagedBytes == 0 && s.DeviceAllocs == s.DeviceFrees
	}
	for i := 0; i < 1000 && !settled(); i++ {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	require.True(t, settled(), "%+v", p.Stats())
}
