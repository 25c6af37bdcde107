package main

import (
	"bytes"
	"math"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// smallConfig is a run of a few seconds on Oclgrind: 40 requests of at
// most 4096 elements (300 of at most 65,536 on POCL without -short).
func smallConfig(q *cl.CommandQueue) config {
	cfg := defaultConfig()
	cfg.requests = cltest.Size(q, 40, 300)
	cfg.maxLen = cltest.Size(q, 4096, 1<<16)
	cfg.window = 4
	cfg.seed = 3
	return cfg
}

// expect, the host's reference, agrees with the closed forms for x = 1,
// 2, ..., n: Σ a·x² + x = a·n(n+1)(2n+1)/6 + n(n+1)/2, the largest is the
// last, and the norm is Σ (z_i / z_n)².
func TestExpectAgreesWithAClosedForm(t *testing.T) {
	const n, a = 1000, 0.25
	r := request{x: make([]float64, n), a: a}
	for i := range r.x {
		r.x[i] = float64(i + 1)
	}
	got := expect[float64](r)
	assert.InDelta(t, a*n*(n+1)*(2*n+1)/6+n*(n+1)/2, got.sum, 1e-6)
	zn := a*n*n + n
	assert.Equal(t, zn, got.max)
	// Σ (a i² + i)² = a² Σ i⁴ + 2a Σ i³ + Σ i².
	s2 := float64(n) * (n + 1) * (2*n + 1) / 6
	s3 := math.Pow(float64(n)*(n+1)/2, 2)
	s4 := float64(n) * (n + 1) * (2*n + 1) * (3*n*n + 3*n - 1) / 30
	assert.InDelta(t, (a*a*s4+2*a*s3+s2)/(zn*zn), got.norm, 1e-9)
}

// The lengths are Pareto's: none below the minimum or above the cut, the
// median near minLen·2^(1/α), and a tail: one in a hundred at least
// minLen·100^(1/α).
func TestLengthsAreHeavyTailed(t *testing.T) {
	cfg := defaultConfig()
	src := newSource(cfg)
	lengths := make([]int, 20000)
	for i := range lengths {
		lengths[i] = src.length()
	}
	slices.Sort(lengths)
	assert.Equal(t, cfg.minLen, lengths[0])
	assert.LessOrEqual(t, lengths[len(lengths)-1], cfg.maxLen)
	median := float64(cfg.minLen) * math.Pow(2, 1/cfg.alpha)
	assert.InEpsilon(t, median, float64(lengths[len(lengths)/2]), 0.05)
	p99 := float64(cfg.minLen) * math.Pow(100, 1/cfg.alpha)
	assert.InEpsilon(t, p99, float64(lengths[len(lengths)*99/100]), 0.15)
	assert.Greater(t, lengths[len(lengths)-1], 1000*cfg.minLen, "a few very long ones")
}

// The device's pipeline, in float64, gives the host's figures, and every
// array, kept or not, goes back to the pool.
func TestPipelineMatchesTheHost(t *testing.T) {
	q := cltest.Queue(t)
	pool := pooltest.New(t, q) // checks, when the test ends, that every buffer was freed once

	cfg := smallConfig(q)
	res, err := process[float64](q, cfg, pool.Allocate)
	require.NoError(t, err)
	assert.Less(t, res.MaxRelErr, 1e-12)
	assert.Equal(t, cfg.requests, res.Requests)
	assert.Len(t, res.Answers, cfg.requests)
	assert.Positive(t, res.Overlaps)
	assert.Positive(t, res.PeakWindowBytes)

	// The same requests, drawn again, checked here one by one.
	src := newSource(cfg)
	var i int
	var elements int64
	for i < cfg.requests {
		for _, r := range src.batch(cfg.requests - i) {
			want := expect[float64](r)
			got := res.Answers[i]
			assert.InEpsilon(t, want.sum, got.sum, 1e-12, "request %d", i)
			assert.InEpsilon(t, want.max, got.max, 1e-12, "request %d", i)
			assert.InEpsilon(t, want.norm, got.norm, 1e-12, "request %d", i)
			elements += int64(len(r.x))
			i++
			src.rng.Float64() // the draw of whether the result is kept
		}
	}
	assert.Equal(t, elements, res.Elements)

	s := pool.Stats()
	assert.Zero(t, s.ActiveBlocks, "every array, the window's included, was closed")
	assert.Greater(t, s.Hits, s.Misses, "the pool serves most requests")
}

var checkLine = regexp.MustCompile(`within (\S+) of float64 on the host`)

// checkSummary checks what run printed: the pool's policy, and figures
// within float32's rounding of the host's.
func checkSummary(t *testing.T, out, policy string) {
	t.Helper()
	assert.Contains(t, out, "pool ("+policy+")")
	m := checkLine.FindStringSubmatch(out)
	require.NotNil(t, m, out)
	relErr, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	assert.Less(t, relErr, 1e-4)
}

// -trace records a trace of many sizes that reads back, with every
// allocation freed.
func TestRunRecordsATrace(t *testing.T) {
	q := cltest.Queue(t)
	path := filepath.Join(t.TempDir(), "batches.tsv")
	var out bytes.Buffer
	require.NoError(t, run(&out, smallConfig(q), path, false))
	t.Log(out.String())
	checkSummary(t, out.String(), "bins")

	events, err := trace.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, trace.Timed(events))
	s := trace.Summarize(events)
	assert.Zero(t, s.Leaked, "every array was closed")
	assert.GreaterOrEqual(t, s.Sizes, 20, "arrays of many lengths")
}

// The run over the arena, which also names its device as WriteSummary
// and the metrics do, "name (vendor)", not with cl.Device.String's
// platform ordinal ("1:0 pthread..."), which changes with the .icd files
// installed.
func TestRunOverTheArena(t *testing.T) {
	q := cltest.Queue(t)
	var out bytes.Buffer
	require.NoError(t, run(&out, smallConfig(q), "", true))
	checkSummary(t, out.String(), "arena")
	d := q.Device()
	assert.Contains(t, out.String(), ", on "+d.StableName()+"\n")
	assert.NotContains(t, out.String(), d.String())
}
