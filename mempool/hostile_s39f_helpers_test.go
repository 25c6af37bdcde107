package mempool_test

// Hostile review s39f: helpers shared by the s39f tests of this package.

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// s39fBlockedIn waits (at most a minute) until some goroutine is blocked
// on a sync.Mutex's Lock with frame in its stack, and reports whether one
// was seen. It lets a test order a goroutine's wait for a lock before
// its next step, without timing: a goroutine is seen blocked, not
// assumed to be.
func s39fBlockedIn(t *testing.T, frame string) bool {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	buf := make([]byte, 8<<20)
	for time.Now().Before(deadline) {
		n := runtime.Stack(buf, true)
		for _, g := range strings.Split(string(buf[:n]), "\n\n") {
			head, _, _ := strings.Cut(g, "\n")
			if strings.Contains(head, "[sync.Mutex.Lock") && strings.Contains(g, frame) {
				return true
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Errorf("no goroutine was seen blocked on a mutex in %s within a minute", frame)
	return false
}
