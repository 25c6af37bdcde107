package cltest

import (
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"
)

// Watchdog turns a hang into a failure: if t has not finished within d,
// it writes every goroutine's stack to standard error and panics, which
// ends the test binary with that stack rather than at go test's timeout.
func Watchdog(t testing.TB, d time.Duration) {
	t.Helper()
	name := t.Name()
	timer := time.AfterFunc(d, func() {
		buf := make([]byte, 16<<20)
		n := runtime.Stack(buf, true)
		fmt.Fprintf(os.Stderr, "\n=== %s: hung for %v; every goroutine:\n%s\n", name, d, buf[:n])
		panic(name + ": hung (cltest.Watchdog)")
	})
	t.Cleanup(func() { timer.Stop() })
}
