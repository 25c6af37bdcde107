package metrics_test

// Hostile review, round 6: names that are not valid UTF-8 made Collect
// panic (client_golang refuses such label values), and the whole scrape
// fail. Both tests failed before the fix.

import (
	"testing"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// collectNoPanic runs c.Collect on this goroutine, and returns what
// it panicked with, if it did.
func collectNoPanic(c prometheus.Collector) (panicked any) {
	ch := make(chan prometheus.Metric, 4096)
	defer func() { panicked = recover() }()
	c.Collect(ch)
	return nil
}

func TestHostileR6CollectorQueueNameNotUTF8(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q, mempool.WithArena())
	b, err := p.On(q, mempool.QueueName("copy\xff")).Allocate(100)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	c := metrics.NewCollector("main", p)
	assert.Nil(t, collectNoPanic(c), "Collect panics on a queue name that is not UTF-8")
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c))
	_, err = reg.Gather()
	assert.NoError(t, err)
}

func TestHostileR6CollectorPoolNameNotUTF8(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q, mempool.WithArena())
	c := metrics.NewCollector("ok", nil)
	require.Error(t, c.Add("bad\xff", p), "Add refuses a name no label may hold")
	assert.False(t, c.Remove("bad\xff"), "and adds nothing")

	c = metrics.NewCollector("bad\xff", p) // NewCollector has no error: it mends the name
	assert.Nil(t, collectNoPanic(c))
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(c))
	_, err := reg.Gather()
	assert.NoError(t, err)
}
