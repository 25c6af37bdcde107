package main

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
)

// Float is the element types the simulation runs in.
type Float interface{ float32 | float64 }

// gravity is the acceleration along -z.
const gravity = 1.0

// species is one kind of particle: its mass, its trap, and how its
// particles come and go. They spawn in groups, one group per regroup, and
// a group leaves, all at once, life regroups after it spawned.
type species struct {
	name  string
	mass  float64 // m
	k     float64 // the trap's spring constant: the force is -k·r - m·g·ẑ
	rate  float64 // particles a group has, on average, at scale 1
	life  int     // regroups a group stays
	width float64 // the spread (standard deviation) of spawn positions
	temp  float64 // the spread of spawn velocities is sqrt(temp/m)
}

// omega returns the trap's angular frequency, sqrt(k/m).
func (s species) omega() float64 { return math.Sqrt(s.k / s.mass) }

// allSpecies are the simulation's species: four traps of angular frequency
// 1, 2, 4 and 0.5, whose populations, at scale 1, are some 48,000, 9,000,
// 12,000 and 300 particles.
var allSpecies = []species{
	{name: "light", mass: 1, k: 1, rate: 4000, life: 12, width: 1, temp: 1},
	{name: "heavy", mass: 4, k: 16, rate: 1500, life: 6, width: 0.5, temp: 1},
	{name: "fast", mass: 0.25, k: 4, rate: 600, life: 20, width: 2, temp: 0.5},
	{name: "rare", mass: 2, k: 0.5, rate: 100, life: 3, width: 3, temp: 2},
}

// ratePeriod is the period, in regroups, of the spawn rates' swing.
const ratePeriod = 16

// config is a simulation's size and time step.
type config struct {
	scale float64 // multiplies every species' group size
	steps int     // leapfrog steps
	every int     // steps between regroups: particles leave and spawn, and the energy is checked
	dt    float64 // the time step
	seed  uint64  // the spawns' random numbers
}

// group is particles that spawned together, and leave together. Its
// positions and velocities are kept only until they are on the device.
type group struct {
	n        int
	born     int // the regroup it spawned at
	pos, vel [3][]float64
}

// spawner draws the groups that spawn: the same sizes, positions and
// velocities, in the same order, for a given config, whatever runs the
// simulation.
type spawner struct {
	cfg config
	rng *rand.Rand
}

func newSpawner(cfg config) *spawner {
	return &spawner{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.seed, 0x9a27))}
}

// spawn returns species i's group born at regroup r. Its size swings with
// r, each species in another phase, and varies at random by ±50%.
func (s *spawner) spawn(i int, r int) group {
	sp := allSpecies[i]
	phase := 2 * math.Pi * float64(i) / float64(len(allSpecies))
	mean := s.cfg.scale * sp.rate * (1 + 0.7*math.Sin(2*math.Pi*float64(r)/ratePeriod+phase))
	g := group{n: int(mean * (0.5 + s.rng.Float64())), born: r}
	sv := math.Sqrt(sp.temp / sp.mass)
	for d := range 3 {
		g.pos[d] = make([]float64, g.n)
		g.vel[d] = make([]float64, g.n)
		for j := range g.n {
			g.pos[d][j] = sp.width * s.rng.NormFloat64()
			g.vel[d][j] = sv * s.rng.NormFloat64()
		}
	}
	return g
}

// spawnAt returns the groups of species i that spawn at regroup r: at 0,
// the first population, life groups born as if at -life+1, ..., 0, so
// that they leave one by one.
func (s *spawner) spawnAt(i int, r int) []group {
	if r > 0 {
		return []group{s.spawn(i, r)}
	}
	var gs []group
	for b := -allSpecies[i].life + 1; b <= 0; b++ {
		gs = append(gs, s.spawn(i, b))
	}
	return gs
}

// energyOf returns the energy of particles of species sp from their
// positions and velocities: kinetic, the trap's and gravity's, with
// gravity's potential measured from the trap's minimum so that each
// particle's energy is at least 0:
//
//	E = m/2 |v|² + k/2 |r|² + m·g·z + (m·g)²/2k.
func energyOf(sp species, n int, vv, rr, z float64) float64 {
	mg := sp.mass * gravity
	return sp.mass/2*vv + sp.k/2*rr + mg*z + float64(n)*mg*mg/(2*sp.k)
}

// hostEnergy returns the energy of g's particles, as T holds them.
func hostEnergy[T Float](sp species, g group) float64 {
	var vv, rr, z float64
	for d := range 3 {
		for j := range g.n {
			v, r := float64(T(g.vel[d][j])), float64(T(g.pos[d][j]))
			vv += v * v
			rr += r * r
		}
	}
	for j := range g.n {
		z += float64(T(g.pos[2][j]))
	}
	return energyOf(sp, g.n, vv, rr, z)
}

// cloud is the particles of one species on the device, oldest first,
// with their accelerations.
type cloud[T Float] struct {
	sp            species
	n             int
	pos, vel, acc [3]*array.Array[T]
	gz            *array.Array[T] // -g for every particle: z's acceleration but for the trap
	groups        []group         // oldest first, without their data
}

// close closes the cloud's arrays.
func (c *cloud[T]) close() {
	for d := range 3 {
		for _, a := range []*array.Array[T]{c.pos[d], c.vel[d], c.acc[d]} {
			if a != nil {
				a.Close()
			}
		}
		c.pos[d], c.vel[d], c.acc[d] = nil, nil, nil
	}
	if c.gz != nil {
		c.gz.Close()
		c.gz = nil
	}
}

// accel returns the acceleration along d at positions x: -(k/m)·x, and
// -g more along z.
func (c *cloud[T]) accel(d int, x *array.Array[T]) (*array.Array[T], error) {
	w2 := T(-c.sp.k / c.sp.mass)
	if d == 2 {
		return array.Axpy(w2, x, c.gz)
	}
	return array.Scale(w2, x)
}

// step advances the cloud by dt, kick-drift-kick (velocity Verlet):
// v1 = v + dt/2·a(x), x1 = x + dt·v1, v2 = v1 + dt/2·a(x1). Each update
// makes new arrays and closes the old ones, as array code written the
// plain way does.
func (c *cloud[T]) step(dt float64) error {
	if c.n == 0 {
		return nil
	}
	for d := range 3 {
		vh, err := array.Axpy(T(dt/2), c.acc[d], c.vel[d])
		if err != nil {
			return err
		}
		xn, err := array.Axpy(T(dt), vh, c.pos[d])
		if err != nil {
			vh.Close()
			return err
		}
		an, err := c.accel(d, xn)
		if err != nil {
			vh.Close()
			xn.Close()
			return err
		}
		vn, err := array.Axpy(T(dt/2), an, vh)
		vh.Close()
		if err != nil {
			xn.Close()
			an.Close()
			return err
		}
		c.pos[d].Close()
		c.vel[d].Close()
		c.acc[d].Close()
		c.pos[d], c.vel[d], c.acc[d] = xn, vn, an
	}
	return nil
}

// energy returns the energy of particles lo to hi-1, reduced on the
// device (over views of the cloud's arrays).
func (c *cloud[T]) energy(lo, hi int) (e float64, err error) {
	if hi == lo {
		return 0, nil
	}
	var vv, rr, z float64
	view := func(a *array.Array[T]) (*array.Array[T], error) { return a.Slice(lo, hi) }
	for d := range 3 {
		x, err := view(c.pos[d])
		if err != nil {
			return 0, err
		}
		v, err := view(c.vel[d])
		if err != nil {
			x.Close()
			return 0, err
		}
		xx, err1 := array.Dot(x, x)
		vsq, err2 := array.Dot(v, v)
		var sz T
		var err3 error
		if d == 2 {
			sz, err3 = array.Sum(x)
		}
		x.Close()
		v.Close()
		if err := errors.Join(err1, err2, err3); err != nil {
			return 0, err
		}
		rr += float64(xx)
		vv += float64(vsq)
		z += float64(sz)
	}
	return energyOf(c.sp, hi-lo, vv, rr, z), nil
}

// regroup lets the groups whose life is over at regroup r leave (the
// oldest, at the front) and appends those spawned: new arrays of the new
// length, the particles that stay copied into their front (views, filled
// and added to) and the new ones written behind them. It returns the
// energy of the particles that left (reduced on the device just before)
// and of those that came (on the host), and how many left.
func (c *cloud[T]) regroup(q *cl.CommandQueue, alloc array.Alloc, r int, spawned []group) (gone int, left, came float64, err error) {
	leave, stay := 0, 0
	for stay < len(c.groups) && c.groups[stay].born+c.sp.life <= r {
		leave += c.groups[stay].n
		stay++
	}
	if left, err = c.energy(0, leave); err != nil {
		return 0, 0, 0, err
	}
	keep := c.n - leave
	n := keep
	for _, g := range spawned {
		n += g.n
		came += hostEnergy[T](c.sp, g)
	}
	var next cloud[T]
	next.sp, next.n = c.sp, n
	defer next.close() // whatever is left in it on an error
	for d := range 3 {
		for _, pair := range []struct {
			old  *array.Array[T]
			host func(group) []float64
			out  **array.Array[T]
		}{
			{c.pos[d], func(g group) []float64 { return g.pos[d] }, &next.pos[d]},
			{c.vel[d], func(g group) []float64 { return g.vel[d] }, &next.vel[d]},
		} {
			a, err := array.Empty[T](q, n, alloc)
			if err != nil {
				return 0, 0, 0, err
			}
			*pair.out = a
			if err := copyInto(a, 0, pair.old, leave, keep); err != nil {
				return 0, 0, 0, err
			}
			at := keep
			for _, g := range spawned {
				dst, err := a.Slice(at, at+g.n)
				if err != nil {
					return 0, 0, 0, err
				}
				err = dst.SetFrom(toT[T](pair.host(g)))
				dst.Close()
				if err != nil {
					return 0, 0, 0, err
				}
				at += g.n
			}
		}
	}
	if next.gz, err = array.Full[T](q, n, -gravity, alloc); err != nil {
		return 0, 0, 0, err
	}
	for d := range 3 {
		if next.acc[d], err = next.accel(d, next.pos[d]); err != nil {
			return 0, 0, 0, err
		}
	}
	next.groups = append(next.groups, c.groups[stay:]...)
	for _, g := range spawned {
		next.groups = append(next.groups, group{n: g.n, born: g.born})
	}
	c.close()
	*c, next = next, cloud[T]{}
	return leave, left, came, nil
}

// copyInto sets dst's elements at..at+n-1 to src's from..from+n-1.
// Package array has no copy into a view, so it fills the view with 0 and
// adds src's.
func copyInto[T Float](dst *array.Array[T], at int, src *array.Array[T], from, n int) error {
	if n == 0 {
		return nil
	}
	d, err := dst.Slice(at, at+n)
	if err != nil {
		return err
	}
	defer d.Close()
	s, err := src.Slice(from, from+n)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := d.Fill(0); err != nil {
		return err
	}
	return d.IAdd(s)
}

// asAlloc returns allocate as arrays keep an allocator.
func asAlloc[B array.Block](allocate func(int64) (B, error)) array.Alloc {
	return func(size int64) (array.Block, error) {
		b, err := allocate(size)
		if err != nil {
			return nil, err
		}
		return b, nil
	}
}

func toT[T Float](xs []float64) []T {
	out := make([]T, len(xs))
	for i, x := range xs {
		out[i] = T(x)
	}
	return out
}

// result is what a simulation reports.
type result struct {
	Spawned, Left  int            // particles, over the run (the first population counts as spawned)
	MinN, MaxN     int            // the fewest and most particles alive at a regroup
	Final          []int          // each species' particles at the end
	Energy         float64        // the total energy at the end
	MaxDrift       float64        // the largest |E - E_expected| / E_expected at a check
	Drifts         []float64      // (E - E_expected) / E_expected at each check, the last at the end
	FinalPositions [][3][]float64 // each species' positions at the end, when asked for
}

// simulate runs cfg's simulation with arrays of T from allocate. Every
// cfg.every steps it regroups each species, then checks the energy: the
// expected energy is the first population's, less what leaves and plus
// what spawns, so the drift is the integrator's error on the particles
// alive. With keep, it downloads the final positions.
func simulate[T Float, B array.Block](q *cl.CommandQueue, cfg config, allocate func(int64) (B, error), keep bool) (result, error) {
	var res result
	alloc := asAlloc(allocate)
	if err := cfg.check(); err != nil {
		return res, err
	}
	sp := newSpawner(cfg)
	clouds := make([]*cloud[T], len(allSpecies))
	for i := range clouds {
		clouds[i] = &cloud[T]{sp: allSpecies[i]}
	}
	defer func() {
		for _, c := range clouds {
			c.close()
		}
	}()
	var expected float64
	check := func() error {
		var e float64
		for _, c := range clouds {
			ec, err := c.energy(0, c.n)
			if err != nil {
				return err
			}
			e += ec
		}
		drift := 0.0
		if expected != 0 {
			drift = (e - expected) / expected
		}
		res.Drifts = append(res.Drifts, drift)
		res.MaxDrift = max(res.MaxDrift, math.Abs(drift))
		res.Energy = e
		return nil
	}
	for step := range cfg.steps {
		if step%cfg.every == 0 {
			r, total := step/cfg.every, 0
			for i, c := range clouds {
				spawned := sp.spawnAt(i, r)
				for _, g := range spawned {
					res.Spawned += g.n
				}
				gone, left, came, err := c.regroup(q, alloc, r, spawned)
				if err != nil {
					return res, fmt.Errorf("regroup %d, species %s: %w", r, c.sp.name, err)
				}
				res.Left += gone
				expected += came - left
				total += c.n
			}
			if r == 0 {
				res.MinN = total
			}
			res.MinN, res.MaxN = min(res.MinN, total), max(res.MaxN, total)
			if err := check(); err != nil {
				return res, err
			}
		}
		for _, c := range clouds {
			if err := c.step(cfg.dt); err != nil {
				return res, fmt.Errorf("step %d, species %s: %w", step, c.sp.name, err)
			}
		}
	}
	if err := check(); err != nil {
		return res, err
	}
	for _, c := range clouds {
		res.Final = append(res.Final, c.n)
		if keep {
			var p [3][]float64
			for d := range 3 {
				if c.n == 0 {
					continue
				}
				xs, err := c.pos[d].Get()
				if err != nil {
					return res, err
				}
				p[d] = make([]float64, len(xs))
				for j, x := range xs {
					p[d][j] = float64(x)
				}
			}
			res.FinalPositions = append(res.FinalPositions, p)
		}
	}
	return res, nil
}

// check returns an error for a config no run can follow: written so that
// NaN fails each test too, and infinities are refused.
func (cfg config) check() error {
	if cfg.every <= 0 || cfg.steps < 0 || !(cfg.dt > 0) || !(cfg.scale >= 0) || math.IsInf(cfg.dt, 1) || math.IsInf(cfg.scale, 1) {
		return fmt.Errorf("particles: bad config %+v", cfg)
	}
	return nil
}
