package mempool_test

import (
	"errors"
	"math/rand"
	"testing"

	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/require"
)

// s31bRuns returns, per segment of the snapshot, the largest run of
// adjacent free blocks (what merging them would make), and whether the
// segment is wholly free.
func s31bRuns(snap mempool.Snapshot) (largestRun int64, wholly int, whollyBytes int64) {
	for _, seg := range snap.Segments {
		var run int64
		allFree := true
		for _, b := range seg.Blocks {
			if b.State == mempool.StateActive {
				run = 0
				allFree = false
				continue
			}
			run += b.Size
			largestRun = max(largestRun, run)
		}
		if allFree {
			wholly++
			whollyBytes += seg.Size
		}
	}
	return
}

// Holds on 02957d1 (a hostile review of the large blocks that wait
// unmerged): an arena under a limit, random tiny, small and 1-8 MiB
// requests; after every step the held, managed and inactive-split figures
// agree with a walk of Snapshot, the limit holds, and every out-of-memory
// error is one that no merged run of free blocks and no room under the
// limit could have served.
func TestS31bExploreLargeUnderLimit(t *testing.T) {
	for seed := int64(1); seed <= 3; seed++ {
		func() {
			const limit = 48 * mib
			f := newFixture(t, nil, mempool.WithArena(), mempool.WithoutQueueCaches(), mempool.WithLimit(limit))
			p := f.pool
			rng := rand.New(rand.NewSource(seed))
			var live []*mempool.PooledBuffer
			for step := 0; step < 400; step++ {
				if rng.Intn(3) > 0 || len(live) == 0 {
					var size int64
					switch rng.Intn(6) {
					case 0:
						size = int64(rng.Intn(4096) + 1)
					case 1:
						size = int64(rng.Intn(1<<20) + 1)
					default:
						size = int64(1<<20 + rng.Intn(7<<20))
					}
					before := p.Stats()
					snapBefore := p.Snapshot()
					b, err := p.Allocate(size)
					if err != nil {
						require.True(t, errors.Is(err, mempool.ErrOutOfMemory), "%v", err)
						run, _, _ := s31bRuns(p.Snapshot())
						blk := (size + 4095) &^ 4095
						s := p.Stats()
						if run >= blk || s.ManagedBytes+blk <= limit {
							t.Fatalf("seed %d step %d: OOM for %d though a merged free run of %d fits, or room %d (managed %d); before: held %d managed %d runBefore %v",
								seed, step, size, run, limit-s.ManagedBytes, s.ManagedBytes, before.HeldBytes, before.ManagedBytes, snapBefore)
						}
						continue
					}
					live = append(live, b)
				} else {
					k := rng.Intn(len(live))
					require.NoError(t, live[k].Close())
					live = append(live[:k], live[k+1:]...)
				}
				v, _ := hsSnap(p)
				s := p.Stats()
				require.Equal(t, v.heldBlocks, s.HeldBlocks, "seed %d step %d held blocks", seed, step)
				require.Equal(t, v.heldBytes, s.HeldBytes, "seed %d step %d held bytes", seed, step)
				require.Equal(t, v.managed, s.ManagedBytes, "seed %d step %d", seed, step)
				require.Equal(t, v.splitBlocks[0], s.InactiveSplit.Small.Current, "seed %d step %d split small", seed, step)
				require.Equal(t, v.splitBlocks[1], s.InactiveSplit.Large.Current, "seed %d step %d split large", seed, step)
				require.Equal(t, v.splitBytes[1], s.InactiveSplitBytes.Large.Current, "seed %d step %d", seed, step)
				require.LessOrEqual(t, s.ManagedBytes, int64(limit))
			}
			for _, b := range live {
				require.NoError(t, b.Close())
			}
			require.NoError(t, p.FreeHeld())
			require.Zero(t, p.Stats().ManagedBytes, "seed %d: FreeHeld left memory", seed)
		}()
	}
}
