package policy_test

import (
	"math/rand/v2"
	"testing"

	"github.com/clpool/clpool/mempool/internal/policy"
	"github.com/stretchr/testify/require"
)

type s37aRange struct {
	seg       *policy.Segment[int]
	off, size int64
}

// Random runs of the arena policy whose sizes make own segments and top
// cuts (commit 108ec60), with a model of the pool's sub-buffers: a block
// handed out with a cache must have the very range (segment, offset, size)
// the cache was made for, every stale cache is one made and not yet
// stale, and Check holds after every step. Holds today.
func TestHostileS37aTopCutCachesKeepTheirRanges(t *testing.T) {
	tops := 0
	for seed := uint64(0); seed < 300; seed++ {
		r := rand.New(rand.NewPCG(seed, 37))
		align := []int64{512, 4096, 1 << 16}[seed%3]
		p := policy.NewArenas[int](align, 4, []int64{0, 16 << 20}[seed%2], []int64{64 << 20, 4 << 20}[seed/3%2])
		if seed%3 == 0 {
			p.SetQuickMax(0)
		}
		ranges := map[int]s37aRange{}
		next := 1
		var live []*policy.Block[int]
		for step := 0; step < 400; step++ {
			op := r.IntN(10)
			if op < 6 || len(live) == 0 {
				var size int64
				switch r.IntN(4) {
				case 0:
					size = int64(r.IntN(4<<20) + 1)
				case 1:
					size = int64(r.IntN(40<<20) + 1)
				case 2:
					size = int64(r.IntN(512<<10) + 1)
				default:
					size = int64(r.IntN(1 << 14))
				}
				b := p.GetAnyOn(size, 0)
				if b == nil {
					s := p.NewSegment(size)
					for _, g := range p.BeforeGrow(size) {
						_ = g
					}
					b = p.Add(s, size)
				}
				if b.Seg.Own() && b.Off+b.Size == b.Seg.Size && b.Off > 0 {
					tops++
				}
				for _, x := range live {
					if x.Seg == b.Seg {
						require.True(t, x.Off+x.Size <= b.Off || b.Off+b.Size <= x.Off, "overlap")
					}
				}
				require.Zero(t, b.Off%align)
				if b.Cache != 0 {
					rg, ok := ranges[b.Cache]
					require.True(t, ok, "seed %d step %d: cache %d unknown", seed, step, b.Cache)
					require.Equal(t, s37aRange{b.Seg, b.Off, b.Size}, rg, "seed %d step %d: cache of another range", seed, step)
				} else if !b.Whole() && r.IntN(3) > 0 {
					b.Cache = next
					ranges[next] = s37aRange{b.Seg, b.Off, b.Size}
					next++
				}
				live = append(live, b)
			} else if op < 9 {
				k := r.IntN(len(live))
				p.Put(live[k])
				live = append(live[:k], live[k+1:]...)
			} else {
				for s := p.TakeLargest(); s != nil; s = p.TakeLargest() {
				}
			}
			for _, c := range p.TakeStale(nil) {
				_, ok := ranges[c]
				require.True(t, ok, "stale cache %d twice or unknown", c)
				delete(ranges, c)
			}
			require.NoError(t, p.Check(), "seed %d step %d", seed, step)
		}
	}
	t.Logf("top cuts seen: %d", tops)
}
