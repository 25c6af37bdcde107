package trace_test

import (
	"bytes"
	"testing"

	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Writer.Write's doc: "An event Read would refuse in the Writer's format
// (an unknown op; a negative size, or time or queue where the format has
// them) is refused with an error, and nothing is written for it". Write
// checks each event's own fields only: an event whose time is before the
// last one's, or a free of a block that is not live, is written, and the
// trace it makes is one Read refuses (ErrTimeBackwards; a free of a block
// not live). Expected: Write refuses them, as its doc says of any event
// Read would refuse. Observed: both written, no error.
func TestHostileS30eWriterWritesEventsReadRefuses(t *testing.T) {
	cases := []struct {
		name   string
		events []trace.Event
	}{
		{"time backwards", []trace.Event{
			{Op: trace.Alloc, ID: 1, Size: 64, Time: 100},
			{Op: trace.Free, ID: 1, Time: 50},
		}},
		{"free of a block never allocated", []trace.Event{
			{Op: trace.Free, ID: 7, Time: 10},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := trace.NewTimedWriter(&buf)
			var writeErr error
			for _, ev := range c.events {
				if err := w.Write(ev); err != nil {
					writeErr = err
				}
			}
			require.NoError(t, w.Flush())
			_, readErr := trace.Read(bytes.NewReader(buf.Bytes()))
			assert.Error(t, writeErr, "Write accepted an event Read refuses (%v); it wrote:\n%s", readErr, buf.String())
			assert.NoError(t, readErr, "what Write wrote reads back:\n%s", buf.String())
		})
	}
}
