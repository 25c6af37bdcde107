package cl_test

import (
	"encoding/binary"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// le returns the little-endian bytes of vs.
func le(vs ...int32) []byte {
	out := make([]byte, 4*len(vs))
	for i, v := range vs {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(v))
	}
	return out
}

// WriteSVM and ReadSVM move Go memory to and from SVM without a map, at
// offsets, around a kernel that reads and writes the same SVM; coarse and
// fine grain alike.
func TestReadWriteSVM(t *testing.T) {
	q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
	grains := []cl.SVMFlags{cl.SVMReadWrite}
	if q.Context().SVMCapabilities()&cl.SVMFineGrainBuffer != 0 {
		grains = append(grains, cl.SVMFineGrain)
	} else {
		t.Logf("%v has no fine-grain SVM: coarse grain only", q.Device())
	}
	k := svmKernel(t, q, "twice")
	for _, flags := range grains {
		t.Run(flags.String(), func(t *testing.T) {
			const n = 16
			s, err := q.Context().SVMAlloc(flags, 4*n, 0)
			require.NoError(t, err)
			defer func() { require.NoError(t, s.Free()) }()

			src := make([]int32, n)
			for i := range src {
				src[i] = int32(i + 1)
			}
			require.NoError(t, q.WriteSVM(s, 0, le(src...)))
			require.NoError(t, q.WriteSVM(s, 8, le(-3, -4)), "a part, at an offset")
			require.NoError(t, k.SetArgs(s))
			require.NoError(t, q.EnqueueKernel(k, []int{n}, nil))

			got := make([]byte, 4*n)
			require.NoError(t, q.ReadSVM(s, 0, got), "after the kernel, with no Finish")
			want := make([]int32, n)
			for i := range want {
				want[i] = 2 * src[i]
			}
			want[2], want[3] = -6, -8
			assert.Equal(t, want, ints(got))

			part := make([]byte, 8)
			require.NoError(t, q.ReadSVM(s, 4*(n-2), part), "the last two elements")
			assert.Equal(t, want[n-2:], ints(part))
		})
	}
}

// Every misuse of ReadSVM and WriteSVM is refused with its Status before
// the driver sees it, and names clEnqueueSVMMemcpy.
func TestReadWriteSVMMisuse(t *testing.T) {
	q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
	ctx := q.Context()
	s, err := ctx.SVMAlloc(0, 64, 0)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Free()) }()
	freed, err := ctx.SVMAlloc(0, 64, 0)
	require.NoError(t, err)
	require.NoError(t, freed.Free())
	ctx2, err := cl.CreateContext(q.Device())
	require.NoError(t, err)
	defer ctx2.Release()
	q2, err := cl.NewCommandQueue(ctx2, q.Device(), 0)
	require.NoError(t, err)
	defer q2.Release()

	for _, c := range []struct {
		name   string
		q      *cl.CommandQueue
		s      *cl.SVM
		offset int64
		size   int
		want   error
		detail string
	}{
		{"freed SVM", q, freed, 0, 8, cl.ErrInvalidValue, "SVM is freed"},
		{"another context's SVM", q2, s, 0, 8, cl.ErrInvalidContext, "another context"},
		{"past the end", q, s, 60, 8, cl.ErrInvalidValue, "not inside"},
		{"negative offset", q, s, -4, 8, cl.ErrInvalidValue, "not inside"},
		{"empty host slice", q, s, 0, 0, cl.ErrInvalidValue, "size 0"},
	} {
		for _, write := range []bool{false, true} {
			host := make([]byte, c.size)
			var err error
			if write {
				err = c.q.WriteSVM(c.s, c.offset, host)
			} else {
				err = c.q.ReadSVM(c.s, c.offset, host)
			}
			assert.ErrorIs(t, err, c.want, "%s, write %v", c.name, write)
			assert.ErrorContains(t, err, "clEnqueueSVMMemcpy", "%s, write %v", c.name, write)
			assert.ErrorContains(t, err, c.detail, "%s, write %v", c.name, write)
		}
	}

	// A mapped SVM is the host's until unmapped.
	_, err = q.EnqueueSVMMap(s, true, 0, 16)
	require.NoError(t, err)
	err = q.WriteSVM(s, 32, make([]byte, 8))
	assert.ErrorIs(t, err, cl.ErrInvalidValue)
	assert.ErrorContains(t, err, "mapped at [0, 16)")
	assert.ErrorIs(t, q.ReadSVM(s, 32, make([]byte, 8)), cl.ErrInvalidValue)
	require.NoError(t, q.EnqueueSVMUnmap(s))
	require.NoError(t, q.WriteSVM(s, 32, make([]byte, 8)), "unmapped again")
	require.NoError(t, q.Finish())
}

// A fine-grain SVM's own bytes are host memory too: a copy between them
// and an overlapping region of the same SVM is refused; a disjoint one
// works.
func TestReadWriteSVMOverlap(t *testing.T) {
	q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer|cl.SVMFineGrainBuffer)
	s, err := q.Context().SVMAlloc(cl.SVMFineGrain, 64, 0)
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Free()) }()
	host := s.Bytes()
	copy(host, le(1, 2, 3, 4))

	err = q.ReadSVM(s, 4, host[0:8])
	assert.ErrorIs(t, err, cl.ErrMemCopyOverlap)
	assert.ErrorContains(t, err, "clEnqueueSVMMemcpy")
	assert.ErrorIs(t, q.WriteSVM(s, 0, host[4:12]), cl.ErrMemCopyOverlap)
	assert.Equal(t, []int32{1, 2, 3, 4}, ints(host[:16]), "refused copies changed nothing")

	require.NoError(t, q.ReadSVM(s, 0, host[32:48]), "disjoint regions of one SVM")
	assert.Equal(t, []int32{1, 2, 3, 4}, ints(host[32:48]))
}

// A nil queue or SVM is an error on every runtime, OpenCL 1.2 ones too:
// nothing reaches the driver.
func TestReadWriteSVMNil(t *testing.T) {
	var nilQ *cl.CommandQueue
	q := cltest.Queue(t)
	for _, c := range []struct {
		name string
		q    *cl.CommandQueue
		want error
	}{
		{"nil queue", nilQ, cl.ErrInvalidCommandQueue},
		{"nil SVM", q, cl.ErrInvalidValue},
	} {
		require.NotPanics(t, func() {
			err := c.q.ReadSVM(nil, 0, make([]byte, 8))
			assert.ErrorIs(t, err, c.want, c.name)
			assert.ErrorContains(t, err, "clEnqueueSVMMemcpy", c.name)
			assert.ErrorIs(t, c.q.WriteSVM(nil, 0, make([]byte, 8)), c.want, c.name)
		})
	}
}
