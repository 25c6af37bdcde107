package cl_test

import (
	"math/rand/v2"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// crashesNVIDIA skips a case on NVIDIA's driver, which crashes on it.
func crashesNVIDIA(d *cl.Device) string {
	if d.Matches("nvidia") {
		return "crashes NVIDIA's driver (580.159): clReleaseMemObject of a sub-buffer partly overlapping another, both used"
	}
	return ""
}

// Seen on an NVIDIA H200 (OpenCL 3.0 CUDA, driver 580.159.04): releasing a
// sub-buffer that partly overlaps another live one, both used by
// commands, dereferences a null pointer in clReleaseMemObject, with every
// queue finished. Containment, identical ranges, adjacent ranges, and a
// partial overlap where one of the two was never used all run.
var subBufferCases = []childCase{
	{"unused", nil, func(t *testing.T, q *cl.CommandQueue) { subPair(t, q, 0, 4096, 8192, 4096, false, false, 1) }},
	{"contained, released first", nil, func(t *testing.T, q *cl.CommandQueue) { subPair(t, q, 0, 4096, 0, 16384, true, true, 1) }},
	{"container released first", nil, func(t *testing.T, q *cl.CommandQueue) { subPair(t, q, 0, 4096, 0, 16384, true, true, 2) }},
	{"identical", nil, func(t *testing.T, q *cl.CommandQueue) { subPair(t, q, 4096, 8192, 4096, 8192, true, true, 1) }},
	{"adjacent", nil, func(t *testing.T, q *cl.CommandQueue) { subPair(t, q, 0, 8192, 8192, 8192, true, true, 1) }},
	{"partial overlap, released one used", nil, func(t *testing.T, q *cl.CommandQueue) { subPair(t, q, 0, 8192, 4096, 8192, true, false, 1) }},
	{"partial overlap, other one used", nil, func(t *testing.T, q *cl.CommandQueue) { subPair(t, q, 0, 8192, 4096, 8192, false, true, 1) }},
	{"partial overlap, both used", crashesNVIDIA, func(t *testing.T, q *cl.CommandQueue) { subPair(t, q, 0, 8192, 4096, 8192, true, true, 1) }},
	{"overlapping one at a time", nil, func(t *testing.T, q *cl.CommandQueue) {
		p := subParent(t, q)
		for i := range 200 {
			s, err := p.CreateSubBuffer(cl.MemReadWrite, int64(i%16)*4096, 65536)
			require.NoError(t, err)
			subFill(t, q, s)
			require.NoError(t, s.Release())
		}
		require.NoError(t, q.Finish())
	}},
	{"random, disjoint", nil, func(t *testing.T, q *cl.CommandQueue) { subRandom(t, q, true) }},
	{"random, overlapping", crashesNVIDIA, func(t *testing.T, q *cl.CommandQueue) { subRandom(t, q, false) }},
}

// TestSubBufferPatterns runs each pattern in a child process. On NVIDIA's
// driver the cases it crashes on are skipped: they are its defect, and
// mempool's arena meets them (BENCHMARKS.md, "On a real GPU, second visit").
func TestSubBufferPatterns(t *testing.T) {
	runInChildren(t, "TestSubBufferPatterns", "subbuffer:", subBufferCases)
}

func subParent(t *testing.T, q *cl.CommandQueue) *cl.Buffer {
	t.Helper()
	p, err := q.Context().CreateBuffer(cl.MemReadWrite, 1<<24)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, p.Release()) })
	return p
}

func subFill(t *testing.T, q *cl.CommandQueue, b *cl.Buffer) {
	t.Helper()
	ev, err := q.EnqueueFillBuffer(b, []byte{1, 2, 3, 4}, 0, b.Size())
	require.NoError(t, err)
	require.NoError(t, ev.Release())
}

// subPair makes sub-buffers [o1, o1+n1) and [o2, o2+n2) of one parent,
// fills those asked, finishes the queue, and releases the one first names
// (1 or 2) first.
func subPair(t *testing.T, q *cl.CommandQueue, o1, n1, o2, n2 int64, use1, use2 bool, first int) {
	p := subParent(t, q)
	s1, err := p.CreateSubBuffer(cl.MemReadWrite, o1, n1)
	require.NoError(t, err)
	s2, err := p.CreateSubBuffer(cl.MemReadWrite, o2, n2)
	require.NoError(t, err)
	if use1 {
		subFill(t, q, s1)
	}
	if use2 {
		subFill(t, q, s2)
	}
	require.NoError(t, q.Finish())
	if first == 2 {
		s1, s2 = s2, s1
	}
	require.NoError(t, s1.Release())
	require.NoError(t, s2.Release())
}

// subRandom keeps up to 20 sub-buffers of one parent live, made, filled
// (on a coin's toss) and released at random: each in a 64 KiB slot of its
// own if disjoint, else anywhere.
func subRandom(t *testing.T, q *cl.CommandQueue, disjoint bool) {
	p := subParent(t, q)
	rng := rand.New(rand.NewPCG(1, 1))
	var live []*cl.Buffer
	slot := 0
	for range 2000 {
		if len(live) > 20 || len(live) > 0 && rng.IntN(2) == 0 {
			j := rng.IntN(len(live))
			require.NoError(t, live[j].Release())
			live = append(live[:j], live[j+1:]...)
			continue
		}
		off, size := int64(rng.IntN(256))*4096, int64(1+rng.IntN(64))*4096
		if disjoint {
			slot = (slot + 1) % 256
			off, size = int64(slot)*65536, 65536
		}
		s, err := p.CreateSubBuffer(cl.MemReadWrite, off, size)
		require.NoError(t, err)
		if rng.IntN(2) == 0 {
			subFill(t, q, s)
		}
		live = append(live, s)
	}
	for _, s := range live {
		require.NoError(t, s.Release())
	}
	require.NoError(t, q.Finish())
}
