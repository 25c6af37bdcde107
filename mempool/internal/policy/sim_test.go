package policy_test

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/clpool/clpool/mempool/internal/policy"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// placement is what the simulation needs of a policy: the methods the
// pool calls.
type placement interface {
	Get(size int64) *policy.Block[int]
	NewSegment(size int64) *policy.Segment[int]
	Add(seg *policy.Segment[int], size int64) *policy.Block[int]
	Put(b *policy.Block[int]) *policy.Segment[int]
	TakeLargest() *policy.Segment[int]
	BeforeGrow(size int64) []*policy.Segment[int]
}

// simResult is what a replay through a policy alone costs.
type simResult struct {
	peakManaged, peakLive int64
	segments, allocs      int
}

func (r simResult) ratio() float64 { return float64(r.peakManaged) / float64(r.peakLive) }

// simulate replays events through p as the pool would, without a device:
// a miss makes a new segment.
func simulate(t testing.TB, events []trace.Event, p placement) simResult {
	var r simResult
	var managed, live int64
	blocks := map[int64]*policy.Block[int]{}
	sizes := map[int64]int64{}
	for _, e := range events {
		switch e.Op {
		case trace.Alloc:
			r.allocs++
			b := p.Get(e.Size)
			if b == nil {
				for _, s := range p.BeforeGrow(e.Size) {
					managed -= s.Size
				}
				s := p.NewSegment(e.Size)
				b = p.Add(s, e.Size)
				managed += s.Size
				r.segments++
			}
			require.GreaterOrEqual(t, b.Size, e.Size)
			blocks[e.ID], sizes[e.ID] = b, e.Size
			live += e.Size
		case trace.Free:
			if s := p.Put(blocks[e.ID]); s != nil {
				managed -= s.Size
			}
			live -= sizes[e.ID]
			delete(blocks, e.ID)
		}
		r.peakManaged = max(r.peakManaged, managed)
		r.peakLive = max(r.peakLive, live)
	}
	return r
}

func readTrace(t testing.TB, name string) []trace.Event {
	events, err := trace.ReadFile(filepath.Join("..", "..", "..", "testdata", name))
	require.NoError(t, err)
	return events
}

// synthetic traces stand in for the workloads the real ones lack.
func synthetic() map[string][]trace.Event {
	return map[string][]trace.Event{
		"random-mixed": randomMixed(rand.New(rand.NewPCG(1, 2)), 20000),
		"radix-sort":   radixSort(1<<22, 30),
		"radix-two":    twoPipelines(100),
	}
}

// randomMixed allocates log-uniform sizes from 4 B to 32 MiB and frees a
// random live block with probability 1/2, keeping at most 200 live.
func randomMixed(r *rand.Rand, n int) []trace.Event {
	var ev []trace.Event
	var live []int64
	for id := int64(1); id <= int64(n); id++ {
		size := int64(4) << r.IntN(21)
		size += r.Int64N(size)
		ev = append(ev, trace.Event{Op: trace.Alloc, ID: id, Size: size})
		live = append(live, id)
		for len(live) > 200 || (len(live) > 0 && r.IntN(2) == 0) {
			i := r.IntN(len(live))
			ev = append(ev, trace.Event{Op: trace.Free, ID: live[i]})
			live = append(live[:i], live[i+1:]...)
		}
	}
	for _, id := range live {
		ev = append(ev, trace.Event{Op: trace.Free, ID: id})
	}
	return ev
}

// radixSort mimics a radix-sort pipeline over keys of n uint32, for sorts
// of slowly growing n.
func radixSort(n int64, sorts int) []trace.Event {
	var sizes []int64
	for s := range sorts {
		sizes = append(sizes, n+int64(s)*n/16)
	}
	return radixSorts(sizes)
}

// radixSorts mimics radix-sort pipelines, one sort per size (a count of
// uint32 keys): keys and values double-buffered, a histogram and a scan
// per pass.
func radixSorts(sizes []int64) []trace.Event {
	var ev []trace.Event
	id := int64(0)
	alloc := func(size int64) int64 {
		id++
		ev = append(ev, trace.Event{Op: trace.Alloc, ID: id, Size: size})
		return id
	}
	free := func(ids ...int64) {
		for _, i := range ids {
			ev = append(ev, trace.Event{Op: trace.Free, ID: i})
		}
	}
	for _, m := range sizes {
		keys, vals := alloc(4*m), alloc(4*m)
		for range 4 {
			k2, v2 := alloc(4*m), alloc(4*m)
			hist := alloc(256 * 4 * (m / 4096))
			scan := alloc(256 * 4 * (m / 4096))
			free(hist, scan, keys, vals)
			keys, vals = k2, v2
		}
		free(keys, vals)
	}
	return ev
}

// twoPipelines alternates sorts of 4 Mi and 11 Mi keys: the phases take
// turns at the peak.
func twoPipelines(sorts int) []trace.Event {
	var sizes []int64
	for s := range sorts {
		sizes = append(sizes, []int64{4 << 20, 11 << 20}[s%2])
	}
	return radixSorts(sizes)
}

// torchLike is the reference: torch's segment sizes (2 MiB for
// requests up to 1 MiB, 20 MiB below 10 MiB, larger ones rounded to
// 2 MiB) over the same best-fit, coalescing arenas, every wholly free
// segment released before growing.
type torchLike struct{ *policy.Arenas[int] }

func (t torchLike) NewSegment(size int64) *policy.Segment[int] {
	s := t.Arenas.NewSegment(size)
	s.Size = t.segmentSize(size)
	return s
}

// torchLargeUnit is torch's rounding of large segments (kRoundLarge).
const torchLargeUnit = 2 << 20

func (t torchLike) segmentSize(size int64) int64 {
	n := t.Round(size)
	switch {
	case n <= policy.SmallRequest:
		return policy.SmallSegment
	case n < 10<<20:
		return 20 << 20
	}
	return (n + torchLargeUnit - 1) / torchLargeUnit * torchLargeUnit
}

func (t torchLike) BeforeGrow(int64) []*policy.Segment[int] {
	var out []*policy.Segment[int]
	for s := t.TakeLargest(); s != nil; s = t.TakeLargest() {
		out = append(out, s)
	}
	return out
}

// TestArenaHoldsCloseToTheLivePeak replays the real traces and synthetic
// ones through the policies alone: the arena's peak managed bytes stay
// within 1.5x of the live peak and its device allocations within 1% of the
// allocations, where exact bins manage up to 15x.
func TestArenaHoldsCloseToTheLivePeak(t *testing.T) {
	traces := synthetic()
	traces["cg"] = readTrace(t, "cg.tsv")
	traces["mlp"] = readTrace(t, "mlp.tsv")
	traces["particles"] = readTrace(t, "particles.tsv")
	traces["batches"] = readTrace(t, "batches.tsv")
	for name, ev := range traces {
		t.Run(name, func(t *testing.T) {
			bins := simulate(t, ev, policy.NewBins[int](4))
			arena := simulate(t, ev, policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment))
			ref := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
			ref.SetQuickMax(0) // torch merges every block at once
			torch := simulate(t, ev, torchLike{ref})
			t.Logf("live %d: bins %.3fx (%d segments), arena %.3fx (%d), torch-like %.3fx (%d), of %d allocations",
				arena.peakLive, bins.ratio(), bins.segments, arena.ratio(), arena.segments, torch.ratio(), torch.segments, arena.allocs)
			assert.LessOrEqual(t, arena.ratio(), 1.5)
			if arena.allocs >= 1000 {
				assert.LessOrEqual(t, float64(arena.segments), 0.01*float64(arena.allocs))
			}
		})
	}
}
