package mempool_test

// Hostile review s44b of 7f2ddc2, where refuseSize went through
// outOfMemory, which drained the queue caches and the sanitizer's
// quarantine before it counted, and emitted malloc_before after the
// request was counted (fixed in 62d05f5).

import (
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Expected: a request over the device's largest buffer "fails at once,
// freeing nothing" (doc.go, Out of memory), so the blocks waiting in the
// sanitizer's quarantine stay there, poisoned, and a write after Close to
// one of them is still found (WriteAfterClose) by Findings, as it is
// without the oversize request (the control subtest).
//
// sanitize.go lists when a block leaves the quarantine: "when newer ones
// push it out ..., when the pool drains what it sets aside (FreeHeld, the
// out-of-memory ladder, Close), or at once if it is closed while a request
// is on the out-of-memory ladder (the quarantine yields to memory
// pressure ...; a write after such a Close goes unseen)". An oversize
// request is none of these: it never reaches the ladder, and no freeing
// can serve it.
//
// Found on 7f2ddc2 (review s44b), fixed: refuseSize calls outOfMemory, whose drainCaches
// drains the sanitizer's quarantine (Pool.drain: p.san.drain(),
// leaveQuarantine). One bad request (a size computed wrong, say) empties
// the quarantine: every block closed before it goes to the policy, and a
// write after Close to any of them goes unseen and may land in the next
// user's block. Before 7f2ddc2, refuseSize drained nothing.
func TestHostileS44bOversizeRequestKeepsTheSanitizersQuarantine(t *testing.T) {
	cltest.Watchdog(t, 5*time.Minute)
	for _, oversize := range []bool{false, true} {
		name := "control: no oversize request"
		if oversize {
			name = "an oversize request between the Close and the write"
		}
		t.Run(name, func(t *testing.T) {
			q, p := sanPoolTo(t, io.Discard)
			victim, err := p.Allocate(1000)
			require.NoError(t, err)
			base, off := victim.Base(), victim.Offset()
			require.NoError(t, victim.Close()) // poisoned, in quarantine
			held := p.Stats().HeldBlocks

			if oversize {
				_, err := p.Allocate(p.Device().MaxMemAllocSize + 1)
				require.ErrorIs(t, err, mempool.ErrOutOfMemory)
				require.ErrorIs(t, err, cl.ErrInvalidBufferSize)
			}
			next, err := p.Allocate(1000)
			require.NoError(t, err)
			t.Logf("held blocks after the Close: %d; the next 1000-byte block is the victim's: %v",
				held, next.Base() == base && next.Offset() == off)

			ev, err := q.EnqueueWriteBuffer(base, true, off+10, []byte{1}) // a write after Close
			require.NoError(t, err)
			_ = ev.Release()

			kinds := findingKinds(p.Findings())
			require.NoError(t, next.Close())
			require.NoError(t, p.Close())
			assert.Equal(t, 1, kinds[mempool.WriteAfterClose],
				"the write after Close to a block in quarantine is found (findings: %v)", kinds)
		})
	}
}

// Expected: an oversize request fails "at once, freeing nothing" (doc.go)
// and leaves the pool's blocks where they were: the block a queue's cache
// held (QueueStats.Cached) is still there afterwards, as it is after a
// negative size (bad input, "an error that changes nothing").
//
// Found on 7f2ddc2 (review s44b), fixed: outOfMemory's drainCaches gives every queue's
// cached blocks back to the policy (and takes every cache's lock and the
// pool's), on every oversize request, whichever queue made it: a request
// that no memory can serve empties the caches of all the other queues,
// and their next requests miss the cache. Before 7f2ddc2 refuseSize
// touched no cache.
func TestHostileS44bOversizeRequestLeavesOtherQueuesCaches(t *testing.T) {
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	p := pooltest.New(t, q)
	a := p.On(q, mempool.QueueName("a"))
	b := p.On(q2, mempool.QueueName("b"))
	cachedOf := func(name string) int64 {
		for _, qs := range p.Stats().Queues {
			if qs.Name == name {
				return qs.Cached
			}
		}
		t.Fatalf("no queue %q", name)
		return 0
	}
	pb, err := a.Allocate(1000)
	require.NoError(t, err)
	require.NoError(t, pb.Close())
	before := cachedOf("a")
	require.Positive(t, before, "a small block closed on a is in a's cache")

	_, err = a.Allocate(-1)
	require.Error(t, err)
	require.Equal(t, before, cachedOf("a"), "a negative size changes nothing")

	_, err = b.Allocate(p.Device().MaxMemAllocSize + 1) // on the other queue
	require.ErrorIs(t, err, mempool.ErrOutOfMemory)
	assert.Equal(t, before, cachedOf("a"), "an oversize request on b frees nothing, a's cache included")
}

// Expected: a hook that reads Stats at malloc_before sees the pool as it
// was before the request, whatever becomes of it: malloc_before is told
// before the pool serves (or refuses) it, as for every other request. For
// a request the limit refuses at once, the OOM, the miss and the queue's
// request are counted between malloc_before and malloc_after.
//
// Found on 7f2ddc2 (review s44b), fixed: refuseSize counts the request (the queue's request,
// the miss, the OOM, in outOfMemory) and only then tells malloc_before,
// so a hook that measures a request by the Stats it reads at malloc_before
// and malloc_after (the OOMs, the misses a request caused) sees nothing
// for an oversize request, and a TraceRecorder-like hook reading Stats at
// malloc_before sees the OOM already counted for a request not yet "made".
func TestHostileS44bOversizeCountedBetweenMallocEvents(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q, mempool.WithLimit(1<<20))
	type snap struct{ ooms, misses, requests int64 }
	read := func() snap {
		s := p.Stats()
		var r int64
		for _, qs := range s.Queues {
			if qs.Queue == q {
				r += qs.Requests
			}
		}
		return snap{s.OOMs, s.Misses, r}
	}
	var mu sync.Mutex
	var before, after snap
	defer p.AddHook(mempool.HookFunc(func(e mempool.Event) {
		switch e.Kind {
		case mempool.MallocBefore:
			s := read()
			mu.Lock()
			before = s
			mu.Unlock()
		case mempool.MallocAfter:
			s := read()
			mu.Lock()
			after = s
			mu.Unlock()
		}
	}))()
	for _, tc := range []struct {
		name string
		size int64
	}{
		{"refused by the limit", 4 << 20},
		{"over the device's largest buffer", p.Device().MaxMemAllocSize + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.Allocate(tc.size)
			require.ErrorIs(t, err, mempool.ErrOutOfMemory)
			mu.Lock()
			b, a := before, after
			mu.Unlock()
			t.Logf("at malloc_before %+v, at malloc_after %+v", b, a)
			assert.Equal(t, b.ooms+1, a.ooms, "the request's OOM is counted between malloc_before and malloc_after")
			assert.Equal(t, b.misses+1, a.misses, "its miss too")
			assert.Equal(t, b.requests+1, a.requests, "and its queue's request")
		})
	}
}

// Expected: a malloc_before hook that panics fails the request, and the
// hooks are still told malloc_after (with the panic in its Err), as for
// every other request (allocate: a malloc_before panic goes through
// mallocFailed): every hook that saw a malloc_before sees its
// malloc_after, so that a hook pairing them (a LineProfile's in-flight
// requests, a trace) does not leak an open malloc. doc.go: an oversize
// request "reaches the hooks as a failed malloc on its queue", "as every
// refused request does".
//
// Found on 7f2ddc2 (review s44b), fixed: refuseSize returns errors.Join(err, herr) when
// malloc_before panics, without telling malloc_after: the second hook
// sees a malloc_before with no malloc_after.
func TestHostileS44bOversizeMallocBeforePanicStillTellsMallocAfter(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q, mempool.WithLimit(1<<20))
	defer p.AddHook(mempool.HookFunc(func(e mempool.Event) {
		if e.Kind == mempool.MallocBefore {
			panic("s44b: malloc_before")
		}
	}))()
	log := &recorder{}
	defer p.AddHook(log)()
	for _, tc := range []struct {
		name string
		size int64
	}{
		{"refused by the limit", 4 << 20},
		{"over the device's largest buffer", p.Device().MaxMemAllocSize + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log.take()
			_, err := p.Allocate(tc.size)
			require.Error(t, err)
			require.True(t, errors.Is(err, mempool.ErrPanicked), "%v", err)
			assert.Equal(t, []mempool.EventKind{mempool.MallocBefore, mempool.MallocAfter}, kinds(log.take()),
				"the second hook saw malloc_before: it is told malloc_after too")
		})
	}
}

// Expected: the malloc_before and malloc_after events of one request agree
// on its block's size (Event.AllocSize, "the block's size"), as they do for
// a request the limit refuses (both p.blockSize of the request), so that a
// hook pairing them (or summing the bytes asked at malloc_before against
// those refused at malloc_after) sees one request.
//
// Found on 7f2ddc2 (review s44b), fixed: an oversize request's malloc_before carries
// AllocSize = the request's size (refuseSize), its malloc_after the
// policy's block size for it (mallocFailed: p.blockSize): 2147483649 and
// 2281701375 on POCL's 2 GiB largest buffer, with exact bins.
func TestHostileS44bOversizeMallocEventsAgreeOnAllocSize(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q, mempool.WithLimit(1<<20))
	log := &recorder{}
	defer p.AddHook(log)()
	for _, tc := range []struct {
		name string
		size int64
	}{
		{"refused by the limit", 4<<20 + 1},
		{"over the device's largest buffer", p.Device().MaxMemAllocSize + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log.take()
			_, err := p.On(q).Allocate(tc.size)
			require.ErrorIs(t, err, mempool.ErrOutOfMemory)
			ev := log.take()
			require.Len(t, ev, 2)
			require.Equal(t, mempool.MallocBefore, ev[0].Kind)
			require.Equal(t, mempool.MallocAfter, ev[1].Kind)
			assert.Equal(t, ev[0].AllocSize, ev[1].AllocSize,
				"malloc_before and malloc_after of one request name one block size")
		})
	}
}
