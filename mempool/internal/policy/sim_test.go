package policy_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

// The pool's queue caches' limits (mempool/qcache.go): a queue's cache
// keeps up to cacheBlocks blocks of up to SmallRequest bytes of small
// segments, given back, for requests of exactly their size; an arena's
// cache holds at most 1/cacheShare of the managed bytes in them, but for
// big blocks (whole segments of at least 1/bigSegment of the managed
// bytes), which hold up to 1/bigShare apart.
const (
	cacheBlocks, cacheMaxBlock = 16, policy.SmallRequest
	cacheShare, bigSegment     = 128, 8
	bigShare                   = 2
	smallArena, staleRequests  = 4 << 20, 4
)

// simCache is the pool's cache of the requests on no queue, as an
// arena has it (mempool's putCached and allocateCached).
type simCache struct {
	blocks   []*policy.Block[int] // oldest first
	big      []bool               // whether blocks[i] counts as big
	stamp    []int                // requests when blocks[i] came in
	requests int                  // the requests it was asked (see stale)
}

// stale returns the cache's stale blocks, taken out: those that came in
// more than staleRequests requests ago (mempool's giveBackStaleLocked).
func (c *simCache) stale() (back []*policy.Block[int]) {
	keep, keepBig, keepStamp := c.blocks[:0:0], c.big[:0:0], c.stamp[:0:0]
	for i, b := range c.blocks {
		if c.requests-c.stamp[i] > staleRequests {
			back = append(back, b)
			continue
		}
		keep, keepBig, keepStamp = append(keep, b), append(keepBig, c.big[i]), append(keepStamp, c.stamp[i])
	}
	c.blocks, c.big, c.stamp = keep, keepBig, keepStamp
	return back
}

// take returns the newest cached block of n bytes, or nil.
func (c *simCache) take(n int64) *policy.Block[int] {
	for i := len(c.blocks) - 1; i >= 0; i-- {
		if c.blocks[i].Size == n {
			b := c.blocks[i]
			c.blocks = append(c.blocks[:i], c.blocks[i+1:]...)
			c.big = append(c.big[:i], c.big[i+1:]...)
			c.stamp = append(c.stamp[:i], c.stamp[i+1:]...)
			return b
		}
	}
	return nil
}

// put caches b, given back while the pool manages managed bytes, and
// returns the blocks that go back to the policy: b itself if it is not
// to be cached, else the oldest, evicted while the cache is full or b's
// kind over its share.
func (c *simCache) put(b *policy.Block[int], managed int64) (back []*policy.Block[int]) {
	if !b.Seg.Small || b.Size > cacheMaxBlock || b.Seg.Oversize || b.Seg.Exact {
		return []*policy.Block[int]{b}
	}
	limit := managed / cacheShare
	big := b.Whole() && b.Size >= limit*cacheShare/bigSegment
	if big {
		limit = limit * cacheShare / bigShare
	}
	if b.Size > limit {
		return []*policy.Block[int]{b}
	}
	share := b.Size
	for i, old := range c.blocks {
		if c.big[i] == big {
			share += old.Size
		}
	}
	keep, keepBig, keepStamp := c.blocks[:0:0], c.big[:0:0], c.stamp[:0:0]
	n := len(c.blocks)
	for i, old := range c.blocks {
		switch {
		case n < cacheBlocks && share <= limit, c.big[i] != big && n < cacheBlocks:
			keep, keepBig, keepStamp = append(keep, old), append(keepBig, c.big[i]), append(keepStamp, c.stamp[i])
		default:
			if c.big[i] == big {
				share -= old.Size
			}
			back = append(back, old)
			n--
		}
	}
	c.blocks, c.big, c.stamp = append(keep, b), append(keepBig, big), append(keepStamp, c.requests)
	return back
}

// simulateCached is simulate with the pool's cache of the requests on no
// queue in front of p (simCache), as the pool has it by default: a
// request takes the newest cached block of its block's size; a miss
// sizes a new segment and calls BeforeGrow (whose segments the pool
// frees), then drains the cache into p and decides again, as the pool
// does (mempool's serve). A miss of a request the cache may serve, not
// tiny, in a pool that manages under smallArena bytes, gives the cache's
// stale blocks back first (mempool's givesBack).
func simulateCached(t testing.TB, events []trace.Event, p placement, round func(int64) int64) simResult {
	var r simResult
	var managed, live int64
	var cache simCache
	blocks := map[int64]*policy.Block[int]{}
	sizes := map[int64]int64{}
	tiny := func(int64) bool { return false }
	if a, ok := p.(interface{ Tiny(int64) bool }); ok {
		tiny = a.Tiny
	}
	give := func(bs []*policy.Block[int]) {
		for _, b := range bs {
			if s := p.Put(b); s != nil {
				managed -= s.Size
			}
		}
	}
	for _, e := range events {
		switch e.Op {
		case trace.Alloc:
			r.allocs++
			var b *policy.Block[int]
			if n := round(e.Size); n <= cacheMaxBlock {
				cache.requests++
				if b = cache.take(n); b == nil && managed/cacheShare < smallArena/cacheShare && !tiny(e.Size) {
					give(cache.stale())
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
					if len(cache.blocks) > 0 {
						give(cache.blocks)
						cache = simCache{requests: cache.requests}
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
			give(cache.put(blocks[e.ID], managed))
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
// it reaches instead (alone, and behind the pool's cache), as bounds that
// keep it from getting worse, and why no policy measured (issue 22's
// search) does better.
var shortfalls = map[string]struct {
	ratio, cached float64
	segments      int
	why           string
}{
	"synth-remade-scratch.tsv": {ratio: 2.56, cached: 2.56, segments: 21, why: "a state remade beside a scratch array of random size (16-32 MiB): the state's new copies, cut from the tails the scratch arrays leave in their segments, pin them when the scratch goes, and the next, larger scratch array takes another segment; over 8 seeds of the generator the arena holds 1.01-2.57x (mean 2.04x; 2.18x before the top cut), bimodal: this seed 1.99x before, 2.56x after; the torch-like reference holds 1.95x, exact bins 8x (session 33's adversary). Keeping requests over 512 KiB out of an own segment while its large block is in use holds every seed near 1.05x, and takes synth-particles-grow from 31 device allocations to 148 (4%)"},
	"synth-state-grow.tsv":     {segments: 110, why: "a state that grows 0.2% a step, remade every step: each step's arrays outgrow the segments freed the step before, and get 1/8 more (GrowthWindow: 916 device allocations before, 30% of allocations; 295 while only the first request after the segments were given up got it; now 110, 3.7%; the torch-like reference 9%, exact bins 9%): still a new segment per array every 60 steps, each array alternating between two; 1% would need each array's segment to last 200 steps (1/2 more: up to 1.5x the live bytes while a step's arrays move)"},
	"synth-random-mixed.tsv":   {ratio: 1.23, cached: 1.26, why: "random frees of log-uniform sizes up to 8 MiB: best fit in one unbounded segment already needs 1.13x the plan on average over 48 seeds of the generator (up to 1.30x), 1.23x on this one, and is over 1.15x on 8 of 24 other seeds; which seeds pass changes with any change of placement (the pool's mean over those 24 seeds is 1.159x, 15 over); GrowthWindow took this seed behind the cache from 1.145x to 1.198x, the mean over 48 other seeds from 1.1469x to 1.1480x (21 over 1.15 both ways); the top cut of own segments' blocks took it to 1.187x, and 96 other seeds from 1.1442x to 1.1509x (41 to 42 over); headroom for every array grown a little from a given-up segment's occupant (session 43) took it to 1.259x, and 96 other seeds from 1.1501x to 1.1498x (40 to 39 over); a broader form (any array within 1/192 of a given-up segment's size, above or below, until a block was given back) took those to 1.1395x (33 over) but gave arrays remade at their size or smaller the headroom too (review s43b: a constant state beside a growing scratch 0.999x -> 1.363x)"},
}

// TestArenaHoldsCloseToTheLivePeak replays the recorded traces and the
// synthetic ones through the arena alone and behind the pool's cache
// (the pool's default: see simulateCached, whose figures are the real
// pool's, TestSimulationIsThePool) and holds both to the goal; it logs
// exact bins and the torch-like reference beside them.
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
			ratio = goalRatio
			if s, ok := shortfalls[name]; ok {
				ratio = max(ratio, s.cached)
			}
			assert.LessOrEqual(t, of(cached), ratio, "peak managed over the plan, behind the pool's cache")
			assert.LessOrEqual(t, cached.segments, segments, "device allocations, behind the pool's cache")
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

// TestSimulationIsThePool holds simulateCached to the real pool: its peak
// managed bytes over the plan, on the recorded traces, are the figures of
// README.md's table (its "pool-arena / plan" column), which cmd/clpool's
// tests check against `clpool plan` on POCL. (On 92 seeds of the
// random-mixed and small-pool generators, every figure was the pool's
// too.) A change to the pool's caches that this model does not follow
// fails here or there.
func TestSimulationIsThePool(t *testing.T) {
	readme, err := os.ReadFile("../../../README.md")
	require.NoError(t, err)
	rows := 0
	for line := range strings.Lines(string(readme)) {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if !strings.HasPrefix(line, "| `") || len(cells) != 7 {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[0]), "`")
		ev := readTrace(t, name)
		p := policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment)
		r := simulateCached(t, ev, p, p.Round)
		got := fmt.Sprintf("%.3f", float64(r.peakManaged)/float64(trace.Plan(ev, 256).Size))
		assert.Equal(t, strings.TrimSpace(cells[6]), got, "%s: the simulation's peak managed over the plan, against README's pool-arena column", name)
		rows++
	}
	require.Equal(t, 5, rows, "README.md's table of recorded traces")
}
