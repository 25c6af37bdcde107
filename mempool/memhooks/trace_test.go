package memhooks_test

import (
	"bytes"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writes keeps every Write call's bytes apart; it is safe for concurrent
// use, as a test reads it while the recorder's timer writes.
type writes struct {
	mu    sync.Mutex
	calls [][]byte
}

func (w *writes) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, bytes.Clone(p))
	return len(p), nil
}

func (w *writes) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(bytes.Join(w.calls, nil))
}

func (w *writes) Calls() [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([][]byte(nil), w.calls...)
}

// churn allocates and frees n blocks of many sizes, a window of them live.
func churn(t *testing.T, alloc func(int64) (*mempool.PooledBuffer, error), n int) {
	t.Helper()
	var window []*mempool.PooledBuffer
	for i := range n {
		b, err := alloc(int64(100 + (i*37)%5000))
		require.NoError(t, err)
		window = append(window, b)
		if len(window) > 7 {
			require.NoError(t, window[i%len(window)].Close())
			window = append(window[:i%len(window)], window[i%len(window)+1:]...)
		}
	}
	for _, b := range window {
		require.NoError(t, b.Close())
	}
}

// Issue 24: a program stopped with Ctrl-C left a trace cut mid-line (a
// bufio.Writer writes its buffer out when it fills, wherever a line
// stands). Every Write the recorder makes now is whole lines.
func TestTraceRecorderWritesWholeLinesOnly(t *testing.T) {
	p := pooltest.New(t, nil)
	var w writes
	rec := memhooks.NewTraceRecorder(&w, memhooks.WithSites(), memhooks.WithFlushEvery(0))
	p.AddHook(rec)
	churn(t, p.Allocate, 3000) // some 400 KiB of lines
	calls := w.Calls()
	require.NotEmpty(t, calls, "the recorder writes as its buffer fills, before any Flush")
	for i, c := range calls {
		require.True(t, bytes.HasSuffix(c, []byte("\n")), "write %d of %d ends mid-line: ...%q", i+1, len(calls), c[max(0, len(c)-40):])
	}
	require.NoError(t, rec.Close())
	_, err := trace.ReadComplete(strings.NewReader(w.String()))
	require.NoError(t, err)
}

// Issue 24: the recorder writes by itself, every 250 ms while lines wait,
// so that a program killed (no Flush) loses at most that much.
func TestTraceRecorderFlushesByItself(t *testing.T) {
	p := pooltest.New(t, nil)
	var w writes
	rec := memhooks.NewTraceRecorder(&w)
	defer rec.Close()
	p.AddHook(rec)
	b, err := p.Allocate(4000)
	require.NoError(t, err)
	assert.Empty(t, w.String(), "not at once: a write per event would be slow")
	assert.Eventually(t, func() bool { return strings.Contains(w.String(), "\na\t1\t4000\t") },
		5*time.Second, 10*time.Millisecond, "the allocation written without a Flush")
	require.NoError(t, b.Close())
	assert.Eventually(t, func() bool { return strings.Contains(w.String(), "\nf\t1\t0\t") },
		5*time.Second, 10*time.Millisecond, "and the free, by a later tick")
}

// Close writes what waits and stops the recorder: no event is recorded
// after it, and no timer writes.
func TestTraceRecorderClose(t *testing.T) {
	p := pooltest.New(t, nil)
	var w writes
	rec := memhooks.NewTraceRecorder(&w, memhooks.WithFlushEvery(time.Millisecond))
	p.AddHook(rec)
	b, err := p.Allocate(4000)
	require.NoError(t, err)
	require.NoError(t, rec.Close())
	written := w.String()
	assert.Contains(t, written, "\na\t1\t4000\t")
	require.NoError(t, b.Close())
	c, err := p.Allocate(100)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	time.Sleep(20 * time.Millisecond) // ticks would have come
	assert.Equal(t, written, w.String(), "nothing after Close")
	assert.NoError(t, rec.Close(), "twice")
	assert.NoError(t, rec.Flush(), "a Flush after Close writes nothing")
}

// allocateHere allocates from a function of its own: a second frame for
// WithStacks.
func allocateHere(a *mempool.QueueAllocator) (*mempool.PooledBuffer, error) {
	return a.Allocate(1000)
}

// Issue 24: with WithSites, a trace names each block's queue, numbered in
// the order of first use (- for none), and where it was asked for.
func TestTraceRecorderSitesAndQueues(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q)
	q2 := cltest.SecondQueue(t, q, 0)
	var out bytes.Buffer
	rec := memhooks.NewTraceRecorder(&out, memhooks.WithStacks(2))
	p.AddHook(rec)

	b1, err := allocateHere(p.On(q2)) // q2 is used first: queue 1
	require.NoError(t, err)
	b2, err := p.Allocate(2000) // the allocator's queue: 2
	require.NoError(t, err)
	require.NoError(t, b1.Close())
	require.NoError(t, b2.Close())
	require.NoError(t, rec.Close())

	header, _, _ := strings.Cut(out.String(), "\n")
	assert.Equal(t, "op\tid\tsize\tt\tqueue\tsite", header)
	events, err := trace.ReadComplete(&out)
	require.NoError(t, err)
	blocks := trace.Blocks(events)
	require.Len(t, blocks, 4)
	assert.Equal(t, []int{1, 2, 1, 2}, []int{blocks[0].Queue, blocks[1].Queue, blocks[2].Queue, blocks[3].Queue})
	assert.Regexp(t, `^trace_test\.go:\d+:memhooks_test\.allocateHere < trace_test\.go:\d+:memhooks_test\.TestTraceRecorderSitesAndQueues$`, blocks[0].Site)
	assert.Regexp(t, `^trace_test\.go:\d+:memhooks_test\.TestTraceRecorderSitesAndQueues$`, blocks[1].Site, "one frame outside clpool: no ' < '")
	assert.Regexp(t, `^trace_test\.go:\d+:memhooks_test\.TestTraceRecorderSitesAndQueues$`, blocks[2].Site, "a free's site is where it was closed")
	assert.NotEqual(t, blocks[0].Site, blocks[2].Site)
	assert.True(t, trace.Sited(events))

	// A pool without a queue: "-".
	d, err := allocator.NewDeferred(q.Context(), cl.MemReadWrite)
	require.NoError(t, err)
	pd, err := mempool.New(d)
	require.NoError(t, err)
	defer pd.Close()
	out.Reset()
	rec = memhooks.NewTraceRecorder(&out, memhooks.WithSites())
	pd.AddHook(rec)
	b, err := pd.Allocate(100)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.NoError(t, rec.Close())
	assert.Regexp(t, regexp.MustCompile(`(?m)^a\t1\t100\t\d+\t-\ttrace_test\.go:\d+:memhooks_test\.TestTraceRecorderSitesAndQueues$`), out.String())
}

// Issue 24: a trace has the pool's own segments, so that its managed
// bytes are the pool's and not a replay's: the segments' peak is the
// pool's PeakManagedBytes, their count its device allocations and frees,
// over exact bins and over an arena.
func TestTraceRecorderRecordsThePoolsSegments(t *testing.T) {
	for _, opts := range [][]mempool.Option{nil, {mempool.WithArena()}} {
		p := pooltest.New(t, nil, opts...)
		var out bytes.Buffer
		rec := memhooks.NewTraceRecorder(&out)
		p.AddHook(rec)
		churn(t, p.Allocate, 400)
		require.NoError(t, p.FreeHeld())
		require.NoError(t, rec.Close())
		s := p.Stats()

		events, err := trace.ReadComplete(&out)
		require.NoError(t, err)
		sum := trace.Summarize(events)
		policy := s.Policy
		assert.Equal(t, 400, sum.Allocs, policy)
		assert.Equal(t, int(s.DeviceAllocs), sum.SegmentAllocs, policy)
		assert.Equal(t, int(s.DeviceFrees), sum.SegmentFrees, policy)
		assert.Equal(t, sum.SegmentAllocs, sum.SegmentFrees, "FreeHeld gave every segment back")
		assert.Equal(t, s.PeakManagedBytes, sum.PeakSegmentBytes, policy)
		assert.Equal(t, s.PeakActiveBytes, sum.PeakLiveBytes, policy)

		// At every moment, the live segments hold the live blocks.
		var live, managed int64
		sizes := map[int64]int64{}
		segs := map[int64]int64{}
		for i, ev := range events {
			switch ev.Op {
			case trace.Alloc:
				sizes[ev.ID] = ev.Size
				live += ev.Size
			case trace.Free:
				live -= sizes[ev.ID]
			case trace.SegmentAlloc:
				segs[ev.ID] = ev.Size
				managed += ev.Size
			case trace.SegmentFree:
				managed -= segs[ev.ID]
			}
			require.LessOrEqual(t, live, managed, "%s: event %d", policy, i)
		}
	}
}

// A hook registered after the TraceRecorder panics on malloc_after: the
// trace has the failed Allocate's block freed, as the pool took it back.
func TestTraceRecorderOfAnAllocateFailedByAHookLeavesNoBlockLive(t *testing.T) {
	p := pooltest.New(t, nil)
	var out bytes.Buffer
	rec := memhooks.NewTraceRecorder(&out)
	p.AddHook(rec)
	failedByAHook(t, p)
	require.NoError(t, rec.Close())
	events, err := trace.ReadComplete(&out)
	require.NoError(t, err)
	assert.Equal(t, 1, trace.Summarize(events).Allocs)
	assert.Empty(t, liveBlocks(events), "the trace's blocks live at the end, of a pool with none active:\n%s", out.String())
}
