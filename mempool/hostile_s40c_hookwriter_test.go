package mempool_test

// Hostile review s40c: a hook reads the findings (Findings) while its own
// memory is in flight; the sanitizer's output, called there, allocates
// (as its doc allows), and that request waits on the ladder's last rung
// for the memory of the call it runs in: for ever.

import (
	"sync/atomic"
	"testing"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s40cAllocWriter is a sanitizer output that, once armed, allocates size
// bytes of the pool at its first line (and closes them), recording the
// error.
type s40cAllocWriter struct {
	p    atomic.Pointer[mempool.Pool]
	size int64
	once atomic.Bool
	err  atomic.Pointer[error]
	n    atomic.Int64
}

func (w *s40cAllocWriter) Write(b []byte) (int, error) {
	w.n.Add(1)
	if p := w.p.Load(); p != nil && w.once.CompareAndSwap(false, true) {
		pb, err := p.Allocate(w.size)
		w.err.Store(&err)
		if err == nil {
			_ = pb.Close()
		}
	}
	return len(b), nil
}

// A sanitized pool (exact bins) under a limit; a block written one byte
// past its end and closed (its guard's check waits for a harvest), so
// that the next Findings prints an out-of-bounds line. A hook calls
// Findings (a read of the pool) at an event whose memory is in flight:
// alloc_before (the request's segment reserved, not yet allocated) or
// segment_free (a FreeHeld's segment being given back); the output,
// called on the same goroutine, allocates, as WithSanitizerOutput
// allows. The limit refuses that request (the memory in flight counts
// against it), and its last rung waits for that memory to arrive, which
// only the goroutine it runs on can bring: the call never returns. Before
// the change (and as the docs say: the ladder ends in an
// *OutOfMemoryError) the output's request failed at once and the call
// went on.
//
// alloc_before is new with the change (HEAD passes it); segment_free
// hung before it too (the old wait for frees in flight), and still does.
//
// Doc: hooks.go (a hook "may call the pool's read-only methods");
// sanitize.go, WithSanitizerOutput ("it may call the pool"); doc.go, Out
// of memory, step 7. Cause (guess): mempool/ladder.go:257, rungFinal's
// wait for inFlightLocked (ladder.go:288): a reservation of grow
// (ladder.go:135-140, the hooks) or a batch of freeSegments
// (release.go:141-168, the segment_free hook) on the waiter's own
// goroutine never arrives.
func TestS40cHookFindingsOutputAllocateWaitsForItself(t *testing.T) {
	for _, at := range []string{"alloc_before", "segment_free"} {
		t.Run(at, func(t *testing.T) {
			small := int64(cltest.Size(cltest.Queue(t), 1<<10, 4<<10))
			size := int64(cltest.Size(cltest.Queue(t), 64<<10, 1<<20))
			block := binSize(size + mempool.SanitizerGuard)
			limit := block
			if at == "alloc_before" {
				limit += binSize(small + mempool.SanitizerGuard)
			}
			w := &s40cAllocWriter{size: size}
			q, p := sanPoolTo(t, w, mempool.WithLimit(limit))
			// A finding for the next harvest.
			first := small
			if at == "segment_free" {
				first = size
			}
			x, err := p.Allocate(first)
			require.NoError(t, err)
			ev, err := q.EnqueueWriteBuffer(x.Base(), true, x.Offset()+first, []byte{1})
			require.NoError(t, err)
			_ = ev.Release()
			require.NoError(t, x.Close())
			var armed atomic.Bool
			kind := map[string]mempool.EventKind{"alloc_before": mempool.AllocBefore, "segment_free": mempool.SegmentFree}[at]
			p.AddHook(mempool.HookFunc(func(e mempool.Event) {
				if e.Kind == kind && armed.CompareAndSwap(true, false) {
					_ = p.Findings()
				}
			}))
			w.p.Store(p)
			armed.Store(true)
			var got *mempool.PooledBuffer
			var callErr error
			ok := withinLimit(t, at+": the call whose hook reads the findings", hangLimit, func() {
				if at == "alloc_before" {
					got, callErr = p.Allocate(size)
				} else {
					callErr = p.FreeHeld()
				}
			})
			if !ok {
				return // the pool may hold its state: nothing more of it
			}
			require.NoError(t, callErr)
			assert.Positive(t, w.n.Load(), "the finding printed")
			if e := w.err.Load(); e != nil && *e != nil {
				assert.ErrorIs(t, *e, mempool.ErrOutOfMemory)
			}
			if got != nil {
				require.NoError(t, got.Close())
			}
			require.NoError(t, p.Close())
		})
	}
}
