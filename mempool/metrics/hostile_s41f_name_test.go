package metrics_test

// Hostile review s41f: a queue named at its first On, scraped meanwhile.

import (
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
)

// Found (s41f), fixed (queueState names a new queue's line as it adds
// it); it failed with and without -race, after a few hundred to a few
// thousand queues: a queue given a name at its very first On
// (p.On(q, mempool.QueueName("task"))) is exported for a while under its
// index instead. The package doc says the queue label is "the name given
// to the queue with mempool.QueueName, or else its index", and
// QueueName's doc that the name is the queue's label, "stable however
// many queues the program makes and in whatever order it first uses
// them". Cause: mempool/on.go, Pool.On: queueState appends the queue's
// line to Stats.Queues (Name "") and lets go of p.mu; only then does On
// take p.mu again to set the name, so a Stats in between (a scrape) sees
// the queue unnamed, and the collector (collector.go: queueLabels) labels
// it by its index. A program that makes a named queue per task gets, now
// and then, a series queue="<index>" that lives one scrape: a new series
// in the server's database each time. Expected: the name is set with the
// line, so that no scrape sees a queue named at its first On unnamed.
func TestHostileS41fQueueNamedAtFirstOnScrapedByIndex(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	q := cltest.Queue(t)
	index := regexp.MustCompile(`^[0-9]+$`)
	var label atomic.Value // the first index label seen
	// Rounds of 1000 queues, each on a pool of its own: a scrape costs a
	// line per queue the pool ever knew.
	for round := 0; round < 10 && label.Load() == nil; round++ {
		p := pooltest.New(t, q)
		p.On(q, mempool.QueueName("main")) // every queue of the pool has a name
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(metrics.NewCollector("p", p))
		var stopped atomic.Bool
		done := func() bool { return label.Load() != nil || stopped.Load() }
		var wg sync.WaitGroup
		for range 2 { // scrapers
			wg.Go(func() {
				for !done() && !t.Failed() {
					mfs, err := reg.Gather()
					if !assert.NoError(t, err) {
						return
					}
					for _, mf := range mfs {
						if mf.GetName() != "clpool_queue_requests_total" {
							continue
						}
						for _, m := range mf.GetMetric() {
							for _, l := range m.GetLabel() {
								if l.GetName() == "queue" && index.MatchString(l.GetValue()) {
									label.CompareAndSwap(nil, l.GetValue())
								}
							}
						}
					}
				}
			})
		}
		var made atomic.Int64
		var makers sync.WaitGroup
		for range 4 { // goroutines that each make a named queue per task
			makers.Go(func() {
				var live []*cl.CommandQueue // released a while after: a released queue's series go
				defer func() {
					for _, tq := range live {
						assert.NoError(t, tq.Release())
					}
				}()
				for made.Add(1) <= 1000 && !done() {
					tq, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
					if !assert.NoError(t, err) {
						return
					}
					p.On(tq, mempool.QueueName("task"))
					live = append(live, tq)
					if len(live) > 4 {
						assert.NoError(t, live[0].Release())
						live = live[1:]
					}
				}
			})
		}
		makers.Wait()
		stopped.Store(true) // the scrapers stop
		wg.Wait()
		t.Logf("round %d: %d queues made", round, min(made.Load(), 1000))
	}
	assert.Empty(t, label.Load(), "a scrape labelled a queue named at its first On by its index")
}
