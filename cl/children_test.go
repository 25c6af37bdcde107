package cl_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
)

// childCase is one case of a test that runs each case in a child process
// of its own, so that a runtime that crashes on one fails that case alone.
type childCase struct {
	name string
	// skip, if set, says why the case is skipped on device d ("" to run
	// it): a crash of that runtime already known.
	skip func(d *cl.Device) string
	run  func(t *testing.T, q *cl.CommandQueue)
}

// runInChildren runs the cases of test (its name), each in a child whose
// role is prefix and the case's name; in such a child, it runs the case
// the role names.
func runInChildren(t *testing.T, test, prefix string, cases []childCase) {
	if role := os.Getenv(cltest.ChildEnv); strings.HasPrefix(role, prefix) {
		for _, c := range cases {
			if prefix+c.name == role {
				c.run(t, cltest.Queue(t))
				return
			}
		}
		t.Fatalf("no case %q", role)
	} else if role != "" {
		t.Skip("a child of reexec for another test")
	}
	cltest.Watchdog(t, 300*time.Second)
	dev := cltest.Queue(t).Device()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.skip != nil {
				if why := c.skip(dev); why != "" {
					t.Skip(why)
				}
			}
			out, err := cltest.Reexec(t, "^"+test+"$", cltest.ChildEnv+"="+prefix+c.name)
			assert.NoError(t, err, "the child crashed or failed:\n%s", firstLines(out, 20))
		})
	}
}
