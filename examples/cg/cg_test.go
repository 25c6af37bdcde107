package main

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/clpool/clpool/trace"

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

// Issue 24: the demo's one headline was "speedup with the pool: 0.91x"
// on POCL, where a device allocation is a malloc. It prints what the pool
// changed on any device: the device allocations without and with it (one
// per array, against a handful), the peak of device memory and the time
// spent allocating and freeing, and says in a line why the time gain is
// small on a CPU runtime and where it is large.
func TestRunPrintsWhatThePoolChanged(t *testing.T) {
	q := cltest.Queue(t) // the device the demo will pick
	const iters = 10
	var out bytes.Buffer
	require.NoError(t, run(&out, cltest.Size(q, 512, 8192), iters, "", false))
	t.Log(out.String())
	text := out.String()
	assert.NotContains(t, text, "speedup")

	row := func(name string) []string {
		m := regexp.MustCompile(`(?m)^` + name + `\s+(.+?)\s{2,}(.+)$`).FindStringSubmatch(text)
		require.NotNil(t, m, "no row %q in:\n%s", name, text)
		return m[1:]
	}
	allocs := row("device allocations")
	without, err := strconv.Atoi(allocs[0])
	require.NoError(t, err)
	with, err := strconv.Atoi(allocs[1])
	require.NoError(t, err)
	assert.GreaterOrEqual(t, without, 4+4*iters, "an allocation per array: b, x, r, p, then 4 per iteration and the dots' partial sums")
	assert.Positive(t, with)
	assert.Less(t, with, without/4, "the pool allocates a handful")
	assert.Regexp(t, `^\d+\.\d MiB$`, row("peak device memory")[0])
	for _, name := range []string{"time allocating and freeing", "time of the whole solve"} {
		for _, v := range row(name) {
			assert.Regexp(t, `^\d+\.\d ms$`, v, name)
		}
	}
	assert.Contains(t, text, fmt.Sprintf("(%d arrays either way", without))
	assert.Contains(t, text, "83 µs on an NVIDIA H100", "where the gain is large, from BENCHMARKS.md")
	assert.Contains(t, text, "a device allocation is little more than a malloc", "why it is small here")
}

// The demo names its device as WriteSummary and the metrics' device label
// do, "name (vendor)", not with cl.Device.String's platform ordinal
// ("1:0 pthread..."), which changes with the .icd files installed.
func TestRunNamesTheDeviceStably(t *testing.T) {
	q := cltest.Queue(t) // the device the demo will pick
	var out bytes.Buffer
	require.NoError(t, run(&out, cltest.Size(q, 512, 8192), 1, "", false))
	d := q.Device()
	assert.Contains(t, out.String(), ", on "+d.Name+" ("+d.Vendor+")\n")
	assert.NotContains(t, out.String(), d.String())
}

// -trace records the pooled run: a trace with sites and the pool's
// segments that reads back whole, with as many allocations as frees.
func TestRunRecordsATrace(t *testing.T) {
	q := cltest.Queue(t)
	path := filepath.Join(t.TempDir(), "cg.tsv")
	require.NoError(t, run(io.Discard, cltest.Size(q, 512, 8192), 10, path, true))
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	events, err := trace.ReadComplete(bytes.NewReader(data))
	require.NoError(t, err)
	require.NotEmpty(t, events)
	assert.True(t, trace.Timed(events))
	assert.True(t, trace.Sited(events))
	s := trace.Summarize(events)
	assert.Positive(t, s.PeakLiveBytes)
	assert.Zero(t, s.Leaked, "every array of the solve was closed")
	assert.Positive(t, s.SegmentAllocs, "the pool's own segments")
	assert.Positive(t, s.PeakSegmentBytes)
	assert.Regexp(t, `(?m)^a\t1\t\d+\t\d+\t1\tcg\.go:\d+:(main|cg)\.solve\[\.\.\.\]$`, string(data), "the first block: b, made in solve (package main, called cg in a test)")
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
