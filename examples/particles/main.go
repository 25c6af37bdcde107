// Command particles simulates four species of particles, each in a
// harmonic trap of its own under gravity, with leapfrog (kick-drift-kick)
// steps written with package array over a memory pool. Particles spawn in
// groups and leave when their group's life is over, so every species'
// arrays change length at each regroup, and the simulation's arrays come
// in many lengths: its allocation pattern, unlike CG's, has no fixed set
// of sizes. Each step makes new arrays for the positions, velocities and
// accelerations and closes the old ones; each regroup copies the particles
// that stay into new arrays through views and appends the spawned ones.
//
// The check is the energy: the expected energy is the first population's,
// less what leaves (reduced on the device just before) and plus what
// spawns, so the drift it prints is the integrator's own error on the
// particles alive, which for leapfrog stays bounded, of order (ω·dt)².
// With -trace FILE it records the run's allocations
// (memhooks.TraceRecorder) for `clpool replay` and `clpool viz`
// (testdata/particles.tsv is such a trace); with -arena the pool is a
// splitting arena.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
)

func main() {
	cfg := defaultConfig()
	flag.Float64Var(&cfg.scale, "scale", cfg.scale, "multiply the number of particles by `s`")
	flag.IntVar(&cfg.steps, "steps", cfg.steps, "leapfrog steps")
	flag.IntVar(&cfg.every, "every", cfg.every, "steps between regroups (particles leave and spawn) and energy checks")
	flag.Float64Var(&cfg.dt, "dt", cfg.dt, "time step")
	flag.Uint64Var(&cfg.seed, "seed", cfg.seed, "seed of the spawns' random numbers")
	tracePath := flag.String("trace", "", "record the run's allocations to this `file`")
	arena := flag.Bool("arena", false, "make the pool a splitting arena (mempool.WithArena)")
	flag.Parse()
	if err := run(os.Stdout, cfg, *tracePath, *arena); err != nil {
		fmt.Fprintln(os.Stderr, "particles:", err)
		os.Exit(1)
	}
}

// defaultConfig is the run of testdata/particles.tsv: some 70,000
// particles, 300 steps.
func defaultConfig() config {
	return config{scale: 1, steps: 300, every: 10, dt: 0.01, seed: 1}
}

// run simulates cfg in float32 over a pool on the default device, and
// writes a summary to w.
func run(w io.Writer, cfg config, tracePath string, arena bool) error {
	if err := cfg.check(); err != nil {
		return err // before anything is printed
	}
	q, err := cl.DefaultQueue()
	if err != nil {
		return err
	}
	defer q.Release()
	defer array.ReleaseKernels(q.Context())
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	if err != nil {
		return err
	}
	var opts []mempool.Option
	if arena {
		opts = append(opts, mempool.WithArena())
	}
	pool, err := mempool.New(imm, opts...)
	if err != nil {
		return err
	}
	defer pool.Close()
	var rec *memhooks.TraceRecorder
	if tracePath != "" {
		f, err := os.Create(tracePath)
		if err != nil {
			return err
		}
		defer f.Close()
		rec = memhooks.NewTraceRecorder(f)
		defer pool.AddHook(rec)()
	}
	fmt.Fprintf(w, "%d species in harmonic traps under gravity, %d leapfrog steps of %g, float32, on %s\n",
		len(allSpecies), cfg.steps, cfg.dt, q.Device().StableName())
	start := time.Now()
	res, err := simulate[float32](q, cfg, pool.Allocate, false)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	if rec != nil {
		if err := rec.Flush(); err != nil {
			return fmt.Errorf("writing the trace: %w", err)
		}
	}
	var now []string
	for i, n := range res.Final {
		now = append(now, fmt.Sprintf("%s %d", allSpecies[i].name, n))
	}
	fmt.Fprintf(w, "particles: %d spawned, %d left, %d to %d alive at a regroup (every %d steps); at the end %s\n",
		res.Spawned, res.Left, res.MinN, res.MaxN, cfg.every, strings.Join(now, ", "))
	fmt.Fprintf(w, "energy: %.6g at the end; drift from the expected at most %.2e (leapfrog's error, O((ω·dt)²))\n",
		res.Energy, res.MaxDrift)
	s := pool.Stats()
	fmt.Fprintf(w, "pool (%s): %d hits, %d misses, %d device allocations, peak %d bytes active, %d managed\n",
		s.Policy, s.Hits, s.Misses, s.DeviceAllocs, s.PeakActiveBytes, s.PeakManagedBytes)
	fmt.Fprintf(w, "time: %v\n", elapsed.Round(time.Millisecond))
	return nil
}
