package policy_test

import (
	"testing"

	"github.com/clpool/clpool/mempool/internal/policy"
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
