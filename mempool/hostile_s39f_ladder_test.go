package mempool_test

import (
	"fmt"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Passing (new coverage: d94c53c's books after the failed Allocate, which
// s39a's test did not read): a panic of the allocator's Free while the
// ladder frees the held segment fails the Allocate, and "its block goes
// back to the pool" (doc.go, Misuse) with every count right: nothing
// active, the pool's books equal the allocator's, the block served
// from the new segment is held, and the same request is then served from
// it with no device allocation.
func TestHostileS39fLadderPanicBlockGoesBackBooksRight(t *testing.T) {
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			var pa *panicky
			var bud *allocator.Budget
			size := int64(100 << 10)
			if arena {
				size = 400 << 10
			}
			f := newFixture(t, func(a allocator.Allocator) allocator.Allocator {
				bud = allocator.NewBudget(a, 640<<10)
				pa = &panicky{Allocator: bud}
				return pa
			}, policyOptions(arena)...)
			held, err := f.pool.Allocate(size)
			require.NoError(t, err)
			require.NoError(t, held.Close())
			before := f.pool.Stats()

			pa.freePanics.Store(1)
			b, err := f.pool.Allocate(600 << 10)
			require.ErrorIs(t, err, mempool.ErrPanicked)
			require.Nil(t, b)
			s := f.pool.Stats()
			assert.Equal(t, before.DeviceFrees+1, s.DeviceFrees, "the ladder freed the held segment once")
			assert.Equal(t, before.DeviceAllocs+1, s.DeviceAllocs)
			assert.Zero(t, s.ActiveBlocks, "the failed request's block went back")
			assert.Zero(t, s.Allocation.All.Current)
			assert.Equal(t, s.Allocation.All.Allocated, s.Allocation.All.Freed)
			assert.Equal(t, bud.Live(), s.ManagedBytes, "the pool's device bytes are the budget's")
			assert.Equal(t, s.ManagedBytes, s.HeldBytes, "all of it held")

			allocs := s.DeviceAllocs
			b, err = f.pool.Allocate(600 << 10)
			require.NoError(t, err)
			assert.Equal(t, allocs, f.pool.Stats().DeviceAllocs, "the block that went back serves the same request")
			require.NoError(t, b.Close())
		})
	}
}
