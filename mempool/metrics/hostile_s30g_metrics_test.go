package metrics_test

// Hostile review, session 30g: the Prometheus collector.

import (
	"strings"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s30gGate holds each device allocation until released, so that a
// segment can be caught in flight.
type s30gGate struct {
	allocator.Allocator
	entered chan struct{}
	release chan struct{}
}

func (g *s30gGate) Allocate(n int64) (*cl.Buffer, error) {
	g.entered <- struct{}{}
	<-g.release
	return g.Allocator.Allocate(n)
}

func (g *s30gGate) Unwrap() allocator.Allocator { return g.Allocator }

// clpool_reserved_bytes' HELP says its value counts the device
// allocations "with those in flight". It is Stats.ReservedBytes, which
// counts segments once allocated only ("their sizes, once allocated"):
// while a segment is being allocated the series reads 0. Expected: the
// value agrees with its HELP (the in-flight segment counted), or the HELP
// stops claiming it. Observed: 0 under a HELP that says in flight.
func TestHostileS30gReservedBytesHelpClaimsInFlight(t *testing.T) {
	q := cltest.Queue(t)
	g := &s30gGate{entered: make(chan struct{}), release: make(chan struct{})}
	p, _ := pooltest.NewOver(t, q, func(a allocator.Allocator) allocator.Allocator { g.Allocator = a; return g })
	c := metrics.NewCollector("main", p)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(c))

	done := make(chan *mempool.PooledBuffer, 1)
	go func() {
		b, err := p.Allocate(1 << 20)
		assert.NoError(t, err)
		done <- b
	}()
	<-g.entered // a segment of at least 1 MiB is in flight
	mfs, err := reg.Gather()
	close(g.release)
	b := <-done
	require.NoError(t, err)
	require.NoError(t, b.Close())

	var help string
	var value float64 = -1
	for _, mf := range mfs {
		if mf.GetName() != "clpool_reserved_bytes" {
			continue
		}
		help = mf.GetHelp()
		for _, m := range mf.Metric {
			for _, lp := range m.Label {
				if lp.GetName() == "size" && lp.GetValue() == "all" {
					value = m.GetGauge().GetValue()
				}
			}
		}
	}
	// The value leaves a segment in flight out (Stats.ReservedBytes counts
	// segments once allocated); the HELP said it counted them, and now
	// says what the value is.
	assert.Zero(t, value, "clpool_reserved_bytes{size=all} while the pool's only segment is in flight")
	assert.NotContains(t, help, "in flight", "the HELP of a value that leaves the allocations in flight out")
}

// NewCollector takes a name that is not valid UTF-8 and mends it (bytes
// replaced by U+FFFD) without an error; Remove with the very name given
// to NewCollector then finds nothing, returns false, and the pool's series
// stay in every scrape: the caller has no name that removes it but one it
// never gave. Expected: Remove(name) removes the pool NewCollector(name)
// added (or NewCollector refuses the name, as Add does).
func TestHostileS30gRemoveOfNewCollectorsName(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q)
	name := "gpu\xff"
	c := metrics.NewCollector(name, p)
	require.Positive(t, testutil.CollectAndCount(c), "the pool is scraped")

	assert.True(t, c.Remove(name), "Remove of the name NewCollector was given")
	n := testutil.CollectAndCount(c)
	assert.Zero(t, n, "series left after Remove(%q)", name)
	if n > 0 {
		assert.True(t, c.Remove(strings.ToValidUTF8(name, "\uFFFD")), "only the mended name, never given, removes it")
	}
}
