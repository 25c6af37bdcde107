package memhooks

import (
	"sync/atomic"
	"testing"
)

// CountSiteLookups counts the sites the hooks look up, from now until the
// test ends.
func CountSiteLookups(tb testing.TB) *atomic.Int64 {
	var n atomic.Int64
	old := lookupSite
	lookupSite = func(depth int) string {
		n.Add(1)
		return callerSite(depth)
	}
	tb.Cleanup(func() { lookupSite = old })
	return &n
}
