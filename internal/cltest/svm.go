package cltest

import (
	"testing"

	"github.com/clpool/clpool/cl"
)

// SVMQueue returns Queue(tb) if its device supports every shared-virtual-
// memory capability of need (cl.SVMCoarseGrainBuffer for any SVM), and
// skips the test, saying why, where it does not: on OpenCL 1.2 devices
// such as Oclgrind, which have no SVM at all.
func SVMQueue(tb testing.TB, need cl.SVMCapabilities) *cl.CommandQueue {
	tb.Helper()
	q := Queue(tb)
	if have := q.Context().SVMCapabilities(); have&need != need {
		tb.Skipf("this test needs shared virtual memory (%v); device %v, %s, supports %v",
			need, q.Device(), q.Device().Version, have)
	}
	return q
}
