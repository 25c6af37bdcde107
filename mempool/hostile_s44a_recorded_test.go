package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A queue that only RecordQueue named, and that never allocated, has a
// line of Stats.Queues with no requests, whose markers count the
// ordering after its commands when the block recorded on it moves to
// another queue (review s44a: the doc promised "a line of zero counts
// until it allocates").
//
// stats.go, Stats.Queues: "those a RecordQueue named (a line with no
// requests until it allocates, whose markers and host waits count the
// orderings after its commands when a block it used moves on)".
func TestHostileS44aRecordedQueueLineCountsOnlyOrderings(t *testing.T) {
	q0 := cltest.Queue(t)
	q1 := cltest.SecondQueue(t, q0, 0)
	q2 := cltest.SecondQueue(t, q0, 0)
	q3 := cltest.SecondQueue(t, q0, 0)
	p := pooltest.New(t, q0)

	b, err := p.On(q1).Allocate(4096)
	require.NoError(t, err)
	require.NoError(t, b.RecordQueue(q2))
	require.NoError(t, b.Close())
	c, err := p.On(q3).Allocate(4096) // takes b's block: a handover from q1 and q2
	require.NoError(t, err)
	require.NoError(t, c.Close())

	s := p.Stats()
	var line *struct{ Requests, Markers, HostWaits, Handovers int64 }
	for _, qs := range s.Queues {
		t.Logf("queue %p: requests %d hits %d handovers %d ready %d barriers %d markers %d host waits %d",
			qs.Queue, qs.Requests, qs.Hits, qs.Handovers, qs.Ready, qs.Barriers, qs.Markers, qs.HostWaits)
		if qs.Queue == q2 {
			line = &struct{ Requests, Markers, HostWaits, Handovers int64 }{qs.Requests, qs.Markers, qs.HostWaits, qs.Handovers}
		}
	}
	require.NotNil(t, line, "RecordQueue(q2) gives q2 a line of Stats.Queues")
	assert.Zero(t, line.Requests, "q2 never allocated")
	assert.Zero(t, line.Handovers, "q2 never allocated")
	assert.Equal(t, int64(1), line.Markers+line.HostWaits, "q3's request ordered after q2's commands once")
}
