package array_test

import (
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ReleaseKernels from one goroutine while another runs operations on the
// same context. The kernels are "built once per context and element type
// ... and shared by all goroutines", "arrays used on ctx afterwards build
// them again" (doc.go, kernels.go), and ReleaseKernels takes the cache's
// lock as a call safe for concurrent use would. Expected: every operation
// succeeds, with the kernels it looked up or rebuilt ones.
//
// Observed: the process dies with SIGSEGV in clGetKernelArgInfo (under
// cl.Kernel.SetArgs, from array.run). ReleaseKernels (kernels.go) calls
// ks.release, which clReleaseKernel's every kernel of the set, without
// taking the guardedKernel locks that run holds from SetArgs to the
// enqueue; run got the set from kernelsFor before the release, so it
// hands the driver a freed kernel. The crash is in a child process
// (cltest.Reexec) so that it fails only this test.
func TestHostileS30hReleaseKernelsConcurrent(t *testing.T) {
	out, err := cltest.Reexec(t, "^TestHostileS30hReleaseKernelsChild$", cltest.ChildEnv+"=s30hrelease")
	if err != nil || !strings.Contains(out, "--- PASS: TestHostileS30hReleaseKernelsChild") {
		lines := strings.Split(out, "\n")
		t.Errorf("the child running Sum next to ReleaseKernels failed (%v); its output begins:\n%s",
			err, strings.Join(lines[:min(len(lines), 16)], "\n"))
	}
}

func TestHostileS30hReleaseKernelsChild(t *testing.T) {
	if os.Getenv(cltest.ChildEnv) != "s30hrelease" {
		t.Skip("run by TestHostileS30hReleaseKernelsConcurrent")
	}
	q := cltest.Queue(t)
	x, err := array.Full[float32](q, 256, 1, array.Alloc(nil))
	require.NoError(t, err)
	defer x.Close()
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			array.ReleaseKernels(q.Context())
		}
	}()
	failures := 0
	var first error
	for i := 0; i < 60; i++ {
		s, err := array.Sum(x)
		if err != nil {
			if first == nil {
				first = err
			}
			failures++
			continue
		}
		assert.Equal(t, float32(256), s)
	}
	stop.Store(true)
	wg.Wait()
	assert.Zero(t, failures, "%d of 400 Sums failed next to ReleaseKernels; first: %v", failures, first)
}
