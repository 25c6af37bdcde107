package policy_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Arena.SetParking's doc: "Off, no two caches of the arena ever overlap".
// Turned off on an arena that parked caches already, the parked caches
// stay parked (SetParking moves none to the stale list), and unpark still
// hands them back. Here a parked cache of [512, 1536) lives on beside the
// cache of a block [0, 1024), partly overlapping it. (New turns parking
// off before any block exists, so only a later change of the setting
// reaches this; mempool's export_test SetParking does it under the pool's
// lock at any time.) Low severity: internal API.
func TestHostileS34aParkingOffKeepsParkedCaches(t *testing.T) {
	a := newArena(t)
	s := seg(1 << 20)
	b0 := a.Add(s, 512) // [0, 512)
	b1 := a.Get(1024)   // [512, 1536)
	require.Equal(t, int64(512), b1.Off)
	b1.Cache = 7
	a.Put(b1) // merges with the free tail: its cache is parked
	require.Empty(t, a.TakeStale(nil))
	a.SetParking(false)
	a.Put(b0)
	c := a.Get(1024) // [0, 1024): partly over the parked [512, 1536)
	require.Equal(t, int64(0), c.Off)
	c.Cache = 8
	assert.Equal(t, []int{7}, a.TakeStale(nil),
		"parking off, a block [0,1024) with a cache, and the cache of [512,1536) is neither stale nor gone: two caches partly overlap")
	a.Put(c)
	a.Remove(s)
	a.TakeStale(nil)
}
