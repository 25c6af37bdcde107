package trace

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// handles is a fake allocator for Replay: handles 1, 2, ... in order,
// recording every free, and failing the allocation numbered failAt (from
// 1; 0: never).
type handles struct {
	next   int
	failAt int
	freed  []int
}

func (h *handles) alloc(int64) (int, error) {
	h.next++
	if h.next == h.failAt {
		return 0, errors.New("out of memory")
	}
	return h.next, nil
}

func (h *handles) free(x int) error {
	h.freed = append(h.freed, x)
	return nil
}

// Replay keeps each block's handle by id and trusts the events: a free of
// an id that is not live (a double free, events built by hand or from a
// window that Check was not run on) looks the id up in its map and passes
// free the zero handle, one alloc never returned (trace.go, Replay's
// Free case: h := live[ev.ID] with no ok check); for a raw allocator that
// is Free(nil), which succeeds silently. An allocation of a live id
// overwrites the handle, and the first block is never freed, not even at
// the end. Expected: Replay refuses events Check refuses (before calling
// alloc or free at all), or at least never hands free a handle alloc did
// not return and frees every handle it got.
func TestHostileS30ReplayPassesFreeAHandleItNeverAllocated(t *testing.T) {
	t.Run("double free", func(t *testing.T) {
		events := []Event{{Op: Alloc, ID: 1, Size: 8}, {Op: Free, ID: 1}, {Op: Free, ID: 1}}
		var h handles
		err := Replay(events, h.alloc, h.free)
		assert.Error(t, err, "a free of block 1, which is not live")
		assert.NotContains(t, h.freed, 0, "free got the zero handle, which alloc never returned: freed %v", h.freed)
	})
	t.Run("allocation of a live id", func(t *testing.T) {
		events := []Event{{Op: Alloc, ID: 1, Size: 8}, {Op: Alloc, ID: 1, Size: 16}, {Op: Free, ID: 1}}
		var h handles
		err := Replay(events, h.alloc, h.free)
		if err == nil {
			assert.ElementsMatch(t, []int{1, 2}, h.freed, "every handle alloc returned is freed; handle 1 leaked")
		}
		assert.Error(t, err, "block 1 allocated while live")
	})
}

// When alloc (or free) fails mid-trace, Replay returns at once and the
// handles of the blocks live then are lost: Replay's own map holds them
// and nobody frees them (on a raw allocator, device buffers leak; the
// doc's "Blocks the trace leaves live are freed at the end" holds only
// for a replay that gets to the end). The caller cannot free them: it
// never sees them. Expected: the blocks allocated so far are freed before
// the error is returned.
func TestHostileS30ReplayLeaksLiveHandlesOnError(t *testing.T) {
	events := []Event{{Op: Alloc, ID: 1, Size: 8}, {Op: Alloc, ID: 2, Size: 8}, {Op: Alloc, ID: 3, Size: 8}}
	h := handles{failAt: 3}
	err := Replay(events, h.alloc, h.free)
	require.Error(t, err)
	assert.ElementsMatch(t, []int{1, 2}, h.freed, "blocks 1 and 2, live when block 3's allocation failed, are never freed")
}

// Writer writes any Event it is given: an op Read does not know (Op's own
// MarshalText refuses it), a negative size, time or queue. The trace it
// leaves is one Read and ReadComplete refuse, and Write returned nil for
// the line: a recorder learns its trace is broken only when it is read
// back (trace.go, Writer.Write checks nothing; Check's checkFields would).
// Expected: Write returns an error for an event Read would refuse and
// writes nothing for it.
func TestHostileS30WriterWritesEventsReadRefuses(t *testing.T) {
	for name, ev := range map[string]Event{
		"unknown op":     {Op: 'x', ID: 1, Size: 8},
		"zero op":        {ID: 1, Size: 8},
		"negative size":  {Op: Alloc, ID: 1, Size: -8},
		"negative time":  {Op: Alloc, ID: 1, Size: 8, Time: -5},
		"negative queue": {Op: Alloc, ID: 1, Size: 8, Time: 5, Queue: -1},
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			w := NewSitedWriter(&buf)
			werr := w.Write(ev)
			require.NoError(t, w.Flush())
			assert.Error(t, werr, "Write took %+v, which gives a trace Read refuses", ev)
			assert.Empty(t, buf.String(), "nothing written for a refused event")
			// The Writer stays usable, and what it wrote reads back.
			require.NoError(t, w.Write(Event{Op: Alloc, ID: 1, Size: 8, Time: 1, Queue: 1}))
			require.NoError(t, w.Write(Event{Op: Free, ID: 1, Time: 2, Queue: 1}))
			require.NoError(t, w.Flush())
			_, rerr := ReadComplete(bytes.NewReader(buf.Bytes()))
			assert.NoError(t, rerr)
		})
	}
}
