package cl_test

import (
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestS40fProfileOfIncompleteCommand: Event.Profile's doc says the command
// must be complete, and the package doc that the rules a runtime may not
// check are checked here, so that every runtime answers the status of the
// specification: clGetEventProfilingInfo is CL_PROFILING_INFO_NOT_AVAILABLE
// while the command is not CL_COMPLETE (OpenCL 1.2, 5.12). POCL answers
// so; Oclgrind (which runs nothing before a flush) answers a Profile of
// zeros, and no error, so Duration reads 0 (or End-Start of a half-set
// profile: garbage).
func TestS40fProfileOfIncompleteCommand(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	q := cltest.Queue(t) // profiling
	ctx := q.Context()
	n := cltest.Size(q, 256, 4096)
	x, err := ctx.CreateBuffer(cl.MemReadWrite, int64(4*n))
	require.NoError(t, err)
	defer x.Release()
	out, err := ctx.CreateBuffer(cl.MemReadWrite, int64(4*n))
	require.NoError(t, err)
	defer out.Release()
	k := cltest.SlowReadKernel(t, q)
	require.NoError(t, k.SetArgs(x, out, int32(cltest.Size(q, 2000, 20000))))
	ev, err := q.EnqueueNDRangeKernel(k, nil, []int{n}, nil)
	require.NoError(t, err)
	defer ev.Release()

	p, perr := ev.Profile()
	st, err := ev.Status() // after Profile: if not complete now, it was not then
	require.NoError(t, err)
	if st == cl.Complete {
		t.Skip("the kernel completed before Profile could see it running; nothing to check")
	}
	assert.ErrorIs(t, perr, cl.ErrProfilingInfoNotAvailable,
		"Profile of a command still %v returned %+v and no error", st, p)
	require.NoError(t, ev.Wait())
	p, err = ev.Profile()
	require.NoError(t, err)
	assert.Positive(t, p.End)
}
