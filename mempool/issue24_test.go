package mempool_test

import (
	"encoding/json"
	"testing"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 24: a snapshot taken after the peak carried no peaks, so its page
// said "peak managed 5 MiB at the snapshot" where Stats.PeakManagedBytes
// was 10 MiB. The snapshot carries the pool's own peaks, in its JSON too.
func TestSnapshotCarriesThePoolsPeaks(t *testing.T) {
	f := newFixture(t, nil)
	a, err := f.pool.Allocate(5 << 20)
	require.NoError(t, err)
	b, err := f.pool.Allocate(5 << 20)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.NoError(t, f.pool.FreeHeld()) // managed bytes fall back below their peak
	defer a.Close()

	st := f.pool.Stats()
	s := f.pool.Snapshot()
	require.Greater(t, st.PeakManagedBytes, st.ManagedBytes)
	assert.Equal(t, st.PeakManagedBytes, s.PeakManagedBytes)
	assert.Equal(t, st.PeakActiveBytes, s.PeakActiveBytes)
	assert.Equal(t, int64(10<<20), s.PeakActiveBytes)
	assert.Equal(t, st.ManagedBytes, s.ManagedBytes)

	data, err := json.Marshal(s)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(data, &m))
	assert.Equal(t, float64(st.PeakManagedBytes), m["peak_managed_bytes"])
	assert.Equal(t, float64(10<<20), m["peak_active_bytes"])

	// ResetPeak brings them down to the moment.
	f.pool.ResetPeak()
	s = f.pool.Snapshot()
	assert.Equal(t, s.ManagedBytes, s.PeakManagedBytes)
	assert.Equal(t, s.ActiveBytes, s.PeakActiveBytes)
}

// Issue 24: QueueName names a queue in Stats.Queues.
func TestOnNamesTheQueue(t *testing.T) {
	f := newFixture(t, nil)
	q2 := cltest.SecondQueue(t, f.q, 0)
	a := f.pool.On(q2, mempool.QueueName("copy"))
	assert.Same(t, q2, a.Queue())
	b, err := a.Allocate(100)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	s := f.pool.Stats()
	require.Len(t, s.Queues, 2)
	assert.Empty(t, s.Queues[0].Name, "the allocator's queue, unnamed")
	assert.Equal(t, "copy", s.Queues[1].Name)
	assert.Same(t, q2, s.Queues[1].Queue)

	f.pool.On(q2, mempool.QueueName("uploads"))
	assert.Equal(t, "uploads", f.pool.Stats().Queues[1].Name, "renamed")
	f.pool.On(q2)
	assert.Equal(t, "uploads", f.pool.Stats().Queues[1].Name, "On without QueueName leaves the name")

	// A refused queue names nothing.
	bad := f.pool.On(nil, mempool.QueueName("none"))
	_, err = bad.Allocate(1)
	assert.Error(t, err)
	assert.Len(t, f.pool.Stats().Queues, 2)
}
