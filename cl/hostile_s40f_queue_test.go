package cl_test

import (
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestS40fUnknownQueuePropertiesRefused: bits that are no
// cl_command_queue_properties of OpenCL 1.2 are CL_INVALID_VALUE
// (clCreateCommandQueue). POCL refuses them; Oclgrind makes the queue, and
// Properties reports the bogus bits, so the same program fails on one
// runtime and not the other, against the package doc's aim that every
// runtime answer the specification's status.
func TestS40fUnknownQueuePropertiesRefused(t *testing.T) {
	cltest.Watchdog(t, 30*time.Second)
	q := cltest.Queue(t)
	for _, props := range []cl.QueueProperties{1 << 20, cl.QueueProfiling | 1<<9, 1 << 62} {
		q2, err := cl.NewCommandQueue(q.Context(), q.Device(), props)
		if q2 != nil {
			t.Logf("props %#x: a queue with Properties %#x", uint64(props), uint64(q2.Properties()))
			require.NoError(t, q2.Release())
		}
		assertCallErr(t, err, cl.ErrInvalidValue, "clCreateCommandQueue", "props %#x", uint64(props))
	}
}

// TestS40fUnholdOfNilQueue: the package doc says every call on a nil
// object returns an error matching its Status, or, for the calls that
// return none, the zero value; none panics (nil_test.go). Hold and
// TryHold of a nil queue answer false, but Unhold of one panics with a
// nil pointer dereference, where a deferred Unhold after a Hold of a
// queue that turned out nil is the natural misuse.
func TestS40fUnholdOfNilQueue(t *testing.T) {
	var q *cl.CommandQueue
	assert.False(t, q.Hold())
	assert.False(t, q.TryHold())
	assert.NotPanics(t, func() { q.Unhold() })
}
