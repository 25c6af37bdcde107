package memhooks_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A History is a hook, and what a pool's Snapshot looks for.
var (
	_ mempool.Hook                         = (*memhooks.History)(nil)
	_ interface{ History() []trace.Event } = (*memhooks.History)(nil)
)

// malloc and free are the events a pool sends for a block, without a pool.
func malloc(block uint64, size, allocSize int64) mempool.Event {
	return mempool.Event{Kind: mempool.MallocAfter, Size: size, AllocSize: allocSize, BlockID: block}
}

func free(block uint64, size, allocSize int64) mempool.Event {
	return mempool.Event{Kind: mempool.FreeBefore, Size: size, AllocSize: allocSize, BlockID: block}
}

// segAlloc and segFree are the events a pool sends for a segment, buf,
// without a pool.
func segAlloc(buf *cl.Buffer, size int64) mempool.Event {
	return mempool.Event{Kind: mempool.AllocAfter, Size: size, AllocSize: size, Buffer: buf}
}

func segFree(buf *cl.Buffer, size int64) mempool.Event {
	return mempool.Event{Kind: mempool.SegmentFree, Size: size, AllocSize: size, Buffer: buf}
}

// withoutTimes returns events with their times zeroed, after checking
// that the times are set and never go down.
func withoutTimes(t *testing.T, events []trace.Event) []trace.Event {
	t.Helper()
	out := slices.Clone(events)
	for i := range out {
		require.Positive(t, out[i].Time, "event %d", i)
		if i > 0 {
			require.GreaterOrEqual(t, out[i].Time, out[i-1].Time, "event %d", i)
		}
		out[i].Time = 0
	}
	return out
}

func TestHistoryKeepsTheLastEventsOldestFirst(t *testing.T) {
	h := memhooks.NewHistory(4)
	assert.Empty(t, h.Events())

	h.Handle(free(99, 8, 8)) // handed out before the History was added: not recorded
	h.Handle(mempool.Event{Kind: mempool.MallocAfter, Size: 8, BlockID: 50, Err: mempool.ErrOutOfMemory})
	h.Handle(mempool.Event{Kind: mempool.MallocBefore, Size: 8})
	h.Handle(malloc(10, 100, 512))
	h.Handle(malloc(20, 200, 512))
	assert.Equal(t, []trace.Event{
		{Op: trace.Alloc, ID: 1, Size: 100},
		{Op: trace.Alloc, ID: 2, Size: 200},
	}, withoutTimes(t, h.Events()), "not full yet")

	h.Handle(free(10, 100, 512))
	h.Handle(malloc(10, 300, 1024)) // the same block ID again: a new trace id
	h.Handle(free(20, 200, 512))
	h.Handle(free(10, 300, 1024))
	want := []trace.Event{
		{Op: trace.Free, ID: 1},
		{Op: trace.Alloc, ID: 3, Size: 300},
		{Op: trace.Free, ID: 2},
		{Op: trace.Free, ID: 3},
	}
	assert.Equal(t, want, withoutTimes(t, h.Events()), "wrapped around once")
	assert.Equal(t, h.Events(), h.History())

	entries := h.Entries()
	require.Len(t, entries, 4)
	assert.Equal(t, []int64{512, 1024, 512, 1024}, []int64{entries[0].AllocSize, entries[1].AllocSize, entries[2].AllocSize, entries[3].AllocSize})
	data, err := json.Marshal(entries[1])
	require.NoError(t, err)
	assert.JSONEq(t, `{"op":"a","id":3,"size":300,"t":`+jsonInt(entries[1].Time.Nanoseconds())+`,"alloc_size":1024}`, string(data))

	for i := range 10 { // many times around
		h.Handle(malloc(uint64(i+100), int64(i), 512))
	}
	events := withoutTimes(t, h.Events())
	assert.Equal(t, []trace.Event{
		{Op: trace.Alloc, ID: 10, Size: 6}, {Op: trace.Alloc, ID: 11, Size: 7},
		{Op: trace.Alloc, ID: 12, Size: 8}, {Op: trace.Alloc, ID: 13, Size: 9},
	}, events)
}

func jsonInt(n int64) string {
	data, _ := json.Marshal(n)
	return string(data)
}

func TestNewHistoryPanicsOnAnEmptyRing(t *testing.T) {
	assert.PanicsWithValue(t, "memhooks: NewHistory: n is 0, want at least 1", func() { memhooks.NewHistory(0) })
	assert.Panics(t, func() { memhooks.NewHistory(-1) })
}

func TestHistoryWriteTraceLeavesOutFreesOfBlocksItForgot(t *testing.T) {
	h := memhooks.NewHistory(4)
	h.Handle(malloc(1, 100, 512)) // id 1: leaves the ring
	h.Handle(malloc(2, 200, 512)) // id 2: leaves the ring
	h.Handle(malloc(3, 300, 512)) // id 3
	h.Handle(free(1, 100, 512))
	h.Handle(free(3, 300, 512))
	h.Handle(malloc(4, 400, 512)) // id 4, left live
	require.Len(t, h.Events(), 4)

	var out bytes.Buffer
	require.NoError(t, h.WriteTrace(&out))
	assert.Regexp(t, `^op\tid\tsize\tt\na\t3\t300\t\d+\nf\t3\t0\t\d+\na\t4\t400\t\d+\n$`, out.String())
	events, err := trace.Read(&out)
	require.NoError(t, err)
	assert.True(t, trace.Timed(events))
	all := h.Events()
	assert.Equal(t, []trace.Event{all[0], all[2], all[3]}, events, "the free of block 1 is left out, the rest as recorded")
}

func TestHistoryWriteTraceOfNothingWritesNothing(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, memhooks.NewHistory(8).WriteTrace(&out))
	assert.Empty(t, out.String())
}

// TestHistoryIsSafeForConcurrentUse is for -race: goroutines allocate and
// free while others read; every event is counted and the ring keeps the
// last ones in time order.
func TestHistoryIsSafeForConcurrentUse(t *testing.T) {
	const goroutines, blocks, n = 8, 500, 100
	h := memhooks.NewHistory(n)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range blocks {
				id := uint64(g*blocks + i + 1)
				h.Handle(malloc(id, 64, 64))
				h.Handle(free(id, 64, 64))
				if i%50 == 0 {
					h.Events()
				}
			}
		})
	}
	wg.Go(func() {
		for range 100 {
			var out bytes.Buffer
			if !assert.NoError(t, h.WriteTrace(&out)) {
				return
			}
			_, err := trace.Read(&out)
			assert.NoError(t, err)
		}
	})
	wg.Wait()

	events := h.Events()
	require.Len(t, events, n)
	withoutTimes(t, events)
	var maxID int64
	for _, ev := range events {
		maxID = max(maxID, ev.ID)
	}
	assert.Equal(t, int64(goroutines*blocks), maxID, "every allocation was numbered")
	assert.Equal(t, trace.Free, events[n-1].Op, "each goroutine ends with a free")
}

func TestHistoryAllocatesNothingPerEventOnceFull(t *testing.T) {
	h := memhooks.NewHistory(256)
	for i := range 1000 { // fill the ring, and the map of live ids
		h.Handle(malloc(uint64(i%4+1), 64, 64))
		h.Handle(free(uint64(i%4+1), 64, 64))
	}
	allocs := testing.AllocsPerRun(1000, func() {
		h.Handle(malloc(7, 64, 64))
		h.Handle(free(7, 64, 64))
	})
	assert.Zero(t, allocs)
}

func TestHistoryOnAPoolWritesATraceThatReplays(t *testing.T) {
	p := pooltest.New(t, nil)
	h := memhooks.NewHistory(50)
	before, err := p.Allocate(64) // handed out before the History: its free is not recorded
	require.NoError(t, err)
	p.AddHook(h)
	require.NoError(t, before.Close())

	var window []*mempool.PooledBuffer
	for i := range 200 {
		b, err := p.Allocate(int64(100 + (i*37)%5000))
		require.NoError(t, err)
		window = append(window, b)
		if len(window) > 5 {
			require.NoError(t, window[0].Close())
			window = window[1:]
		}
	}
	entries := h.Entries()
	require.Len(t, entries, 50)
	for _, e := range entries {
		assert.GreaterOrEqual(t, e.AllocSize, e.Size)
	}
	last := entries[len(entries)-1]
	assert.Equal(t, trace.Event{Op: trace.Free, ID: 195}, trace.Event{Op: last.Op, ID: last.ID}, "allocations numbered 1, 2, ... from when the History was added")

	var out bytes.Buffer
	require.NoError(t, h.WriteTrace(&out))
	events, err := trace.Read(&out)
	require.NoError(t, err)
	assert.NotEmpty(t, events)
	p2 := pooltest.New(t, nil)
	require.NoError(t, trace.Replay(events, p2.Allocate, (*mempool.PooledBuffer).Close))
	for _, b := range window {
		require.NoError(t, b.Close())
	}
}

// A History keeps the pool's segments as a TraceRecorder writes them:
// numbered apart from the blocks, a segment freed with its size, none
// from before the History. WriteTrace leaves out the free of a block
// whose allocation left the ring, not that of a segment of the same
// number: the segment's allocation is written first, at the time of the
// ring's oldest entry.
func TestHistoryRecordsSegmentsNumberedApart(t *testing.T) {
	segA, segB := &cl.Buffer{}, &cl.Buffer{}
	h := memhooks.NewHistory(8)
	h.Handle(segFree(&cl.Buffer{}, 1<<20)) // allocated before the History: not recorded
	h.Handle(mempool.Event{Kind: mempool.AllocAfter, Size: 1 << 20, Err: mempool.ErrOutOfMemory})
	h.Handle(segAlloc(segA, 2<<20))
	h.Handle(malloc(10, 100, 512))
	h.Handle(segAlloc(segB, 4<<20))
	h.Handle(free(10, 100, 512))
	h.Handle(segFree(segA, 2<<20))
	assert.Equal(t, []trace.Event{
		{Op: trace.SegmentAlloc, ID: 1, Size: 2 << 20},
		{Op: trace.Alloc, ID: 1, Size: 100},
		{Op: trace.SegmentAlloc, ID: 2, Size: 4 << 20},
		{Op: trace.Free, ID: 1},
		{Op: trace.SegmentFree, ID: 1, Size: 2 << 20},
	}, withoutTimes(t, h.Events()))
	assert.Equal(t, int64(4<<20), h.Entries()[2].AllocSize, "a segment's entry has its size")

	h = memhooks.NewHistory(3)
	h.Handle(segAlloc(segA, 2<<20)) // segment 1: leaves the ring
	h.Handle(malloc(10, 100, 512))  // block 1
	h.Handle(segFree(segA, 2<<20))
	h.Handle(free(10, 100, 512))
	events := writtenTrace(t, h)
	assert.Equal(t, []trace.Event{
		{Op: trace.SegmentAlloc, ID: 1, Size: 2 << 20},
		{Op: trace.Alloc, ID: 1, Size: 100},
		{Op: trace.SegmentFree, ID: 1},
		{Op: trace.Free, ID: 1},
	}, withoutTimes(t, events))
	assert.Equal(t, h.Entries()[0].Time, events[0].Time, "the segment's allocation at the ring's oldest entry's time")
}

// writtenTrace returns h's WriteTrace, read back whole (the frees without
// sizes).
func writtenTrace(t *testing.T, h *memhooks.History) []trace.Event {
	t.Helper()
	var out bytes.Buffer
	require.NoError(t, h.WriteTrace(&out))
	events, err := trace.ReadComplete(&out)
	require.NoError(t, err, out.String())
	return events
}

// A History that wrapped writes first, in WriteTrace, the allocation of
// each segment live at its oldest entry whose allocation left the ring:
// those still live, and those whose free is in the ring, in the order of
// their ids, at the oldest entry's time; not that of a segment whose free
// left the ring too. Its Events are what the ring holds, as ever.
func TestHistoryWriteTraceWritesTheLiveSegmentsWhoseAllocationLeftTheRing(t *testing.T) {
	segA, segB, segC, segD := &cl.Buffer{}, &cl.Buffer{}, &cl.Buffer{}, &cl.Buffer{}
	h := memhooks.NewHistory(4)
	h.Handle(segAlloc(segC, 1<<20)) // segment 1: freed, its free out of the ring
	h.Handle(segAlloc(segB, 2<<20)) // segment 2: freed in the ring
	h.Handle(segAlloc(segA, 4<<20)) // segment 3: live
	h.Handle(segFree(segC, 1<<20))
	h.Handle(malloc(10, 100, 512))
	h.Handle(segAlloc(segD, 8<<20)) // segment 4: its allocation in the ring
	h.Handle(segFree(segB, 2<<20))
	h.Handle(free(10, 100, 512))
	require.Len(t, h.Events(), 4)
	assert.Equal(t, trace.Alloc, h.Events()[0].Op)

	events := writtenTrace(t, h)
	assert.Equal(t, []trace.Event{
		{Op: trace.SegmentAlloc, ID: 2, Size: 2 << 20},
		{Op: trace.SegmentAlloc, ID: 3, Size: 4 << 20},
		{Op: trace.Alloc, ID: 1, Size: 100},
		{Op: trace.SegmentAlloc, ID: 4, Size: 8 << 20},
		{Op: trace.SegmentFree, ID: 2},
		{Op: trace.Free, ID: 1},
	}, withoutTimes(t, events))
	first := h.Entries()[0].Time
	assert.Equal(t, first, events[0].Time, "at the ring's oldest entry's time")
	assert.Equal(t, first, events[1].Time)
	require.NoError(t, trace.Check(events))

	for range 4 { // the ring forgets segment 2's free, and segment 4's allocation
		h.Handle(malloc(11, 100, 512))
		h.Handle(free(11, 100, 512))
	}
	assert.Equal(t, []trace.Event{
		{Op: trace.SegmentAlloc, ID: 3, Size: 4 << 20},
		{Op: trace.SegmentAlloc, ID: 4, Size: 8 << 20},
	}, withoutTimes(t, writtenTrace(t, h))[:2])
}

// historyFrees returns events as a trace reads them back: the frees of
// segments without their sizes.
func historyFrees(events []trace.Event) []trace.Event {
	out := slices.Clone(events)
	for i := range out {
		if out[i].Op == trace.SegmentFree {
			out[i].Size = 0
		}
	}
	return out
}

// A History on a pool used on two queues numbers the queues in the order
// it sees them used, names where each event was asked for (WithSites),
// and keeps the pool's segments; the pool's Snapshot numbers the
// history's queues as its blocks', and names the active blocks' sites
// from it; WriteTrace writes a sited trace that reads back whole.
func TestHistoryOnAPoolRecordsQueuesSitesAndSegments(t *testing.T) {
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	p := pooltest.New(t, q)
	before, err := p.Allocate(1000) // the pool's first queue is q
	require.NoError(t, err)
	allocsBefore := p.Stats().DeviceAllocs

	h := memhooks.NewHistory(100, memhooks.WithSites())
	p.AddHook(h)
	b1, err := p.On(q2).Allocate(2000) // the History's queue 1, the pool's 2
	require.NoError(t, err)
	b2, err := p.Allocate(3000) // the History's queue 2, the pool's 1
	require.NoError(t, err)
	big, err := p.Allocate(8 << 20) // a segment of its own
	require.NoError(t, err)
	require.NoError(t, before.Close()) // handed out before the History: not recorded

	assert.Equal(t, []*cl.CommandQueue{q2, q}, h.Queues())
	blocks := trace.Blocks(h.Events())
	require.Len(t, blocks, 3)
	assert.Equal(t, []int{1, 2, 2}, []int{blocks[0].Queue, blocks[1].Queue, blocks[2].Queue})
	site := `^history_test\.go:\d+:memhooks_test\.TestHistoryOnAPoolRecordsQueuesSitesAndSegments$`
	for i, ev := range blocks {
		assert.Regexp(t, site, ev.Site, "block %d", i+1)
	}
	assert.NotEqual(t, blocks[0].Site, blocks[1].Site, "two lines")

	s := p.Snapshot()
	require.Len(t, s.History, len(h.Events()))
	active := map[uint64]mempool.BlockSnapshot{}
	for _, seg := range s.Segments {
		for _, bl := range seg.Blocks {
			if bl.State == mempool.StateActive {
				active[bl.ID] = bl
			}
		}
	}
	snapBlocks := trace.Blocks(s.History)
	for i, b := range []*mempool.PooledBuffer{b1, b2, big} {
		bl, ok := active[b.ID()]
		require.True(t, ok, "block %d is active", i+1)
		assert.Equal(t, bl.Queue, snapBlocks[i].Queue, "block %d: the history's queue is the snapshot's", i+1)
		assert.Equal(t, blocks[i].Site, bl.Site, "block %d: the snapshot names its site from the History", i+1)
		assert.Equal(t, blocks[i].Site, snapBlocks[i].Site)
	}
	assert.Equal(t, []int{2, 1, 1}, []int{snapBlocks[0].Queue, snapBlocks[1].Queue, snapBlocks[2].Queue}, "the pool's numbers: q was its first")
	_, ok := h.Site(before.ID())
	assert.False(t, ok, "a block from before the History")

	for _, b := range []*mempool.PooledBuffer{b1, b2, big} {
		require.NoError(t, b.Close())
	}
	require.NoError(t, p.FreeHeld()) // every segment goes back
	_, ok = h.Site(b1.ID())
	assert.False(t, ok, "freed")

	events := h.Events()
	segs := map[int64]int64{}
	var allocs, frees int64
	for _, ev := range events {
		switch ev.Op {
		case trace.SegmentAlloc:
			allocs++
			segs[ev.ID] = ev.Size
			assert.Regexp(t, site, ev.Site, "a segment is allocated where its block is asked for")
		case trace.SegmentFree:
			frees++
			assert.Equal(t, segs[ev.ID], ev.Size, "segment %d is freed with its size", ev.ID)
		}
	}
	assert.Equal(t, p.Stats().DeviceAllocs-allocsBefore, allocs, "every segment allocated since the History")
	assert.GreaterOrEqual(t, allocs, int64(1), "big's at least")
	assert.Equal(t, allocs, frees, "FreeHeld gave them all back")

	var out bytes.Buffer
	require.NoError(t, h.WriteTrace(&out))
	header, _, _ := strings.Cut(out.String(), "\n")
	assert.Equal(t, "op\tid\tsize\tt\tqueue\tsite", header)
	back, err := trace.ReadComplete(&out)
	require.NoError(t, err)
	assert.Equal(t, historyFrees(events), back, "every event, as recorded")
}

// A History without WithSites looks up no site: no event pays the
// microsecond of a stack walk. With it, each event does.
func TestHistoryWithoutSitesLooksUpNone(t *testing.T) {
	lookups := memhooks.CountSiteLookups(t)
	p := pooltest.New(t, nil)
	h := memhooks.NewHistory(1000)
	remove := p.AddHook(h)
	churn(t, p.Allocate, 200)
	remove()
	assert.Zero(t, lookups.Load())
	events := h.Events()
	require.NotEmpty(t, events)
	for _, ev := range events {
		require.Empty(t, ev.Site)
	}

	sited := memhooks.NewHistory(1000, memhooks.WithSites())
	p.AddHook(sited)
	churn(t, p.Allocate, 200)
	assert.Equal(t, int64(len(sited.Events())), lookups.Load(), "one lookup an event")
}

// liveBlocks returns the ids of the blocks events leave allocated and
// not freed.
func liveBlocks(events []trace.Event) map[int64]bool {
	live := map[int64]bool{}
	for _, ev := range events {
		switch ev.Op {
		case trace.Alloc:
			live[ev.ID] = true
		case trace.Free:
			delete(live, ev.ID)
		}
	}
	return live
}

// failedByAHook registers a hook that panics on the first successful
// malloc_after on p, after the hooks already registered, and makes one
// Allocate, which fails.
func failedByAHook(t *testing.T, p *mempool.Pool) {
	t.Helper()
	var panicked atomic.Bool
	remove := p.AddHook(mempool.HookFunc(func(e mempool.Event) {
		if e.Kind == mempool.MallocAfter && e.Err == nil && panicked.CompareAndSwap(false, true) {
			panic("a later hook fails")
		}
	}))
	defer remove()
	_, err := p.Allocate(1000)
	require.ErrorIs(t, err, mempool.ErrPanicked)
	assert.Zero(t, p.ActiveBlocks(), "the pool took the block back")
}

// A hook registered after the History panics on malloc_after: the
// Allocate fails and the pool takes its block back, telling the History
// of its free, so that no block the pool never handed out stays live in
// the History.
func TestHistoryOfAnAllocateFailedByAHookLeavesNoBlockLive(t *testing.T) {
	p := pooltest.New(t, nil)
	h := memhooks.NewHistory(100)
	p.AddHook(h)
	failedByAHook(t, p)
	assert.Empty(t, liveBlocks(h.Events()), "the History's blocks live at the end, of a pool with none active: %v", h.Events())
}

// Many goroutines on several queues allocate and free through a pool
// with a small sited History that wraps many times, while others take
// Snapshots and write the History's trace: everything reads back, and
// the snapshot's queues are the pool's.
func TestHistoryOnABusyPoolWritesTracesAndSnapshotsThatReadBack(t *testing.T) {
	q := cltest.Queue(t)
	queues := []*cl.CommandQueue{q}
	for range 3 {
		queues = append(queues, cltest.SecondQueue(t, q, 0))
	}
	p := pooltest.New(t, q, mempool.WithArena())
	h := memhooks.NewHistory(64, memhooks.WithSites())
	p.AddHook(h)

	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 8 {
		qa := p.On(queues[g%len(queues)])
		wg.Go(func() {
			var keep []*mempool.PooledBuffer
			for i := 0; i < 400; i++ {
				b, err := qa.Allocate(int64(64 + (g*977+i*131)%(256<<10)))
				if !assert.NoError(t, err) {
					break
				}
				keep = append(keep, b)
				if len(keep) > 4 {
					assert.NoError(t, keep[0].Close())
					keep = keep[1:]
				}
				if i%97 == 0 {
					_ = qa.FreeHeld() // segments freed among the blocks
				}
			}
			for _, b := range keep {
				assert.NoError(t, b.Close())
			}
		})
	}
	var readers sync.WaitGroup
	readers.Go(func() {
		for !stop.Load() {
			var out bytes.Buffer
			if !assert.NoError(t, h.WriteTrace(&out)) {
				return
			}
			text := out.String()
			_, err := trace.ReadComplete(bytes.NewReader(out.Bytes()))
			if !assert.NoError(t, err, "WriteTrace's output reads back whole:\n%s", text) {
				return
			}
		}
	})
	readers.Go(func() {
		for !stop.Load() {
			s := p.Snapshot()
			nq := len(p.Stats().Queues)
			for i, ev := range s.History {
				if ev.Op.Segment() {
					continue
				}
				if !assert.True(t, ev.Queue >= 1 && ev.Queue <= nq, "event %d: queue %d of the pool's %d", i, ev.Queue, nq) {
					return
				}
			}
			if !assert.NoError(t, trace.Check(windowOf(s.History))) {
				return
			}
		}
	})
	wg.Wait()
	stop.Store(true)
	readers.Wait()
}

// windowOf is what `clpool viz` keeps of a snapshot's history.
func windowOf(history []trace.Event) []trace.Event {
	kept, _ := trace.Window(history)
	return kept
}

// A snapshot is one moment: the blocks its history leaves live (those it
// saw allocated and not freed) are active blocks of the snapshot. When
// the history is read after the segments were walked, a block allocated
// in between was live in the history but absent from the map, and viz
// took it for one of the blocks "from before the history": Snapshot
// reads the history under the locks it walks the segments with.
func TestSnapshotHistoryIsOfTheSnapshotsMoment(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q)
	h := memhooks.NewHistory(256)
	p.AddHook(h)

	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; !stop.Load(); i++ {
				b, err := p.Allocate(int64(1000 + g))
				if !assert.NoError(t, err) {
					return
				}
				time.Sleep(50 * time.Microsecond) // held a while, as a program holds its blocks
				assert.NoError(t, b.Close())
			}
		})
	}
	bad := 0
	for range 3000 {
		s := p.Snapshot()
		live := map[int64]int64{}
		for _, ev := range s.History {
			switch ev.Op {
			case trace.Alloc:
				live[ev.ID] = ev.Size
			case trace.Free:
				delete(live, ev.ID)
			}
		}
		var active int
		for _, seg := range s.Segments {
			for _, bl := range seg.Blocks {
				if bl.State == mempool.StateActive {
					active++
				}
			}
		}
		if len(live) > active {
			bad++
		}
	}
	stop.Store(true)
	wg.Wait()
	assert.Zero(t, bad, "snapshots whose history has more live blocks than the snapshot has active blocks")
}
