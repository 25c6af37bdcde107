package policy_test

import (
	"bytes"
	"flag"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/require"
)

// The synthetic traces stand in for workloads the recorded ones lack.
// They are written to testdata/synth-*.tsv by
//
//	go test ./mempool/internal/policy/ -run TestSyntheticTraces -update
//
// and TestSyntheticTraces checks that the files are what these
// generators make (each from a fixed seed), so a file and its
// description here cannot drift apart.
var update = flag.Bool("update", false, "write the synthetic traces to testdata/")

// synthTrace is a synthetic trace: its file in testdata and its
// generator.
type synthTrace struct {
	file string
	gen  func() []trace.Event
}

func syntheticTraces() []synthTrace {
	return []synthTrace{
		// Small pools: array programs whose live peaks are 0.5, 1.5 and
		// 4.2 MB of arrays of mixed sizes (64 B to 85 KB, 255 KB and
		// 707 KB).
		{"synth-small-0.5mb.tsv", func() []trace.Event { return arrayProgram(1, 500_000, 4, 300, 50) }},
		{"synth-small-1.5mb.tsv", func() []trace.Event { return arrayProgram(2, 1_500_000, 5, 300, 50) }},
		{"synth-small-4.2mb.tsv", func() []trace.Event { return arrayProgram(3, 4_200_000, 6, 300, 50) }},
		// Many sizes: log-uniform from 4 B to 8 MiB, up to 200 live.
		{"synth-random-mixed.tsv", func() []trace.Event { return randomMixed(rand.New(rand.NewPCG(1, 2)), 20000) }},
		// Sorts whose arrays grow every round: 100 rounds, 1% more keys
		// each, from 1 Mi keys.
		{"synth-radix-grow.tsv", func() []trace.Event { return radixGrow(1<<20, 100, 1.01) }},
		// Phases that take turns at the peak: two radix-sort pipelines,
		// of 4 Mi and 11 Mi keys, alternating.
		{"synth-radix-two.tsv", func() []trace.Event { return twoPipelines(100) }},
		// Huge arrays among many small ones: sizes at the arena's
		// boundaries, and now and then one array of over 128 MiB (half
		// the preferred segment), freed before the next (a simulation
		// whose state is remade every few thousand arrays).
		{"synth-huge-boundaries.tsv", func() []trace.Event { return hugeAmongBoundaries(rand.New(rand.NewPCG(3, 4)), 8000) }},
		// Shapes an adversary found (session 33), which the arena and
		// the torch-like reference both miss (see shortfalls): a state
		// of five arrays remade every step beside a scratch array of
		// random size; particle arrays remade as their number grows,
		// then shrinks, with a neighbour list of random size; a state
		// that grows 0.2% a step, remade every step.
		{"synth-remade-scratch.tsv", func() []trace.Event { return remadeScratch(rand.New(rand.NewPCG(5, 6)), 250) }},
		{"synth-particles-grow.tsv", func() []trace.Event { return particlesGrow(rand.New(rand.NewPCG(7, 8)), 60_000, 400) }},
		{"synth-state-grow.tsv", func() []trace.Event { return stateGrow(0.002, 600) }},
	}
}

// TestSyntheticTraces checks that each synthetic trace's file is what
// its generator makes (with -update, writes it), and that it is modest
// in size.
func TestSyntheticTraces(t *testing.T) {
	for _, s := range syntheticTraces() {
		t.Run(s.file, func(t *testing.T) {
			var buf bytes.Buffer
			w := trace.NewWriter(&buf)
			for _, e := range s.gen() {
				require.NoError(t, w.Write(e))
			}
			require.NoError(t, w.Flush())
			path := filepath.Join("..", "..", "..", "testdata", s.file)
			if *update {
				require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
			}
			got, err := os.ReadFile(path)
			require.NoError(t, err)
			require.True(t, bytes.Equal(buf.Bytes(), got), "%s is not what its generator makes: run with -update", s.file)
			require.Less(t, len(got), 1<<20, "a synthetic trace stays under 1 MB")
		})
	}
}

// events builds a trace: alloc returns a new block's id.
type events struct {
	ev []trace.Event
	id int64
}

func (e *events) alloc(size int64) int64 {
	e.id++
	e.ev = append(e.ev, trace.Event{Op: trace.Alloc, ID: e.id, Size: size})
	return e.id
}

func (e *events) free(ids ...int64) {
	for _, id := range ids {
		e.ev = append(e.ev, trace.Event{Op: trace.Free, ID: id})
	}
}

// arrayProgram mimics a small iterative array program (a multigrid
// solve): levels grids of n, n/2, n/4, ... float32s, each with a solution
// and a right-hand side that live throughout; each iteration a V-cycle
// (down: a residual and a smoother's temporary per level, the coarser
// right-hand side replaced; up: a correction per level), a norm, and a
// few statistics on arrays of random lengths (up to a quarter of the
// finest grid), freed in the reverse order; every regrid iterations the
// grid is resized by a factor from 0.85 to 1.2 and every array made
// again. The sizes are picked so that the live peak is near live bytes.
func arrayProgram(seed uint64, live int64, levels, iters, regrid int) []trace.Event {
	n := live / 24 // the state is about 16n bytes, the temporaries up to 8n
	for range 8 {
		ev := arrayProgramOf(seed, n, levels, iters, regrid)
		peak := trace.Summarize(ev).PeakLiveBytes
		if peak >= live*99/100 && peak <= live*101/100 {
			return ev
		}
		n = n * live / peak
	}
	return arrayProgramOf(seed, n, levels, iters, regrid)
}

func arrayProgramOf(seed uint64, n int64, levels, iters, regrid int) []trace.Event {
	r := rand.New(rand.NewPCG(seed, 22))
	var e events
	size := func(l int) int64 { return max(4*(n>>l)/64*64, 64) }
	u := make([]int64, levels)
	f := make([]int64, levels)
	grid := func() {
		for l := range levels {
			nu, nf := e.alloc(size(l)), e.alloc(size(l))
			if u[l] != 0 {
				e.free(u[l], f[l])
			}
			u[l], f[l] = nu, nf
		}
	}
	base := n
	grid()
	for it := range iters {
		if it > 0 && it%regrid == 0 {
			n = int64(float64(base) * (0.85 + 0.35*r.Float64()))
			grid()
		}
		var res []int64
		for l := range levels {
			rl := e.alloc(size(l))
			t := e.alloc(size(l))
			e.free(t)
			if l+1 < levels {
				nf := e.alloc(size(l + 1))
				e.free(f[l+1])
				f[l+1] = nf
			}
			res = append(res, rl)
		}
		for l := levels - 1; l >= 0; l-- {
			c := e.alloc(size(l))
			e.free(c, res[l])
		}
		e.free(e.alloc(4))
		var stats []int64
		for range 1 + r.IntN(4) {
			m := math.Exp(math.Log(64) + r.Float64()*(math.Log(float64(size(0)/4))-math.Log(64)))
			stats = append(stats, e.alloc(int64(m)/4*4))
		}
		for i := len(stats) - 1; i >= 0; i-- {
			e.free(stats[i])
		}
	}
	for l := range levels {
		e.free(u[l], f[l])
	}
	return e.ev
}

// randomMixed allocates log-uniform sizes from 4 B to 8 MiB and frees a
// random live block with probability 1/2, keeping at most 200 live.
func randomMixed(r *rand.Rand, n int) []trace.Event {
	var ev []trace.Event
	var live []int64
	for id := int64(1); id <= int64(n); id++ {
		size := int64(4) << r.IntN(21)
		size += r.Int64N(size)
		ev = append(ev, trace.Event{Op: trace.Alloc, ID: id, Size: size})
		live = append(live, id)
		for len(live) > 200 || (len(live) > 0 && r.IntN(2) == 0) {
			i := r.IntN(len(live))
			ev = append(ev, trace.Event{Op: trace.Free, ID: live[i]})
			live = append(live[:i], live[i+1:]...)
		}
	}
	for _, id := range live {
		ev = append(ev, trace.Event{Op: trace.Free, ID: id})
	}
	return ev
}

// hugeAmongBoundaries allocates n arrays: sizes 1 below, at and 1 above
// 512 B, 4 KiB, 64 KiB, 512 KiB and 1 MiB, freeing a random live one
// with probability 1/2 (at most 150 live); every 800th is instead a huge
// array of 128 to 136 MiB, which lives for the next 400.
func hugeAmongBoundaries(r *rand.Rand, n int) []trace.Event {
	var ev []trace.Event
	var live []int64
	huge := int64(0)
	for id := int64(1); id <= int64(n); id++ {
		switch {
		case id%800 == 0:
			huge = id
			ev = append(ev, trace.Event{Op: trace.Alloc, ID: id, Size: 128<<20 + r.Int64N(8<<20)})
			continue
		case huge != 0 && id-huge == 400:
			ev = append(ev, trace.Event{Op: trace.Free, ID: huge})
			huge = 0
		}
		base := []int64{512, 4 << 10, 64 << 10, 512 << 10, 1 << 20}[r.IntN(5)]
		ev = append(ev, trace.Event{Op: trace.Alloc, ID: id, Size: base - 1 + r.Int64N(3)})
		live = append(live, id)
		for len(live) > 150 || (len(live) > 0 && r.IntN(2) == 0) {
			i := r.IntN(len(live))
			ev = append(ev, trace.Event{Op: trace.Free, ID: live[i]})
			live = append(live[:i], live[i+1:]...)
		}
	}
	if huge != 0 {
		ev = append(ev, trace.Event{Op: trace.Free, ID: huge})
	}
	for _, id := range live {
		ev = append(ev, trace.Event{Op: trace.Free, ID: id})
	}
	return ev
}

// remadeScratch is a simulation's state of five arrays (three of 2.4 MB,
// two of 0.8 MB) over steps: each step a scratch array of 16 to 32 MiB,
// then the state made anew, the old freed, then the scratch freed.
func remadeScratch(r *rand.Rand, steps int) []trace.Event {
	var e events
	sizes := []int64{2_400_000, 2_400_000, 2_400_000, 800_000, 800_000}
	var state []int64
	for _, n := range sizes {
		state = append(state, e.alloc(n))
	}
	for range steps {
		scratch := e.alloc(16<<20 + r.Int64N(16<<20+1))
		old := state
		state = nil
		for _, n := range sizes {
			state = append(state, e.alloc(n))
		}
		e.free(old...)
		e.free(scratch)
	}
	e.free(state...)
	return e.ev
}

// particlesGrow is a particle simulation of n particles over steps: five
// arrays per particle (12, 12, 12, 4 and 4 bytes each); each step a cell
// index, a sort index and a neighbour list of 20 to 40 entries per
// particle, forces, the three temporaries freed; the count grows 1% a
// step for the first 60% of the steps, then shrinks 1%, the particle
// arrays made anew (the old freed after) whenever it changes; the forces
// freed last.
func particlesGrow(r *rand.Rand, n int64, steps int) []trace.Event {
	var e events
	per := []int64{12, 12, 12, 4, 4}
	make := func(n int64) (ids []int64) {
		for _, b := range per {
			ids = append(ids, e.alloc(n*b))
		}
		return ids
	}
	arrs := make(n)
	for step := range steps {
		cells, idx := e.alloc(4*n), e.alloc(4*n)
		nb := e.alloc(4 * (n * (20 + r.Int64N(21))))
		forces := e.alloc(12 * n)
		e.free(cells, idx, nb)
		n2 := n * 101 / 100
		if step >= steps*6/10 {
			n2 = n * 99 / 100
		}
		if n2 != n {
			next := make(n2)
			e.free(arrs...)
			arrs, n = next, n2
		}
		e.free(forces)
	}
	e.free(arrs...)
	return e.ev
}

// stateGrow is a state of five arrays (three of 24 MB, two of 8 MB) that
// grows by rate every step, made anew each step before the old is freed.
func stateGrow(rate float64, steps int) []trace.Event {
	var e events
	sizes := []float64{24e6, 24e6, 24e6, 8e6, 8e6}
	var state []int64
	for _, n := range sizes {
		state = append(state, e.alloc(int64(n)))
	}
	for range steps {
		old := state
		state = nil
		for i := range sizes {
			sizes[i] *= 1 + rate
			state = append(state, e.alloc(int64(sizes[i])))
		}
		e.free(old...)
	}
	e.free(state...)
	return e.ev
}

// radixGrow mimics a simulation that sorts its particles by cell every
// round while their number grows: rounds sorts, each of growth times the
// keys of the one before (from n), in passes of 4-bit digits.
func radixGrow(n int64, rounds int, growth float64) []trace.Event {
	var e events
	m := float64(n)
	for range rounds {
		radixSortOnce(&e, int64(m)/64*64, 8)
		m *= growth
	}
	return e.ev
}

// radixSortOnce mimics one radix sort of m uint32 keys and values in
// passes: keys and values double-buffered, a histogram and its scan per
// pass (256 counters per 4096 keys).
func radixSortOnce(e *events, m int64, passes int) {
	keys, vals := e.alloc(4*m), e.alloc(4*m)
	for range passes {
		k2, v2 := e.alloc(4*m), e.alloc(4*m)
		hist := e.alloc(256 * 4 * (m / 4096))
		scan := e.alloc(256 * 4 * (m / 4096))
		e.free(hist, scan, keys, vals)
		keys, vals = k2, v2
	}
	e.free(keys, vals)
}

// twoPipelines alternates sorts of 4 Mi and 11 Mi keys in 4 passes of
// 8-bit digits: the phases take turns at the peak.
func twoPipelines(sorts int) []trace.Event {
	var e events
	for s := range sorts {
		radixSortOnce(&e, []int64{4 << 20, 11 << 20}[s%2], 4)
	}
	return e.ev
}
