package trace_test

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/trace"
)

// bfBlock is a live block of the brute-force model: [off, end) in exact
// arithmetic.
type bfBlock struct{ off, end *big.Int }

// bruteBestFit is an independent model of BestFit's documented method,
// in exact (big) arithmetic: the free gaps are recomputed from scratch at
// every allocation as the holes between the live blocks (sorted by
// offset) below the highest live end, which is the range's top. A block
// goes into the smallest hole of at least its rounded size, the lowest of
// equal ones, at the hole's start; else at the top. It returns the peak
// of the top, exact, and the placements in allocation order.
func bruteBestFit(events []trace.Event, align int64) (*big.Int, []*big.Int) {
	live := map[int64]bfBlock{}
	var leaked []bfBlock // blocks replaced by an allocation of a live id
	peak := new(big.Int)
	var offs []*big.Int
	bigAlign := big.NewInt(align)
	for _, ev := range events {
		switch ev.Op {
		case trace.Alloc:
			n := bigRounded(ev.Size, bigAlign)
			var all []bfBlock
			for _, b := range live {
				all = append(all, b)
			}
			all = append(all, leaked...)
			slices.SortFunc(all, func(x, y bfBlock) int { return x.off.Cmp(y.off) })
			cursor := new(big.Int)
			var bestOff, bestSize *big.Int
			for _, b := range all {
				if b.off.Cmp(cursor) > 0 {
					size := new(big.Int).Sub(b.off, cursor)
					if size.Cmp(n) >= 0 && (bestSize == nil || size.Cmp(bestSize) < 0) {
						bestOff, bestSize = new(big.Int).Set(cursor), size
					}
				}
				if b.end.Cmp(cursor) > 0 {
					cursor = new(big.Int).Set(b.end)
				}
			}
			off := cursor
			if bestOff != nil {
				off = bestOff
			}
			end := new(big.Int).Add(off, n)
			if old, ok := live[ev.ID]; ok {
				leaked = append(leaked, old)
			}
			live[ev.ID] = bfBlock{off, end}
			offs = append(offs, off)
			if end.Cmp(peak) > 0 {
				peak = end
			}
		case trace.Free:
			delete(live, ev.ID)
		}
	}
	return peak, offs
}

// bruteBestFitSaturated is bruteBestFit's peak clamped to math.MaxInt64.
func bruteBestFitSaturated(events []trace.Event, align int64) int64 {
	peak, _ := bruteBestFit(events, align)
	if peak.Cmp(big.NewInt(math.MaxInt64)) >= 0 {
		return math.MaxInt64
	}
	return peak.Int64()
}

// roundedLivePeak is the most rounded bytes live at once, as BestFit
// and Plan read the events, in exact arithmetic, clamped.
func roundedLivePeak(events []trace.Event, align int64) int64 {
	live := map[int64]*big.Int{}
	sum, peak := new(big.Int), new(big.Int)
	a := big.NewInt(align)
	for _, ev := range events {
		switch ev.Op {
		case trace.Alloc:
			n := bigRounded(ev.Size, a)
			live[ev.ID] = n // a replaced block stays in sum for good
			sum.Add(sum, n)
			if sum.Cmp(peak) > 0 {
				peak.Set(sum)
			}
		case trace.Free:
			if n, ok := live[ev.ID]; ok {
				sum.Sub(sum, n)
				delete(live, ev.ID)
			}
		}
	}
	if peak.Cmp(big.NewInt(math.MaxInt64)) >= 0 {
		return math.MaxInt64
	}
	return peak.Int64()
}

// randomNastyTrace makes a trace full of the cases BestFit reads
// specially: ids reused after free, duplicate frees, frees of ids never
// allocated, allocations of a live id, sizes of 0 and negative, sizes that
// exactly fill a freed gap, ties of equal gaps, and segment ops and ops
// of no kind at all.
func randomNastyTrace(r *rand.Rand, n int, align int64) []trace.Event {
	var ev []trace.Event
	var live []int64
	sizes := []int64{align, 2 * align, 3 * align, 4 * align, 8 * align}
	for len(ev) < n {
		switch k := r.IntN(20); {
		case k < 8: // allocate a fresh or reused id
			id := 1 + r.Int64N(40)
			var size int64
			switch r.IntN(6) {
			case 0:
				size = 0
			case 1:
				size = -r.Int64N(1000) - 1
			case 2:
				size = 1 + r.Int64N(5*align)
			default:
				size = sizes[r.IntN(len(sizes))] // exact fits and ties
			}
			ev = append(ev, trace.Event{Op: trace.Alloc, ID: id, Size: size})
			live = append(live, id)
		case k < 16 && len(live) > 0: // free a live (or, after a reallocation, dead) id
			i := r.IntN(len(live))
			ev = append(ev, trace.Event{Op: trace.Free, ID: live[i]})
			live = slices.Delete(live, i, i+1)
		case k == 16: // free an id maybe never allocated, maybe freed already
			ev = append(ev, trace.Event{Op: trace.Free, ID: 1 + r.Int64N(60)})
		case k == 17:
			ev = append(ev, trace.Event{Op: trace.SegmentAlloc, ID: 1 + r.Int64N(40), Size: 1 << 30})
		case k == 18:
			ev = append(ev, trace.Event{Op: trace.SegmentFree, ID: 1 + r.Int64N(40)})
		default:
			ev = append(ev, trace.Event{Op: trace.Op('x'), ID: 1 + r.Int64N(40), Size: 1 << 20})
		}
	}
	return ev
}

// TestHostileS38cBestFitMatchesBruteForce checks BestFit, figure for
// figure, against the brute-force model on thousands of random traces at
// several aligns.
func TestHostileS38cBestFitMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(38, 3))
	for _, align := range []int64{1, 3, 8, 256, 4096} {
		for i := range 600 {
			ev := randomNastyTrace(r, 10+r.IntN(150), align)
			want := bruteBestFitSaturated(ev, align)
			if !assert.Equal(t, want, trace.BestFit(ev, align), "align %d, trace %d: %v", align, i, ev) {
				return
			}
			assert.GreaterOrEqual(t, want, roundedLivePeak(ev, align))
			assert.GreaterOrEqual(t, want, trace.Summarize(ev).PeakLiveBytes)
		}
	}
}

// TestHostileS38cBestFitByHandEdges pins the documented rules on traces
// small enough to check by hand.
func TestHostileS38cBestFitByHandEdges(t *testing.T) {
	for _, c := range []struct {
		name string
		ev   string
		want int64
	}{
		// 0:a1(256) 256:a2 512:a3(256) 768:a4 1024:a5; free 1 and 3:
		// equal gaps at 0 and 512; 6 takes the lowest (0), 7 takes 512,
		// 8 goes on top.
		{"ties take the lowest", "a1:256, a2:256, a3:256, a4:256, a5:256, f1, f3, a6:256, a7:256, a8:256", 1536},
		// 1 at 0 (512), 2 at 512 (256), 3 at 768 (256), 4 at 1024: free
		// 1 (512 gap at 0) and 3 (256 gap at 768): 256 goes in 768
		// (smaller), then 512 exactly fills 0.
		{"smallest that fits, exactly", "a1:512, a2:256, a3:256, a4:256, f1, f3, a5:200, a6:512, a7:1", 1536},
		// gaps on both sides merge into one of 768: a block of 768 fits.
		{"merge with both neighbours", "a1:256, a2:256, a3:256, a4:256, f1, f3, f2, a5:768", 1024},
		// the top comes down through three merges to 0, and the next
		// block starts there.
		{"top down through merges", "a1:256, a2:256, a3:256, a4:256, f2, f1, f3, f4, a5:1024", 1024},
		{"id reused after free", "a1:256, f1, a1:256, f1, a1:512", 512},
		{"duplicate frees", "a1:256, a2:256, f1, f1, f1, a3:256", 512},
		{"allocation of a live id", "a1:256, a1:256, f1, f1, a2:512", 768},
		{"negative sizes take align", "a1:-5, a2:-9223372036854775808, f1, a3:0", 512},
	} {
		assert.Equal(t, c.want, trace.BestFit(parseEvents(t, c.ev), 256), c.name)
		assert.Equal(t, c.want, bruteBestFitSaturated(parseEvents(t, c.ev), 256), "the model, "+c.name)
	}
}

// TestHostileS38cBestFitSaturation drives the range past math.MaxInt64
// and past 2^64, at align 1 and at huge aligns, and compares with the
// exact model: it saturates exactly when the true peak is at least
// MaxInt64 and never wraps.
func TestHostileS38cBestFitSaturation(t *testing.T) {
	const m = math.MaxInt64
	a := func(id, size int64) trace.Event { return trace.Event{Op: trace.Alloc, ID: id, Size: size} }
	f := func(id int64) trace.Event { return trace.Event{Op: trace.Free, ID: id} }
	for i, c := range []struct {
		ev    []trace.Event
		align int64
		want  int64
	}{
		{[]trace.Event{a(1, m)}, 1, m},
		{[]trace.Event{a(1, m-1)}, 1, m - 1},
		{[]trace.Event{a(1, m-1), a(2, 1)}, 1, m},
		{[]trace.Event{a(1, m-1), a(2, 2)}, 1, m},
		{[]trace.Event{a(1, m), a(2, m), a(3, m)}, 1, m}, // past 2^64
		{[]trace.Event{a(1, m), a(2, m), f(2), f(1), a(3, 5)}, 1, m},
		{[]trace.Event{a(1, 1)}, m, m},
		{[]trace.Event{a(1, 1), a(2, 1)}, m, m},             // 2^64-2
		{[]trace.Event{a(1, 1), a(2, 1), a(3, 1)}, m, m},    // past 2^64
		{[]trace.Event{a(1, m), f(1), a(2, 1)}, 1 << 62, m}, // 2^63 then down to 2^62
		{[]trace.Event{a(1, 1<<62), a(2, 1<<62), f(1), a(3, 1<<62+1)}, 1, m},
		{[]trace.Event{a(1, 1<<62-2), a(2, 1<<62-2), f(1), a(3, 1<<62-1)}, 1, m},
		// the top passes MaxInt64 with a huge block, comes down, and a
		// small block's figure is not what is returned: the peak is.
		{[]trace.Event{a(1, 1), a(2, m), f(2), a(3, 1)}, 1, m},
		{[]trace.Event{a(1, m/2), a(2, m/2), f(1), a(3, m/2), a(4, 1)}, 1, m}, // exactly MaxInt64
	} {
		got := trace.BestFit(c.ev, c.align)
		assert.Equal(t, c.want, got, "case %d", i)
		assert.Equal(t, bruteBestFitSaturated(c.ev, c.align), got, "case %d, the model", i)
	}

	// Random traces of huge sizes: the model decides.
	r := rand.New(rand.NewPCG(7, 7))
	for i := range 3000 {
		align := []int64{1, 2, 1 << 40, m / 3, m}[r.IntN(5)]
		var ev []trace.Event
		for range 2 + r.IntN(12) {
			if r.IntN(3) == 0 {
				ev = append(ev, f(1+r.Int64N(6)))
				continue
			}
			size := []int64{m, m - 1, m / 2, m/2 + 1, m / 3, 1 << 61, 1, 0}[r.IntN(8)]
			ev = append(ev, a(1+r.Int64N(6), size))
		}
		want := bruteBestFitSaturated(ev, align)
		if !assert.Equal(t, want, trace.BestFit(ev, align), "random %d, align %d: %v", i, align, ev) {
			return
		}
	}
}

// TestHostileS38cBestFitEqualSizesIsPlan: of blocks of one size every
// gap fits exactly, so best fit packs them as tightly as anything can:
// the rounded live peak, which is also Plan's Size there (interval
// colouring in order of starts is optimal).
func TestHostileS38cBestFitEqualSizesIsPlan(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 9))
	for i := range 300 {
		var ev []trace.Event
		var live []int64
		for id := int64(1); id <= 80; id++ {
			ev = append(ev, trace.Event{Op: trace.Alloc, ID: id, Size: 1 + r.Int64N(256)})
			live = append(live, id)
			for len(live) > 0 && r.IntN(2) == 0 {
				j := r.IntN(len(live))
				ev = append(ev, trace.Event{Op: trace.Free, ID: live[j]})
				live = slices.Delete(live, j, j+1)
			}
		}
		peak := roundedLivePeak(ev, 256)
		require.Equal(t, peak, trace.BestFit(ev, 256), "trace %d", i)
		require.Equal(t, peak, trace.Plan(ev, 256).Size, "trace %d", i)
	}
}

// TestHostileS38cBestFitLIFOIsLivePeak: a stack-like trace never leaves
// a gap below the top, so best fit needs exactly the rounded live peak.
func TestHostileS38cBestFitLIFOIsLivePeak(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 1))
	for i := range 300 {
		var ev []trace.Event
		var stack []int64
		for id := int64(1); id <= 100; id++ {
			ev = append(ev, trace.Event{Op: trace.Alloc, ID: id, Size: r.Int64N(10000)})
			stack = append(stack, id)
			for len(stack) > 0 && r.IntN(2) == 0 {
				ev = append(ev, trace.Event{Op: trace.Free, ID: stack[len(stack)-1]})
				stack = stack[:len(stack)-1]
			}
		}
		assert.Equal(t, roundedLivePeak(ev, 256), trace.BestFit(ev, 256), fmt.Sprint("trace ", i))
	}
}

// bigRounded is a block's bytes in exact arithmetic: size (at least 1)
// rounded up to a multiple of align, as Plan and BestFit round it.
func bigRounded(size int64, align *big.Int) *big.Int {
	n := big.NewInt(max(size, 1))
	n.Add(n, new(big.Int).Sub(align, big.NewInt(1)))
	n.Div(n, align)
	return n.Mul(n, align)
}
