package mempool_test

// Hostile review s40c: the last rung counts a request's own failed
// reservation as an arrival of memory, so that a device refusal with
// nothing else going on is retried finalRounds times.

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s40cCalls counts the pool's calls of Allocate (refused ones included).
type s40cCalls struct {
	allocator.Allocator
	n atomic.Int64
}

func (c *s40cCalls) Allocate(size int64) (*cl.Buffer, error) {
	c.n.Add(1)
	return c.Allocator.Allocate(size)
}

func (c *s40cCalls) Unwrap() allocator.Allocator { return c.Allocator }

// One goroutine, one pool over a device Budget (allocator.NewBudget) that
// one active block nearly fills; nothing held, nothing in flight, nothing
// else running. A request the device cannot hold is refused: the ladder
// has nothing to free, nothing to collect, and no other request gives
// anything back, so it should fail after a try or two. Instead it retries
// the device finalRounds (16) times, each round a device allocation
// refused and an OOMRetry counted, with nothing changed in between.
//
// Doc: ladder.go, finalRounds ("Each round needs a change since the last
// refusal") and nextRung's rungFinal (`changed`); stats.go, OOMRetries
// ("retries after freeing, collecting, or trying a smaller segment").
// Cause (guess): mempool/ladder.go:144, grow's p.unreserve of the
// request's own refused segment bumps ledger.settled (ledger.go:114)
// after decide recorded lad.settledSeen (core.go:126), so ladder.go:263
// (`p.l.settled > lad.settledSeen`) is true after every device refusal.
func TestS40cDeviceRefusalRetriedWithNothingChanged(t *testing.T) {
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			unit := int64(cltest.Size(cltest.Queue(t), 256<<10, 1<<20))
			total := 4 * unit
			calls := &s40cCalls{}
			f := newCappedFixture(t, "budget", total, func(a allocator.Allocator) allocator.Allocator {
				calls.Allocator = a
				return calls
			}, policyOptions(arena)...)
			a, err := f.pool.Allocate(3 * unit) // the device's room, nearly all
			require.NoError(t, err)
			before, n0 := f.pool.Stats(), calls.n.Load()
			_, err = f.pool.Allocate(2 * unit) // more than the device has left
			require.ErrorIs(t, err, mempool.ErrOutOfMemory)
			after, n := f.pool.Stats(), calls.n.Load()-n0
			retries := after.OOMRetries - before.OOMRetries
			t.Logf("device asked %d times, %d OOMRetries", n, retries)
			assert.LessOrEqual(t, retries, int64(2), "retries with nothing freed, collected or changed")
			assert.LessOrEqual(t, n, int64(3), "device allocations tried for one refused request, nothing changed in between")
			require.NoError(t, a.Close())
		})
	}
}
