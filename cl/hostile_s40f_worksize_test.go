package cl_test

import (
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestS40fGlobalWorkSizeProductOverflows: every global size is at least 1
// and fits an int, so EnqueueNDRangeKernel passes them to the runtime, but
// their product, the number of work-items, is 2^64: a size_t of 0. POCL
// accepts the enqueue and then aborts the process at the run
// (pthread_scheduler.c: get_wg_index_range: Assertion `max_wgs > 0'
// failed); Oclgrind accepts it and dies of std::bad_alloc. The package
// checks global sizes of 0 (which POCL accepts) and the local memory POCL
// would abort on, so that a bad work size is an error and not the end of
// the program; this one was neither refused nor survivable (run in a child
// process then: it aborted). Now refused before the enqueue.
func TestS40fGlobalWorkSizeProductOverflows(t *testing.T) {
	for name, global := range map[string][]int{
		"2e32x2e32": {1 << 32, 1 << 32}, "2e62x4": {1 << 62, 4}, "2e16x2e24x2e24": {1 << 16, 1 << 24, 1 << 24},
	} {
		t.Run(name, func(t *testing.T) {
			q := cltest.Queue(t)
			prog, err := q.Context().BuildProgram(`kernel void k(global int *x) { if (get_global_id(0) == 0 && get_global_id(1) == 0) x[0] = 1; }`, "")
			require.NoError(t, err)
			defer prog.Release()
			k, err := prog.Kernel("k")
			require.NoError(t, err)
			defer k.Release()
			b, err := q.Context().CreateBuffer(cl.MemReadWrite, 64)
			require.NoError(t, err)
			defer b.Release()
			require.NoError(t, k.SetArg(0, b))
			ev, err := q.EnqueueNDRangeKernel(k, nil, global, nil)
			if ev != nil {
				t.Logf("enqueued global %v; waiting", global)
				err = ev.Wait() // aborts here
				_ = ev.Release()
			}
			assert.ErrorIs(t, err, cl.ErrInvalidGlobalWorkSize, "global %v: 2^64 work-items, 0 in a size_t", global)
		})
	}
}
