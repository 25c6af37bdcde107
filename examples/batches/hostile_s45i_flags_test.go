package main

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
)

// runNoPanic is run, with a panic turned into an error naming it.
func runNoPanic(cfg config) (out string, err error) {
	var b bytes.Buffer
	err = cltest.NoPanic(func() error { return run(&b, cfg, "", false) })
	return b.String(), err
}

// `batches -alpha NaN` (flag.Float64Var takes "NaN") passes process's
// check of its config (cfg.alpha <= 0 is false for NaN) and panics in
// source.batch ("makeslice: len out of range"), where every other bad
// value of a flag is the error "batches: bad config {...}".
func TestHostileS45iBatchesNaNAlphaIsABadConfigNotAPanic(t *testing.T) {
	cltest.Queue(t)
	for _, alpha := range []float64{math.NaN()} {
		cfg := defaultConfig()
		cfg.requests, cfg.maxLen = 5, 1<<12
		cfg.alpha = alpha
		out, err := runNoPanic(cfg)
		t.Log(out)
		assert.ErrorContains(t, err, "bad config", "-alpha %v", alpha)
		assert.NotContains(t, fmt.Sprint(err), "panicked", "-alpha %v", alpha)
	}
}
