package cl_test

import (
	"os"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/require"
)

// s40gSizes are work sizes that fit the global check of 8f46212 (fewer
// than 2^64 work-items) but whose local sizes multiply past 2^64 (a
// work-group of 0 in a size_t), or exceed the global ones.
var s40gSizes = map[string][2][]int{
	"local2e32x2e32":     {{1, 1}, {1 << 32, 1 << 32}},
	"local2e62x4global1": {{1, 1}, {1 << 62, 4}},
	"local2e21x3dims":    {{1, 1, 1}, {1 << 21, 1 << 21, 1 << 22}},
	"localAboveGlobal":   {{4}, {1 << 40}},
}

// TestS40gLocalWorkSizeProductOverflows runs each size in a child process
// (an abort there is the finding) and expects an error from the enqueue
// or the wait, never the end of the process.
func TestS40gLocalWorkSizeProductOverflows(t *testing.T) {
	if name := os.Getenv(cltest.ChildEnv); name != "" {
		sz := s40gSizes[name]
		q := cltest.Queue(t)
		prog, err := q.Context().BuildProgram(`kernel void k(global int *x) { x[0] = 1; }`, "")
		require.NoError(t, err)
		k, err := prog.Kernel("k")
		require.NoError(t, err)
		b, err := q.Context().CreateBuffer(cl.MemReadWrite, 64)
		require.NoError(t, err)
		require.NoError(t, k.SetArg(0, b))
		ev, err := q.EnqueueNDRangeKernel(k, nil, sz[0], sz[1])
		if ev != nil {
			t.Logf("enqueued global %v local %v; waiting", sz[0], sz[1])
			err = ev.Wait()
		}
		t.Logf("CHILDRESULT %v", err)
		require.Error(t, err)
		return
	}
	for name, sz := range s40gSizes {
		t.Run(name, func(t *testing.T) {
			cltest.Watchdog(t, 60*time.Second)
			out, err := cltest.Reexec(t, "^TestS40gLocalWorkSizeProductOverflows$", cltest.ChildEnv+"="+name)
			t.Logf("child output:\n%s", out)
			require.NoError(t, err, "global %v local %v: the child process did not end well", sz[0], sz[1])
		})
	}
}
