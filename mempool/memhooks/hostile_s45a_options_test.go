package memhooks_test

import (
	"io"
	"testing"

	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/stretchr/testify/assert"
)

// TestHostileS45aNilTraceOptionPanicsAtTheCall: a nil TraceOption (a
// caller building its options conditionally) panics in the constructor,
// saying which option, not with a nil dereference (review s45a found
// mempool's constructors doing that; these two cannot return an error).
func TestHostileS45aNilTraceOptionPanicsAtTheCall(t *testing.T) {
	var none memhooks.TraceOption
	assert.PanicsWithValue(t, "memhooks: NewTraceRecorder: option 1 is nil", func() {
		memhooks.NewTraceRecorder(io.Discard, memhooks.WithSites(), none)
	})
	assert.PanicsWithValue(t, "memhooks: NewHistory: option 0 is nil", func() {
		memhooks.NewHistory(8, none)
	})
}
