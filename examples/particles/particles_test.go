package main

import (
	"bytes"
	"math"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// smallConfig is a run of a few seconds on Oclgrind: a hundredth of the
// particles (a tenth on POCL without -short), 40 steps, 4 regroups.
func smallConfig(q *cl.CommandQueue) config {
	return config{scale: float64(cltest.Size(q, 1, 10)) / 100, steps: 40, every: 10, dt: 0.01, seed: 7}
}

// hostCloud is a species' particles on the host, in float64, kept as
// cloud keeps them on the device.
type hostCloud struct {
	sp            species
	pos, vel, acc [3][]float64
	groups        []group
}

func (c *hostCloud) accel(d int, x float64) float64 {
	a := -c.sp.k / c.sp.mass * x
	if d == 2 {
		a -= gravity
	}
	return a
}

// hostSimulate is simulate on the CPU, in float64: the same spawns,
// regroups and leapfrog steps, one particle at a time.
func hostSimulate(cfg config) (res result, clouds []*hostCloud) {
	sp := newSpawner(cfg)
	for i := range allSpecies {
		clouds = append(clouds, &hostCloud{sp: allSpecies[i]})
	}
	for step := range cfg.steps {
		if step%cfg.every == 0 {
			r := step / cfg.every
			for i, c := range clouds {
				leave, stay := 0, 0
				for stay < len(c.groups) && c.groups[stay].born+c.sp.life <= r {
					leave += c.groups[stay].n
					stay++
				}
				res.Left += leave
				c.groups = c.groups[stay:]
				for d := range 3 {
					c.pos[d] = append([]float64(nil), c.pos[d][leave:]...)
					c.vel[d] = append([]float64(nil), c.vel[d][leave:]...)
				}
				for _, g := range sp.spawnAt(i, r) {
					res.Spawned += g.n
					c.groups = append(c.groups, group{n: g.n, born: g.born})
					for d := range 3 {
						c.pos[d] = append(c.pos[d], g.pos[d]...)
						c.vel[d] = append(c.vel[d], g.vel[d]...)
					}
				}
				for d := range 3 {
					c.acc[d] = make([]float64, len(c.pos[d]))
					for j, x := range c.pos[d] {
						c.acc[d][j] = c.accel(d, x)
					}
				}
			}
		}
		for _, c := range clouds {
			for d := range 3 {
				for j := range c.pos[d] {
					vh := cfg.dt/2*c.acc[d][j] + c.vel[d][j]
					c.pos[d][j] += cfg.dt * vh
					c.acc[d][j] = c.accel(d, c.pos[d][j])
					c.vel[d][j] = cfg.dt/2*c.acc[d][j] + vh
				}
			}
		}
	}
	for _, c := range clouds {
		var vv, rr, z float64
		for d := range 3 {
			for j := range c.pos[d] {
				vv += c.vel[d][j] * c.vel[d][j]
				rr += c.pos[d][j] * c.pos[d][j]
			}
		}
		for _, x := range c.pos[2] {
			z += x
		}
		res.Final = append(res.Final, len(c.pos[0]))
		res.Energy += energyOf(c.sp, len(c.pos[0]), vv, rr, z)
	}
	return res, clouds
}

// The device's simulation, in float64, is the CPU's: the same particles
// come and go, and end at the same places with the same energy.
func TestSimulationMatchesTheCPU(t *testing.T) {
	q := cltest.Queue(t)
	pool := pooltest.New(t, q) // checks, when the test ends, that every buffer was freed once

	cfg := smallConfig(q)
	got, err := simulate[float64](q, cfg, pool.Allocate, true)
	require.NoError(t, err)
	want, host := hostSimulate(cfg)

	assert.Equal(t, want.Spawned, got.Spawned)
	assert.Equal(t, want.Left, got.Left)
	require.Equal(t, want.Final, got.Final)
	assert.Positive(t, got.Left, "groups left during the run")
	assert.InDelta(t, want.Energy, got.Energy, 1e-9*want.Energy)
	for i, c := range host {
		for d := range 3 {
			require.Len(t, got.FinalPositions[i][d], len(c.pos[d]))
			for j, x := range c.pos[d] {
				if !assert.InDelta(t, x, got.FinalPositions[i][d][j], 1e-9*math.Max(1, math.Abs(x)), "species %d, axis %d, particle %d", i, d, j) {
					return
				}
			}
		}
	}
	assert.Len(t, got.Drifts, cfg.steps/cfg.every+1, "a check at each regroup and at the end")

	s := pool.Stats()
	assert.Zero(t, s.ActiveBlocks, "every array and temporary was closed")
	assert.Greater(t, s.Hits, 5*s.Misses, "the pool serves most requests")
}

// Leapfrog's energy error is of order dt²: halving the step (over the same
// time, with the same spawns) makes the drift about a quarter as large;
// a first-order integrator (Euler's) would only halve it.
func TestEnergyDriftShrinksAsTheStepSquared(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	pool, err := mempool.New(imm)
	require.NoError(t, err)
	defer pool.Close()

	cfg := smallConfig(q)
	cfg.dt = 0.04 // ω·dt up to 0.16: a drift well above float64's rounding
	coarse, err := simulate[float64](q, cfg, pool.Allocate, false)
	require.NoError(t, err)
	cfg.dt, cfg.steps, cfg.every = cfg.dt/2, 2*cfg.steps, 2*cfg.every
	fine, err := simulate[float64](q, cfg, pool.Allocate, false)
	require.NoError(t, err)

	t.Logf("largest drift: %.3e at dt %g, %.3e at dt %g", coarse.MaxDrift, 2*cfg.dt, fine.MaxDrift, cfg.dt)
	assert.Positive(t, fine.MaxDrift)
	assert.Less(t, coarse.MaxDrift, 1e-2)
	assert.Less(t, fine.MaxDrift, coarse.MaxDrift/3, "coarse %.3e, fine %.3e", coarse.MaxDrift, fine.MaxDrift)
	assert.Equal(t, coarse.Final, fine.Final, "the same particles, whatever the step")
}

var driftLine = regexp.MustCompile(`drift from the expected at most (\S+) `)

// checkSummary checks what run printed: the pool's policy, and a drift
// within leapfrog's error in float32.
func checkSummary(t *testing.T, out, policy string) {
	t.Helper()
	assert.Contains(t, out, "pool ("+policy+")")
	m := driftLine.FindStringSubmatch(out)
	require.NotNil(t, m, out)
	drift, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	assert.Less(t, drift, 1e-3)
}

// -trace records a trace of many sizes that reads back, with every
// allocation freed.
func TestRunRecordsATrace(t *testing.T) {
	q := cltest.Queue(t)
	path := filepath.Join(t.TempDir(), "particles.tsv")
	var out bytes.Buffer
	require.NoError(t, run(&out, smallConfig(q), path, false))
	t.Log(out.String())
	checkSummary(t, out.String(), "bins")

	events, err := trace.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, trace.Timed(events))
	s := trace.Summarize(events)
	assert.Zero(t, s.Leaked, "every array was closed")
	assert.GreaterOrEqual(t, s.Sizes, 10, "arrays of many lengths (a CG solve has 3)")
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
