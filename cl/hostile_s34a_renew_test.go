package cl_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const s34aSrc = `
kernel void k(global int *a, global int *out, int n, local int *tmp, float f, global const int *c) {
	size_t i = get_global_id(0);
	tmp[get_local_id(0)] = a[i] * n + c[i];
	barrier(CLK_LOCAL_MEM_FENCE);
	out[i] = tmp[get_local_id(0)] + (int)f;
}
kernel void other(global int *o, int v) { o[get_global_id(0)] = v; }
`

const s34aN = 64 // work items

// s34aMem is one memory argument's backing: a buffer, or an SVM with an
// offset, of 2*s34aN ints.
type s34aMem struct {
	buf *cl.Buffer
	svm *cl.SVM
	off int64 // bytes, into svm
}

func s34aInts(vals []int32) []byte {
	b := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return b
}

func s34aNewSVM(t *testing.T, q *cl.CommandQueue, data []byte) *cl.SVM {
	t.Helper()
	s, err := q.Context().SVMAlloc(cl.SVMReadWrite, int64(len(data)), 0)
	require.NoError(t, err)
	t.Cleanup(func() { s.Free() })
	m, err := q.EnqueueSVMMap(s, true, 0, int64(len(data)))
	require.NoError(t, err)
	copy(m, data)
	require.NoError(t, q.EnqueueSVMUnmap(s))
	require.NoError(t, q.Finish())
	return s
}

func s34aNewBuf(t *testing.T, q *cl.CommandQueue, data []byte) *cl.Buffer {
	t.Helper()
	b, err := q.Context().CreateBuffer(cl.MemReadWrite, int64(len(data)))
	require.NoError(t, err)
	t.Cleanup(func() { b.Release() })
	require.NoError(t, q.WriteBuffer(b, 0, data))
	return b
}

// read returns s34aN ints of m, from its offset.
func (m s34aMem) read(t *testing.T, q *cl.CommandQueue) []int32 {
	t.Helper()
	raw := make([]byte, 4*s34aN)
	if m.buf != nil {
		require.NoError(t, q.ReadBuffer(m.buf, 0, raw))
	} else {
		got, err := q.EnqueueSVMMap(m.svm, false, m.off, int64(len(raw)))
		require.NoError(t, err)
		copy(raw, got)
		require.NoError(t, q.EnqueueSVMUnmap(m.svm))
		require.NoError(t, q.Finish())
	}
	out := make([]int32, s34aN)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out
}

func (m s34aMem) set(k *cl.Kernel, i int) error {
	if m.buf != nil {
		return k.SetArg(i, m.buf)
	}
	return k.SetArgSVMPointer(i, m.svm, m.off)
}

func s34aSVMOK(t *testing.T, q *cl.CommandQueue) {
	if q.Context().SVMCapabilities()&cl.SVMCoarseGrainBuffer == 0 {
		t.Skip("no SVM")
	}
}

// PASSES: every sequence of argument kinds (buffer, SVM at an offset) on the
// three memory arguments, with numbers and local memory set once at the
// start, computes out[i] = a[i]*n + c[i] + f, read back.
func TestHostileS34aRenewRandomKinds(t *testing.T) {
	cltest.Watchdog(t, 120*time.Second)
	q := cltest.Queue(t)
	s34aSVMOK(t, q)
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 7))
			k := s32gKernel(t, q, s34aSrc, "", "k")
			aVals := make([]int32, 2*s34aN)
			cVals := make([]int32, 2*s34aN)
			for i := range aVals {
				aVals[i], cVals[i] = int32(i+1), int32(1000*i)
			}
			mk := func(vals []int32, svm bool) s34aMem {
				data := s34aInts(vals)
				if svm {
					return s34aMem{svm: s34aNewSVM(t, q, data), off: 4 * int64(r.IntN(s34aN))}
				}
				off := r.IntN(s34aN)
				return s34aMem{buf: s34aNewBuf(t, q, data[4*off:4*(off+s34aN)]), off: 4 * int64(off)}
			}
			// which element each argument's index 0 is at
			first := func(m s34aMem) int { return int(m.off / 4) }
			args := [3]s34aMem{mk(aVals, true), mk(make([]int32, 2*s34aN), true), mk(cVals, true)}
			idx := [3]int{0, 1, 5}
			n, f := int32(3), float32(7)
			require.NoError(t, k.SetArg(2, n))
			require.NoError(t, k.SetArg(3, cl.LocalMem(4*16)))
			require.NoError(t, k.SetArg(4, f))
			for j := range args {
				require.NoError(t, args[j].set(k, idx[j]))
			}
			for step := range 25 {
				j := r.IntN(3)
				src := [3][]int32{aVals, make([]int32, 2*s34aN), cVals}[j]
				args[j] = mk(src, r.IntN(2) == 0)
				require.NoError(t, args[j].set(k, idx[j]), "step %d", step)
				if r.IntN(4) == 0 {
					n = int32(r.IntN(10))
					require.NoError(t, k.SetArg(2, n))
				}
				require.NoError(t, q.EnqueueKernel(k, []int{s34aN}, []int{16}), "step %d", step)
				require.NoError(t, q.Finish())
				got := args[1].read(t, q)
				for i := range s34aN {
					want := aVals[first(args[0])+i]*n + cVals[first(args[2])+i] + int32(f)
					if !assert.Equal(t, want, got[i], "step %d, item %d (kinds: a svm=%v, out svm=%v, c svm=%v)", step, i, args[0].svm != nil, args[1].svm != nil, args[2].svm != nil) {
						return
					}
				}
			}
		})
	}
}

// PASSES: a renewal when the user released the program already (the runtime
// kernel keeps it), and one kernel's renewal leaves another kernel of the
// same program as it was.
func TestHostileS34aRenewProgramReleasedAndSibling(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	q := cltest.Queue(t)
	s34aSVMOK(t, q)
	p, err := q.Context().BuildProgram(s34aSrc, "")
	require.NoError(t, err)
	k1, err := p.Kernel("other")
	require.NoError(t, err)
	defer k1.Release()
	k2, err := p.Kernel("other")
	require.NoError(t, err)
	defer k2.Release()
	require.NoError(t, p.Release())

	s := s34aNewSVM(t, q, make([]byte, 4*s34aN))
	b1 := s34aNewBuf(t, q, make([]byte, 4*s34aN))
	b2 := s34aNewBuf(t, q, make([]byte, 4*s34aN))
	require.NoError(t, k1.SetArg(1, int32(11)))
	require.NoError(t, k2.SetArg(1, int32(22)))
	require.NoError(t, k1.SetArg(0, s))
	require.NoError(t, k2.SetArg(0, b2))
	require.NoError(t, k1.SetArg(0, b1)) // renews k1, its program released by the user
	require.NoError(t, q.EnqueueKernel(k1, []int{s34aN}, nil))
	require.NoError(t, q.EnqueueKernel(k2, []int{s34aN}, nil))
	require.NoError(t, q.Finish())
	assert.Equal(t, int32(11), s34aMem{buf: b1}.read(t, q)[s34aN-1])
	assert.Equal(t, int32(22), s34aMem{buf: b2}.read(t, q)[s34aN-1])
	require.NoError(t, k1.Release())
	require.NoError(t, k1.Release(), "idempotent after a renewal")
	assert.Error(t, q.EnqueueKernel(k1, []int{1}, nil))
}

// PASSES: after a renewal, an argument whose buffer was released (or SVM
// freed) before it is still refused at the enqueue, and setting it again
// makes the kernel run.
func TestHostileS34aRenewKeepsRefusingDeadArgs(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	q := cltest.Queue(t)
	s34aSVMOK(t, q)
	for _, kind := range []string{"buffer", "svm"} {
		t.Run(kind, func(t *testing.T) {
			k := s32gKernel(t, q, s34aSrc, "", "k")
			require.NoError(t, k.SetArg(2, int32(1)))
			require.NoError(t, k.SetArg(3, cl.LocalMem(64)))
			require.NoError(t, k.SetArg(4, float32(0)))
			data := s34aInts(make([]int32, s34aN))
			out := s34aNewBuf(t, q, data)
			c := s34aNewBuf(t, q, data)
			require.NoError(t, k.SetArg(5, c))
			// a: a dead one
			if kind == "buffer" {
				dead, err := q.Context().CreateBuffer(cl.MemReadWrite, 4*s34aN)
				require.NoError(t, err)
				require.NoError(t, k.SetArg(0, dead))
				require.NoError(t, dead.Release())
			} else {
				dead, err := q.Context().SVMAlloc(cl.SVMReadWrite, 4*s34aN, 0)
				require.NoError(t, err)
				require.NoError(t, k.SetArg(0, dead))
				require.NoError(t, dead.Free())
			}
			s := s34aNewSVM(t, q, data)
			require.NoError(t, k.SetArg(1, s))
			require.NoError(t, k.SetArg(1, out)) // renews: argument 0 left unset
			err := q.EnqueueKernel(k, []int{s34aN}, []int{16})
			require.Error(t, err)
			assert.ErrorIs(t, err, map[string]error{"buffer": cl.ErrInvalidMemObject, "svm": cl.ErrInvalidValue}[kind])
			a := s34aNewBuf(t, q, s34aInts(make([]int32, s34aN)))
			require.NoError(t, k.SetArg(0, a))
			require.NoError(t, q.EnqueueKernel(k, []int{s34aN}, []int{16}))
			require.NoError(t, q.Finish())
		})
	}
}
