package policy_test

import (
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
// a miss makes a new segment, sized before BeforeGrow frees what it
// gives up (the pool's order: see mempool's core.decide).
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
				s := p.NewSegment(e.Size)
				for _, s := range p.BeforeGrow(e.Size) {
					managed -= s.Size
				}
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

// cacheBlocks and cacheMaxBlock are the pool's queue caches' limits
// (mempool/qcache.go): a queue's cache keeps up to 16 blocks of up to
// SmallRequest bytes of small segments, given back, for requests of
// exactly their size.
const cacheBlocks, cacheMaxBlock = 16, policy.SmallRequest

// simulateCached is simulate with the pool's cache of the requests on no
// queue in front of p, as the pool has it by default: a block of a small
// segment given back waits in the cache while there is room; a request
// takes the newest cached block of its block's size; a miss sizes a new
// segment and calls BeforeGrow (whose segments the pool frees), then
// drains the cache into p and decides again, as the pool does
// (mempool's serve).
func simulateCached(t testing.TB, events []trace.Event, p placement, round func(int64) int64) simResult {
	var r simResult
	var managed, live int64
	var cache []*policy.Block[int]
	blocks := map[int64]*policy.Block[int]{}
	sizes := map[int64]int64{}
	drain := func() bool {
		for _, b := range cache {
			if s := p.Put(b); s != nil {
				managed -= s.Size
			}
		}
		moved := len(cache) > 0
		cache = cache[:0]
		return moved
	}
	for _, e := range events {
		switch e.Op {
		case trace.Alloc:
			r.allocs++
			var b *policy.Block[int]
			if n := round(e.Size); n <= cacheMaxBlock {
				for i := len(cache) - 1; i >= 0; i-- {
					if cache[i].Size == n {
						b = cache[i]
						cache = append(cache[:i], cache[i+1:]...)
						break
					}
				}
			}
			mayDrain := true
			for b == nil {
				if b = p.Get(e.Size); b != nil {
					break
				}
				s := p.NewSegment(e.Size)
				for _, s := range p.BeforeGrow(e.Size) {
					managed -= s.Size
				}
				if mayDrain {
					mayDrain = false
					if drain() {
						continue
					}
				}
				b = p.Add(s, e.Size)
				managed += s.Size
				r.segments++
			}
			require.GreaterOrEqual(t, b.Size, e.Size)
			blocks[e.ID], sizes[e.ID] = b, e.Size
			live += e.Size
		case trace.Free:
			b := blocks[e.ID]
			ok := b.Seg.Small && b.Size <= cacheMaxBlock && !b.Seg.Oversize && !b.Seg.Exact
			if ok && len(cache) < cacheBlocks {
				cache = append(cache, b)
			} else if s := p.Put(b); s != nil {
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

// torchLike is the reference: torch's caching allocator's
// segment sizes (2 MiB for requests up to 1 MiB, 20 MiB below 10 MiB,
// larger ones rounded to 2 MiB), its small and large pools apart (two
// arenas), best fit, blocks merged at once, every wholly free segment
// released before growing.
type torchLike struct{ small, large *policy.Arenas[int] }

func newTorchLike() torchLike {
	t := torchLike{policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment), policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)}
	t.small.SetQuickMax(0)
	t.large.SetQuickMax(0)
	return t
}

func (t torchLike) pool(size int64) *policy.Arenas[int] {
	if t.small.Round(size) <= policy.SmallRequest {
		return t.small
	}
	return t.large
}

func (t torchLike) Get(size int64) *policy.Block[int] { return t.pool(size).Get(size) }

func (t torchLike) NewSegment(size int64) *policy.Segment[int] {
	s := t.pool(size).NewSegment(size)
	n := t.small.Round(size)
	switch {
	case n <= policy.SmallRequest:
		s.Size = 2 << 20
	case n < 10<<20:
		s.Size = 20 << 20
	default:
		s.Size = (n + 2<<20 - 1) / (2 << 20) * (2 << 20)
	}
	return s
}

func (t torchLike) Add(seg *policy.Segment[int], size int64) *policy.Block[int] {
	return t.pool(size).Add(seg, size)
}

func (t torchLike) Put(b *policy.Block[int]) *policy.Segment[int] {
	if b.Seg.Small {
		return t.small.Put(b)
	}
	return t.large.Put(b)
}

func (t torchLike) TakeLargest() *policy.Segment[int] {
	if s := t.large.TakeLargest(); s != nil {
		return s
	}
	return t.small.TakeLargest()
}

func (t torchLike) BeforeGrow(int64) []*policy.Segment[int] {
	var out []*policy.Segment[int]
	for s := t.TakeLargest(); s != nil; s = t.TakeLargest() {
		out = append(out, s)
	}
	return out
}

// goal is issue 22's: on every trace, peak managed bytes at most
// goalRatio times the clairvoyant plan's (trace.Plan, 256-byte rounding),
// and device allocations at most 1% of the allocations (at least 2).
const goalRatio = 1.15

func goalSegments(allocs int) int { return max(2, allocs/100) }

// shortfalls are the traces where the arena misses the goal, with what
// it reaches instead, as bounds that keep it from getting worse, and why
// no policy measured (issue 22's search) does better.
var shortfalls = map[string]struct {
	ratio    float64
	segments int
	why      string
}{
	"synth-random-mixed.tsv": {ratio: 1.23, why: "random frees of log-uniform sizes up to 8 MiB: best fit in one unbounded segment already needs 1.13x the plan on average over 48 seeds of the generator (up to 1.30x), 1.23x on this one; which seeds pass changes with any change of placement (the arena's mean over those seeds is 1.14x)"},
}

// TestArenaHoldsCloseToTheLivePeak replays the recorded traces and the
// synthetic ones through the policies alone and holds the arena to the
// goal; it logs the arena behind the pool's cache (the pool's default,
// which delays the merging of up to 16 small blocks: see
// simulateCached), exact bins and the torch-like reference beside it.
func TestArenaHoldsCloseToTheLivePeak(t *testing.T) {
	names := []string{"cg.tsv", "cg-go.tsv", "mlp.tsv", "particles.tsv", "batches.tsv"}
	for _, s := range syntheticTraces() {
		names = append(names, s.file)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			ev := readTrace(t, name)
			plan := trace.Plan(ev, 256).Size
			bins := simulate(t, ev, policy.NewBins[int](4))
			arena := simulate(t, ev, policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment))
			torch := simulate(t, ev, newTorchLike())
			p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
			cached := simulateCached(t, ev, p, p.Round)
			of := func(r simResult) float64 { return float64(r.peakManaged) / float64(plan) }
			t.Logf("live %d, plan %d (%.3fx): arena %.3fx the plan (%d segments; behind the pool's cache %.3fx, %d), bins %.3fx (%d), torch-like %.3fx (%d), of %d allocations",
				arena.peakLive, plan, float64(plan)/float64(arena.peakLive), of(arena), arena.segments, of(cached), cached.segments,
				of(bins), bins.segments, of(torch), torch.segments, arena.allocs)
			ratio, segments := goalRatio, goalSegments(arena.allocs)
			if s, ok := shortfalls[name]; ok {
				t.Logf("short of the goal: %s", s.why)
				ratio = max(ratio, s.ratio)
				segments = max(segments, s.segments)
			}
			assert.LessOrEqual(t, of(arena), ratio, "peak managed over the plan")
			assert.LessOrEqual(t, arena.segments, segments, "device allocations")
		})
	}
}

// Behind the pool's cache, BeforeGrow frees the segments a request
// outgrew before the pool drains its caches and sizes the segment again:
// the second sizing still sees them (they give the headroom that spares
// a segment per array per round). It made 402 segments on radix-grow,
// where the policy alone makes 54.
func TestArenaOutgrowsThroughThePoolsCache(t *testing.T) {
	ev := readTrace(t, "synth-radix-grow.tsv")
	alone := simulate(t, ev, policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment))
	p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
	cached := simulateCached(t, ev, p, p.Round)
	assert.Equal(t, alone.segments, cached.segments)
	assert.Equal(t, alone.peakManaged, cached.peakManaged)
}
