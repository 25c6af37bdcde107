package main

import (
	"github.com/clpool/clpool/trace"
	"math"
	"path/filepath"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// exact is the solution of the n-unknown 1-D Poisson system with b = 1:
// x_i = i(n+1-i)/2 for i = 1..n.
func exact(n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		k := float64(i + 1)
		x[i] = k * (float64(n) + 1 - k) / 2
	}
	return x
}

// cpuCG is the same iteration on the CPU, in float64.
func cpuCG(n, iters int) []float64 {
	ax := func(p []float64) []float64 {
		out := make([]float64, n)
		for i := range p {
			out[i] = 2 * p[i]
			if i > 0 {
				out[i] -= p[i-1]
			}
			if i+1 < n {
				out[i] -= p[i+1]
			}
		}
		return out
	}
	dot := func(a, b []float64) (s float64) {
		for i := range a {
			s += a[i] * b[i]
		}
		return s
	}
	x, r, p := make([]float64, n), make([]float64, n), make([]float64, n)
	for i := range r {
		r[i], p[i] = 1, 1
	}
	rr := dot(r, r)
	for range iters {
		if rr == 0 {
			break
		}
		ap := ax(p)
		alpha := rr / dot(p, ap)
		for i := range x {
			x[i] += alpha * p[i]
			r[i] -= alpha * ap[i]
		}
		rrNew := dot(r, r)
		for i := range p {
			p[i] = r[i] + rrNew/rr*p[i]
		}
		rr = rrNew
	}
	return x
}

func TestCGSolvesThePoissonSystem(t *testing.T) {
	q := cltest.Queue(t)
	pool := pooltest.New(t, q) // checks, when the test ends, that every buffer was freed once

	// In exact arithmetic CG solves an n-unknown system in n iterations.
	const n = 48
	sol, err := solve[float64](q, n, n, pool.Allocate)
	require.NoError(t, err)
	want := exact(n)
	for i := range want {
		assert.InDelta(t, want[i], sol.X[i], 1e-8*want[i], "x[%d]", i)
	}
	assert.Less(t, sol.Residual, 1e-10)

	// Part way, it follows the CPU's iteration, in float32 too.
	m := cltest.Size(q, 256, 4096)
	cpu := cpuCG(m, 20)
	sol32, err := solve[float32](q, m, 20, pool.Allocate)
	require.NoError(t, err)
	for i := range cpu {
		assert.InDelta(t, cpu[i], float64(sol32.X[i]), 1e-3*math.Max(1, math.Abs(cpu[i])), "x[%d]", i)
	}

	s := pool.Stats()
	assert.Zero(t, s.ActiveBlocks, "every vector and temporary was closed")
	assert.Positive(t, s.Hits)
	assert.Greater(t, s.Hits, 10*s.Misses, "the pool serves almost every request")
}

func TestCGOverTheRawAllocatorLeaksNothing(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	sol, err := solve[float64](q, 16, 16, imm.Allocate)
	require.NoError(t, err)
	want := exact(16)
	for i := range want {
		assert.InDelta(t, want[i], sol.X[i], 1e-8*want[i])
	}
}

func TestRunPrintsTheComparison(t *testing.T) {
	q := cltest.Queue(t) // the device the demo will pick
	require.NoError(t, run(cltest.Size(q, 512, 8192), 10, "", false))
}

// -trace records the pooled run: a trace that reads back and replays,
// with as many allocations as frees.
func TestRunRecordsATrace(t *testing.T) {
	q := cltest.Queue(t)
	path := filepath.Join(t.TempDir(), "cg.tsv")
	require.NoError(t, run(cltest.Size(q, 512, 8192), 10, path, true))
	events, err := trace.ReadFile(path)
	require.NoError(t, err)
	require.NotEmpty(t, events)
	assert.True(t, trace.Timed(events))
	s := trace.Summarize(events)
	assert.Positive(t, s.PeakLiveBytes)
	assert.Zero(t, s.Leaked, "every array of the solve was closed")
}

func benchIteration(b *testing.B, usePool bool) {
	q := cltest.Queue(b)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(b, err)
	pool, err := mempool.New(imm)
	require.NoError(b, err)
	defer pool.Close()
	if _, err := solve[float32](q, 131072, 1, imm.Allocate); err != nil { // build and specialize the kernels
		b.Fatal(err)
	}
	const n = 131072
	b.ResetTimer()
	for b.Loop() {
		var err error
		if usePool {
			_, err = solve[float32](q, n, 10, pool.Allocate)
		} else {
			_, err = solve[float32](q, n, 10, imm.Allocate)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10, "ns/iteration")
}

// BenchmarkCGPool is 10 CG iterations on n = 131072 over a pool.
func BenchmarkCGPool(b *testing.B) { benchIteration(b, true) }

// BenchmarkCGRaw is the same over the raw Immediate allocator.
func BenchmarkCGRaw(b *testing.B) { benchIteration(b, false) }
