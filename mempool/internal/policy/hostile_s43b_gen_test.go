package policy_test

import (
	"math/rand/v2"

	"github.com/clpool/clpool/trace"
)

// Review s43b (commit 068fcf8): generators of workloads that the rule
// "every array remade near the size of a segment given up gets the
// headroom" hurt (hostile_s43b_regress_test.go). The review's sweep of
// 137 such workloads (BENCHMARKS.md, session 43) ran them all.

// s43bState is a state of len(sizes) arrays remade every step (the new
// made before the old is freed), each array's size multiplied by
// factor(step, i) first; scratch(step), if not 0, is the size of an
// array allocated before the state is remade and freed after.
func s43bState(sizes []float64, steps int, factor func(step, i int) float64, scratch func(step int) int64) []trace.Event {
	var e events
	sz := append([]float64(nil), sizes...)
	var state []int64
	for _, n := range sz {
		state = append(state, e.alloc(int64(n)))
	}
	for step := range steps {
		var sc int64
		if scratch != nil {
			if n := scratch(step); n > 0 {
				sc = e.alloc(n)
			}
		}
		old := state
		state = nil
		for i := range sz {
			sz[i] *= factor(step, i)
			state = append(state, e.alloc(int64(sz[i])))
		}
		e.free(old...)
		if sc != 0 {
			e.free(sc)
		}
	}
	e.free(state...)
	return e.ev
}

// s43bBurst is a batch program: each round allocates a work buffer (which
// grows by grow each round, so that it outgrows what the pool holds and
// BeforeGrow gives up the wholly free segments), then m arrays of fixed
// base sizes (log-uniform 1-8 MiB, not multiples of 4 KiB) times a jitter
// of up to +-jitter, then frees everything.
func s43bBurst(seed uint64, m, rounds int, work0, grow, jitter float64) []trace.Event {
	r := rand.New(rand.NewPCG(seed, 43))
	base := make([]float64, m)
	for i := range base {
		base[i] = float64(int64(1<<20)<<r.IntN(3)) * (1 + r.Float64()) * (1 + 1e-4)
	}
	var e events
	work := work0
	for range rounds {
		w := e.alloc(int64(work))
		var ids []int64
		for i := range m {
			f := 1 + jitter*(2*r.Float64()-1)
			ids = append(ids, e.alloc(int64(base[i]*f)))
		}
		e.free(w)
		e.free(ids...)
		work *= grow
	}
	return e.ev
}

// s43bStateTempOf is stateGrow(rate, steps) with a temporary of temp
// bytes made and freed before each step's remake (with between, between
// every two arrays of the remade state): the policy sees a Put between
// BeforeGrow and the arrays that follow (068fcf8 cleared p.gone there).
func s43bStateTempOf(rate float64, steps int, temp int64, between bool) []trace.Event {
	var e events
	sizes := []float64{24e6, 24e6, 24e6, 8e6, 8e6}
	var state []int64
	keep := e.alloc(temp) // the pool's first segment, a small one, holds the temporary: kept in use
	e.free(e.alloc(temp))
	for _, n := range sizes {
		state = append(state, e.alloc(int64(n)))
	}
	for range steps {
		e.free(e.alloc(temp))
		old := state
		state = nil
		for i := range sizes {
			if between && i > 0 {
				e.free(e.alloc(temp))
			}
			sizes[i] *= 1 + rate
			state = append(state, e.alloc(int64(sizes[i])))
		}
		e.free(old...)
	}
	e.free(state...)
	e.free(keep)
	return e.ev
}

func pow(x float64, n int) float64 {
	r := 1.0
	for range n {
		r *= x
	}
	return r
}
