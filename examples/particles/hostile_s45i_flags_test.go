package main

import (
	"bytes"
	"math"
	"testing"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
)

// `particles -scale NaN` (or +Inf; flag.Float64Var takes both) passes
// simulate's check of its config (cfg.scale < 0 is false) and panics in
// spawner.spawn ("makeslice: len out of range"); `-dt NaN` (or +Inf)
// passes it too (cfg.dt <= 0 is false) and the program prints "energy:
// NaN ... drift from the expected at most NaN" and exits 0. Every other
// bad value of these flags (-scale -1, -dt 0) is the error "particles:
// bad config {...}".
func TestHostileS45iParticlesNonFiniteScaleOrStepIsABadConfig(t *testing.T) {
	cltest.Queue(t)
	for _, tc := range []struct {
		name string
		cfg  config
	}{
		{"-scale NaN", config{scale: math.NaN(), steps: 5, every: 10, dt: 0.01, seed: 1}},
		{"-scale +Inf", config{scale: math.Inf(1), steps: 5, every: 10, dt: 0.01, seed: 1}},
		{"-dt NaN", config{scale: 0.01, steps: 5, every: 10, dt: math.NaN(), seed: 1}},
		{"-dt +Inf", config{scale: 0.01, steps: 5, every: 10, dt: math.Inf(1), seed: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			err := cltest.NoPanic(func() error { return run(&b, tc.cfg, "", false) })
			t.Log(b.String())
			assert.ErrorContains(t, err, "bad config", tc.name)
			assert.NotContains(t, b.String(), "NaN", "%s: figures of NaN printed as a result", tc.name)
		})
	}
}
