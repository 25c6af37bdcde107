package policy_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/clpool/clpool/mempool/internal/policy"
	"github.com/clpool/clpool/trace"
)

// policyUnderBench is the part of a policy the hit benchmarks use.
type policyUnderBench interface {
	Get(size int64) *policy.Block[int]
	NewSegment(size int64) *policy.Segment[int]
	Add(seg *policy.Segment[int], size int64) *policy.Block[int]
	Put(b *policy.Block[int]) *policy.Segment[int]
}

// hitPair measures a warm Get+Put of 4 KiB through a policy alone: what
// the pool's hit adds to its lock, ledger and PooledBuffer.
func hitPair(b *testing.B, p policyUnderBench) {
	const size = 4096
	p.Put(p.Add(p.NewSegment(size), size))
	for b.Loop() {
		p.Put(p.Get(size))
	}
}

func BenchmarkBinsHit(b *testing.B) { hitPair(b, policy.NewBins[int](4)) }

func BenchmarkArenaHit(b *testing.B) {
	hitPair(b, policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment))
}

// BenchmarkArenaHitMerged is the arena's hit with no block waiting
// unmerged: every pair splits a block and merges it back.
func BenchmarkArenaHitMerged(b *testing.B) {
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	p.SetQuickMax(0)
	hitPair(b, p)
}

// BenchmarkArenaLongClass is a hit in a class whose free list is long:
// k free blocks of 3 MiB, then one of 3.12 MiB, between active spacers,
// and the segment's free tail above; the request (3.1 MiB) fits only the
// 3.12 MiB block of its class.
func BenchmarkArenaLongClass(b *testing.B) {
	for _, k := range []int{8, 64, 512} {
		b.Run(fmt.Sprint(k), func(b *testing.B) {
			const mib = 1 << 20
			a := policy.NewArena[int](512, 4)
			spacer := a.Add(&policy.Segment[int]{Size: int64(k+4) * 4 * mib}, 512)
			fit := a.Get(a.Round(3*mib + 123<<10))
			a.Get(512)
			var small []*policy.Block[int]
			for range k {
				small = append(small, a.Get(3*mib))
				a.Get(512)
			}
			_ = spacer
			a.Put(fit)
			for _, s := range small {
				a.Put(s)
			}
			n := a.Round(3*mib + 100<<10)
			for b.Loop() {
				a.Put(a.Get(n))
			}
		})
	}
}

// BenchmarkArenaSpreadClass is a hit in a class whose free list is long
// on both sides of the request: 2k free blocks of distinct sizes of the
// class of 3 MiB, between active spacers; the request takes the middle
// one, and it goes back to the middle of the list. Its free list's worst
// case: k blocks to walk past each way.
func BenchmarkArenaSpreadClass(b *testing.B) {
	for _, k := range []int{8, 32, 128} {
		b.Run(fmt.Sprint(k), func(b *testing.B) {
			const mib = 1 << 20
			a := policy.NewArena[int](512, 4)
			a.Add(&policy.Segment[int]{Size: int64(2*k+4) * 4 * mib}, 512)
			var held []*policy.Block[int]
			for i := range 2 * k {
				held = append(held, a.Get(3*mib+int64(i)*512))
				a.Get(512)
			}
			for _, h := range held {
				a.Put(h)
			}
			n := int64(3*mib + k*512)
			for b.Loop() {
				a.Put(a.Get(n))
			}
		})
	}
}

// replayPolicy is what BenchmarkArenaReplay and BenchmarkBinsReplay
// replay through.
type replayPolicy interface {
	Get(size int64) *policy.Block[int]
	NewSegment(size int64) *policy.Segment[int]
	Add(seg *policy.Segment[int], size int64) *policy.Block[int]
	Put(b *policy.Block[int]) *policy.Segment[int]
}

// replayLoop replays the simulation's random mixed trace (4 B to 32 MiB,
// up to 200 live) through a fresh policy from newPolicy each round: ns per
// event. Segments are made as the pool makes them, after BeforeGrow where
// the policy has it.
func replayLoop(b *testing.B, newPolicy func() replayPolicy) {
	events := randomMixed(rand.New(rand.NewPCG(1, 2)), 20000)
	blocks := make([]*policy.Block[int], len(events)+1)
	for b.Loop() {
		p := newPolicy()
		grower, _ := p.(interface {
			BeforeGrow(int64) []*policy.Segment[int]
		})
		for _, e := range events {
			if e.Op == trace.Alloc {
				blk := p.Get(e.Size)
				if blk == nil {
					s := p.NewSegment(e.Size)
					if grower != nil {
						grower.BeforeGrow(e.Size)
					}
					blk = p.Add(s, e.Size)
				}
				blocks[e.ID] = blk
				continue
			}
			p.Put(blocks[e.ID])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(events)), "ns/event")
}

// BenchmarkArenaReplay is replayLoop through the arena policy.
func BenchmarkArenaReplay(b *testing.B) {
	replayLoop(b, func() replayPolicy {
		return policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	})
}

// BenchmarkBinsReplay is replayLoop through exact bins: what the arena's
// splits and merges cost beyond them, with no pool around either.
func BenchmarkBinsReplay(b *testing.B) {
	replayLoop(b, func() replayPolicy { return policy.NewBins[int](4) })
}
