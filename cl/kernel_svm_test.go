package cl_test

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An argument set to an SVM pointer and then to a buffer runs with the
// buffer, whatever came between, and the other arguments stay set.
// NVIDIA's driver refused every such enqueue (CL_INVALID_KERNEL_ARGS)
// until SetArg renewed the kernel (renew.go); POCL always ran them.
func TestKernelArgumentFromSVMToBuffer(t *testing.T) {
	q := cltest.Queue(t)
	if q.Context().SVMCapabilities()&cl.SVMCoarseGrainBuffer == 0 {
		t.Skip("no SVM")
	}
	src := `kernel void k(global long *o, long n) { o[0] = n; }`
	read := func(b *cl.Buffer) int64 {
		got := make([]byte, 8)
		if err := q.ReadBuffer(b, 0, got); err != nil {
			return -1
		}
		return int64(binary.LittleEndian.Uint64(got))
	}
	svm := func() *cl.SVM {
		s, err := q.Context().SVMAlloc(cl.SVMReadWrite, 256, 0)
		require.NoError(t, err)
		t.Cleanup(func() { s.Free() })
		return s
	}
	// Each case is a sequence of steps on argument 0 of k (argument 1 is
	// 7): an SVM, a second SVM, the buffer out, a run (enqueue and
	// finish), the first SVM freed, argument 1 set again. Then k runs,
	// and out must hold 7.
	for _, steps := range []string{
		"svm run buf",
		"svm buf",
		"svm run buf free",
		"svm run svm2 free run buf",
		"svm run buf value",
		"buf run svm run buf",
	} {
		k := s32gKernel(t, q, src, "", "k")
		out := s32gBuf(t, q, 8)
		require.NoError(t, k.SetArg(1, int64(7)))
		s1, s2 := svm(), svm()
		for _, step := range strings.Fields(steps) {
			switch step {
			case "svm":
				require.NoError(t, k.SetArg(0, s1), steps)
			case "svm2":
				require.NoError(t, k.SetArg(0, s2), steps)
			case "buf":
				require.NoError(t, k.SetArg(0, out), steps)
			case "value":
				require.NoError(t, k.SetArg(1, int64(7)), steps)
			case "free":
				require.NoError(t, s1.Free(), steps)
			case "run":
				require.NoError(t, q.EnqueueKernel(k, []int{1}, nil), steps)
				require.NoError(t, q.Finish(), steps)
			}
		}
		require.NoError(t, q.EnqueueKernel(k, []int{1}, nil), steps)
		require.NoError(t, q.Finish())
		assert.Equal(t, int64(7), read(out), steps)
	}
	// Two global args: one SVM, one buffer, then swapped.
	src2 := `kernel void k2(global long *a, global long *b) { a[0] = 3; b[0] = 4; }`
	{
		k := s32gKernel(t, q, src2, "", "k2")
		out := s32gBuf(t, q, 8)
		s := svm()
		defer s.Free()
		require.NoError(t, k.SetArg(0, s))
		require.NoError(t, k.SetArg(1, out))
		require.NoError(t, q.EnqueueKernel(k, []int{1}, nil))
		assert.Equal(t, int64(4), read(out))
		require.NoError(t, k.SetArg(0, out))
		require.NoError(t, k.SetArg(1, s))
		require.NoError(t, q.EnqueueKernel(k, []int{1}, nil), "buffer, then SVM")
		assert.Equal(t, int64(3), read(out))
	}
	// A freed SVM on another argument is still refused after a renewal.
	{
		k := s32gKernel(t, q, src2, "", "k2")
		out := s32gBuf(t, q, 8)
		s1, s2 := svm(), svm()
		require.NoError(t, k.SetArg(0, s1))
		require.NoError(t, k.SetArg(1, s2))
		require.NoError(t, s2.Free())
		require.NoError(t, k.SetArg(0, out))
		assert.ErrorIs(t, q.EnqueueKernel(k, []int{1}, nil), cl.ErrInvalidValue, "the freed SVM")
		require.NoError(t, k.SetArg(1, out))
		require.NoError(t, q.EnqueueKernel(k, []int{1}, nil))
		assert.Equal(t, int64(4), read(out))
		require.NoError(t, s1.Free())
	}
	// Local memory and an offset into an SVM survive a renewal.
	{
		src3 := `kernel void k3(global long *a, global long *b, local long *l, long n) { l[0] = n; a[0] = l[0] + b[0]; }`
		k := s32gKernel(t, q, src3, "", "k3")
		out := s32gBuf(t, q, 8)
		s := svm()
		defer s.Free()
		m, err := q.EnqueueSVMMap(s, true, 0, 256)
		require.NoError(t, err)
		binary.LittleEndian.PutUint64(m[64:], 100)
		require.NoError(t, q.EnqueueSVMUnmap(s))
		require.NoError(t, k.SetArg(0, s))
		require.NoError(t, k.SetArgSVMPointer(1, s, 64))
		require.NoError(t, k.SetArg(2, cl.LocalMem(64)))
		require.NoError(t, k.SetArg(3, int64(5)))
		require.NoError(t, k.SetArg(0, out))
		require.NoError(t, q.EnqueueKernel(k, []int{1}, nil))
		assert.Equal(t, int64(105), read(out))
	}
}
