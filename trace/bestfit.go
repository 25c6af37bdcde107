package trace

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// BestFit returns the bytes that best fit needs for the blocks of events,
// placed as they come, knowing nothing of what follows: each block (its
// size rounded up to align, as Plan rounds it) goes into the smallest free
// gap that fits, the lowest of equal ones, else at the top of one range
// with no end, which comes down when the block at its top is freed.
// BestFit returns the most the range reached.
//
// It is a reference, not a bound: plain best fit, with no segment bounds,
// no growth step and no cache. A pool that manages more for a trace pays
// that for its placement, its segments (whose sizes are fixed for life:
// OpenCL cannot grow a buffer in place) and its caches; one that manages
// less placed better. Plan's Size is no lower bound either (see Layout):
// best fit may need less on a trace, though on most it needs more.
// Events are read as Plan reads them: a free of an id that is not live is
// ignored, and an allocation of a live id leaves the block it replaces
// live to the end.
//
// It takes O(n·g) time for n blocks and at most g free gaps at once, and
// saturates at math.MaxInt64. It panics if align is less than 1.
func BestFit(events []Event, align int64) int64 {
	if align < 1 {
		panic(fmt.Sprintf("trace: BestFit with align %d, want at least 1", align))
	}
	var gaps []gap // by offset; none touches another, nor the top
	var top, peak uint64
	live := map[int64]gap{}
	for _, ev := range events {
		switch ev.Op {
		case Alloc:
			n := roundUp(ev.Size, align)
			best := -1
			for i, g := range gaps {
				if size := g.end - g.off; size >= n && (best < 0 || size < gaps[best].end-gaps[best].off) {
					best = i
				}
			}
			if best < 0 {
				if top > math.MaxUint64-n {
					return math.MaxInt64
				}
				live[ev.ID] = gap{top, top + n}
				top += n
				peak = max(peak, top)
				continue
			}
			g := &gaps[best]
			live[ev.ID] = gap{g.off, g.off + n}
			if g.off += n; g.off == g.end {
				gaps = slices.Delete(gaps, best, best+1)
			}
		case Free:
			b, ok := live[ev.ID]
			if !ok {
				continue
			}
			delete(live, ev.ID)
			gaps = freeGap(gaps, b)
			if last := len(gaps) - 1; gaps[last].end == top {
				top = gaps[last].off
				gaps = gaps[:last]
			}
		}
	}
	return int64(min(peak, math.MaxInt64))
}

// gap is the bytes from off, up to and not including end, of BestFit's
// range.
type gap struct{ off, end uint64 }

// freeGap inserts the free bytes of b into gaps, sorted by offset, merged
// with the gaps it touches, and returns gaps.
func freeGap(gaps []gap, b gap) []gap {
	i, _ := slices.BinarySearchFunc(gaps, b.off, func(g gap, off uint64) int { return cmp.Compare(g.off, off) })
	gaps = slices.Insert(gaps, i, b)
	if i+1 < len(gaps) && gaps[i+1].off == b.end {
		gaps[i].end = gaps[i+1].end
		gaps = slices.Delete(gaps, i+1, i+2)
	}
	if i > 0 && gaps[i-1].end == b.off {
		gaps[i-1].end = gaps[i].end
		gaps = slices.Delete(gaps, i, i+1)
	}
	return gaps
}
