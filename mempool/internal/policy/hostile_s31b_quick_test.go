package policy_test

import (
	"math/rand"
	"testing"

	"github.com/clpool/clpool/mempool/internal/policy"
	"github.com/stretchr/testify/require"
)

// Holds on 02957d1 (a hostile review of the large blocks that wait
// unmerged). Random large-biased traffic, SetQuickMax changed midway, GetAnyOn,
// TakeFreeIf, BeforeGrow: the invariants after every step, and GetAnyOn
// finds a free block whenever a merged run of free blocks of a
// non-oversize segment fits.
func TestS31bExploreQuickLarge(t *testing.T) {
	for seed := int64(1); seed <= 300; seed++ {
		rng := rand.New(rand.NewSource(seed))
		maxSplit := []int64{0, 3 << 20, 40 << 20}[seed%3]
		p := policy.NewArenas[int](512, 4, maxSplit, 64<<20)
		var live []*policy.Block[int]
		segs := map[*policy.Segment[int]]bool{}
		for step := 0; step < 300; step++ {
			op := rng.Intn(20)
			switch {
			case op < 10 || len(live) == 0:
				var size int64
				switch rng.Intn(5) {
				case 0:
					size = int64(rng.Intn(1024) + 1)
				case 1:
					size = int64(rng.Intn(1<<20) + 1)
				default:
					size = int64(1<<20 + rng.Intn(12<<20))
				}
				if rng.Intn(4) == 0 && len(live) > 0 { // a size of a live block: exact hits
					size = live[rng.Intn(len(live))].Size
				}
				var b *policy.Block[int]
				if rng.Intn(5) == 0 {
					b = p.GetAnyOn(size, 0)
					if b == nil && !p.Oversize(size) {
						n := p.Round(size)
						for s := range segs {
							if s.Oversize {
								continue
							}
							var run int64
							for x := range s.Blocks() {
								if !x.Free() {
									run = 0
									continue
								}
								run += x.Size
								require.Less(t, run, n, "seed %d step %d: GetAnyOn(%d) nil though a merged run of %d fits", seed, step, size, run)
							}
						}
					}
				} else {
					b = p.Get(size)
				}
				if b == nil {
					s := p.NewSegment(size)
					for _, g := range p.BeforeGrow(size) {
						require.True(t, segs[g])
						delete(segs, g)
					}
					segs[s] = true
					b = p.Add(s, size)
				}
				live = append(live, b)
			case op < 17:
				k := rng.Intn(len(live))
				if s := p.Put(live[k]); s != nil {
					delete(segs, s)
				}
				live = append(live[:k], live[k+1:]...)
			case op == 17:
				p.SetQuickMax(rng.Intn(6))
			case op == 18:
				if s := p.TakeFreeIf(func(b *policy.Block[int]) bool { return b.Size > 1<<20 }); s != nil {
					require.True(t, segs[s])
					delete(segs, s)
				}
			default:
				if s := p.TakeLargest(); s != nil {
					require.True(t, segs[s])
					delete(segs, s)
				}
			}
			require.NoError(t, p.Check(), "seed %d step %d", seed, step)
			require.Equal(t, len(segs), p.Counts().Segments, "seed %d step %d", seed, step)
			var free int64
			for s := range segs {
				for x := range s.Blocks() {
					if x.Free() {
						free += x.Size
					}
				}
			}
			require.Equal(t, free, p.Counts().FreeBytes)
		}
		for _, b := range live {
			p.Put(b)
		}
		for s := p.TakeLargest(); s != nil; s = p.TakeLargest() {
			delete(segs, s)
		}
		require.Empty(t, segs, "seed %d", seed)
		require.Equal(t, policy.Counts{}, *p.Counts())
	}
}
