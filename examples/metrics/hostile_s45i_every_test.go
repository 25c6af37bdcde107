package main

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// `metrics -every 0` (or any negative duration, which flag.DurationVar
// takes) starts serving, then panics in work: time.NewTicker's
// "non-positive interval for NewTicker", with the server up and the
// pool never summarized. A bad flag should be an error, as a bad -addr
// is (TestServeRefusesABadAddress), before any work.
func TestHostileS45iMetricsNonPositiveEveryIsAnErrorNotAPanic(t *testing.T) {
	cltest.Queue(t)
	for i, every := range []time.Duration{0, -time.Second} {
		t.Run(fmt.Sprint("-every ", every), func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			var out lockedBuffer
			err = cltest.NoPanic(func() error {
				return run(ctx, ln, config{name: fmt.Sprintf("s45i-every-%d", i), every: every}, &out)
			})
			t.Log(out.String())
			require.Error(t, err, "-every %v ran", every)
			assert.NotContains(t, err.Error(), "panicked", "-every %v", every)
		})
	}
}
