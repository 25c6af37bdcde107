package mempool_test

import (
	"encoding/json"
	"testing"

	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sites is a hook that keeps a history and names sites, as memhooks'
// History and LineProfile do.
type sites struct{ names map[uint64]string }

func (sites) Handle(mempool.Event) {}
func (s sites) Site(id uint64) (string, bool) {
	n, ok := s.names[id]
	return n, ok
}
func (sites) History() []trace.Event {
	return []trace.Event{{Op: trace.Alloc, ID: 1, Size: 1000}}
}

func TestSnapshotOfAnArena(t *testing.T) {
	f := newFixture(t, nil, mempool.WithArena(), mempool.WithoutQueueCaches())
	a, err := f.pool.Allocate(1000)
	require.NoError(t, err)
	b, err := f.pool.On(f.q).Allocate(3000)
	require.NoError(t, err)
	require.NoError(t, a.Close())
	f.pool.AddHook(sites{names: map[uint64]string{b.ID(): "main.go:12"}})

	s := f.pool.Snapshot()
	assert.Equal(t, "arena", s.Policy)
	assert.Equal(t, f.q.Device().Name, s.Device)
	assert.Equal(t, f.pool.ManagedBytes(), s.ManagedBytes)
	assert.Equal(t, int64(3000), s.ActiveBytes)
	require.Len(t, s.Segments, 1)
	seg := s.Segments[0]
	assert.Equal(t, int64(1), seg.ID)
	assert.True(t, seg.Small)
	var states []string
	var off int64
	for _, blk := range seg.Blocks {
		assert.Equal(t, off, blk.Offset, "the blocks are in order and cover the segment")
		off += blk.Size
		states = append(states, blk.State)
	}
	assert.Equal(t, seg.Size, off)
	assert.Equal(t, []string{mempool.StateInactiveSplit, mempool.StateActive, mempool.StateInactiveSplit}, states)
	active := seg.Blocks[1]
	assert.Equal(t, int64(3000), active.Requested)
	assert.Equal(t, b.Offset(), active.Offset)
	assert.Equal(t, b.ID(), active.ID)
	assert.Equal(t, 1, active.Queue, "the queue's index in Stats.Queues, plus 1")
	assert.Equal(t, "main.go:12", active.Site)
	assert.Equal(t, []trace.Event{{Op: trace.Alloc, ID: 1, Size: 1000}}, s.History)

	// It round-trips through JSON, as clpool viz reads it.
	data, err := json.Marshal(s)
	require.NoError(t, err)
	var back mempool.Snapshot
	require.NoError(t, json.Unmarshal(data, &back))
	assert.Equal(t, s.Segments, back.Segments)
	assert.Contains(t, string(data), `"state":"inactive_split"`)

	require.NoError(t, b.Close())
	for _, blk := range f.pool.Snapshot().Segments[0].Blocks {
		assert.Equal(t, mempool.StateHeld, blk.State, "a wholly free segment's blocks are held")
	}
}

func TestSnapshotOfExactBins(t *testing.T) {
	f := newFixture(t, nil)
	assert.Empty(t, f.pool.Snapshot().Segments)
	a, err := f.pool.Allocate(1000)
	require.NoError(t, err)
	b, err := f.pool.Allocate(100)
	require.NoError(t, err)
	require.NoError(t, a.Close())

	s := f.pool.Snapshot()
	assert.Equal(t, "bins", s.Policy)
	require.Len(t, s.Segments, 2)
	assert.Equal(t, []mempool.BlockSnapshot{{Size: binSize(1000), State: mempool.StateHeld}}, s.Segments[0].Blocks)
	assert.Equal(t, []mempool.BlockSnapshot{{Size: binSize(100), Requested: 100, State: mempool.StateActive, Queue: 1, ID: b.ID()}}, s.Segments[1].Blocks)
	assert.Equal(t, []int64{1, 2}, []int64{s.Segments[0].ID, s.Segments[1].ID})

	require.NoError(t, f.pool.FreeHeld())
	s = f.pool.Snapshot()
	require.Len(t, s.Segments, 1, "a freed segment leaves the snapshot")
	assert.Equal(t, int64(2), s.Segments[0].ID)
	require.NoError(t, b.Close())
}
