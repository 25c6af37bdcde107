package cl_test

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const s34aArgSrc = `kernel void k(global long *o) { o[0] = 1; }`

// s34aBuildOutcome builds s34aArgSrc with opts and says what happened:
// "refused" (ErrInvalidBuildOptions before or from the runtime), "failed"
// (another build error), "ok+quals" (built, and SetArg refuses a number for
// the buffer), or "ok-LOST" (built, and SetArg took a number for the
// buffer: the qualifiers are lost).
func s34aBuildOutcome(t *testing.T, q *cl.CommandQueue, opts string) string {
	p, err := q.Context().BuildProgram(s34aArgSrc, opts)
	switch {
	case errors.Is(err, cl.ErrInvalidBuildOptions):
		return "refused"
	case err != nil:
		return "failed: " + firstLines(err.Error(), 2)
	}
	defer p.Release()
	k, err := p.Kernel("k")
	require.NoError(t, err)
	defer k.Release()
	if err := k.SetArg(0, int64(0x1234)); err != nil {
		return "ok+quals"
	}
	return "ok-LOST"
}

// PASSES. Valid options (an argument attached or separate, tabs and
// newlines between, a standard, warnings) build, with the qualifiers, on
// every runtime: BuildProgram passes tabs and newlines as spaces (before,
// POCL took "-w\t-D X" for one unknown option, and Oclgrind failed on a
// newline).
func TestHostileS34aValidOptionsBuild(t *testing.T) {
	cltest.Watchdog(t, 120*time.Second)
	q := cltest.Queue(t)
	dir := t.TempDir()
	for _, opts := range []string{
		"-I " + dir, "-I" + dir, "-D X=1", "-DX", "-D X", "-D\tX", "-D\nX",
		"-cl-std=CL1.2", "-w", "-D X -w", "-w -D X\n", "  -I " + dir + "  ",
		"-cl-fast-relaxed-math -cl-mad-enable",
	} {
		assert.Equal(t, "ok+quals", s34aBuildOutcome(t, q, opts), "options %q", opts)
	}
	for _, opts := range []string{"-I", "-D", "-x", "-w -I", "-w\t-D\n", "-D X -I  "} {
		assert.Equal(t, "refused", s34aBuildOutcome(t, q, opts), "options %q", opts)
	}
}

// s34aDangling are options that take the next word as their argument,
// left at the end with none. Each runs in a child: a runtime may crash.
var s34aDangling = []string{"-U", "-include", "-isystem", "-iquote", "-idirafter", "-imacros",
	"-Xclang", "-mllvm", "-o", "-cl-std", "-x spir -spir-std", "-MF", "-target", "-D X -U",
	`"-I"`, `'-I'`, `-w "-D"`, `-I "a -I"`, "-I\u00a0", "-I\u200b", "-I\\"}

// PASSES (exploration; POCL refuses every one, none crashed): each dangling option other than -D, -I and -x, in a child
// process. A crash of the child is a defect (the options reach the runtime
// unchecked); "ok-LOST" is a defect (a number taken for a buffer).
func TestHostileS34aDanglingOtherOptions(t *testing.T) {
	if os.Getenv(cltest.ChildEnv) == "" && cltest.Simulator(cltest.Queue(t)) {
		t.Skip("21 children, each building on the simulator: too slow for its suite")
	}
	for i, opts := range s34aDangling {
		role := fmt.Sprintf("s34a-dangling-%d", i)
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if r := os.Getenv(cltest.ChildEnv); r != "" && r != role {
				t.Skip("another child")
			}
			s32gChild(t, fmt.Sprintf("TestHostileS34aDanglingOtherOptions/%d", i), role, func(t *testing.T) {
				q := cltest.Queue(t)
				got := s34aBuildOutcome(t, q, opts)
				t.Logf("options %q: %s", opts, got)
				assert.NotEqual(t, "ok-LOST", got)
			})
		})
	}
}
