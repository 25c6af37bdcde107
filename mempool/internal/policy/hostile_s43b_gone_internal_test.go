package policy

import (
	"math/rand/v2"
	"testing"
)

// Review s43b: random runs of the arena policy's operations, BeforeGrow,
// TakeKept, TakeLargest, TakeFreeIf and GetAnyOn among them, with Check
// after every step, and p.gone held to a bound: every entry in it is one
// takeAll gave up in its last round (a round begins at the first give-up
// after a new segment), so it holds at most as many as that round gave
// up; p.goneSizes likewise, until the next new segment.
func TestHostileS43bGoneStaysBounded(t *testing.T) {
	maxGone := 0
	for seed := uint64(0); seed < 400; seed++ {
		r := rand.New(rand.NewPCG(seed, 43))
		maxSplit := []int64{0, 16 << 20}[seed%2]
		p := NewArenas[int](512, 4, maxSplit, []int64{64 << 20, DefaultPreferredSegment}[seed/2%2])
		if seed%3 == 0 {
			p.SetQuickMax(0)
		}
		var live []*Block[int]
		givenUp := 0   // entries takeAll put in p.gone in its last round
		added := false // a segment was added since that round began
		segs := 0
		size := func() int64 {
			switch r.IntN(5) {
			case 0:
				return int64(r.IntN(64) + 1)
			case 1:
				return int64(r.IntN(1<<20) + 1)
			case 2:
				return 24<<20 + int64(r.IntN(1<<18)) - 1<<17
			case 3:
				return int64(r.IntN(40<<20) + 1)
			default:
				return int64(r.IntN(8<<20) + 1)
			}
		}
		take := func(out []*Segment[int]) {
			for _, s := range out {
				if !s.Oversize && !s.tiny {
					if added {
						givenUp, added = 0, false
					}
					givenUp++
				}
			}
			segs -= len(out)
		}
		for step := 0; step < 600; step++ {
			before := len(p.gone)
			switch op := r.IntN(20); {
			case op < 9 || len(live) == 0:
				n := size()
				b := p.Get(n)
				if b == nil && r.IntN(4) == 0 {
					b = p.GetAnyOn(n, 0)
				}
				if b == nil {
					s := p.NewSegment(n)
					take(p.BeforeGrow(n))
					if r.IntN(3) == 0 { // the pool sizes it again (after a drain that moved nothing)
						s = p.NewSegment(n)
					}
					b = p.Add(s, n)
					added = true
					segs++
				}
				live = append(live, b)
			case op < 15:
				k := r.IntN(len(live))
				if s := p.Put(live[k]); s != nil {
					segs--
				}
				live = append(live[:k], live[k+1:]...)
			case op < 17:
				take(p.TakeKept(size()))
			case op < 18:
				if s := p.TakeLargest(); s != nil {
					segs--
				}
			case op < 19:
				if s := p.TakeFreeIf(func(b *Block[int]) bool { return r.IntN(2) == 0 }); s != nil {
					segs--
				}
			default:
				take(p.BeforeGrow(size()))
			}
			if len(p.gone) > givenUp || len(p.goneSizes) > givenUp {
				t.Fatalf("seed %d step %d: %d entries in p.gone, %d in p.goneSizes, %d given up in the last round (was %d)", seed, step, len(p.gone), len(p.goneSizes), givenUp, before)
			}
			maxGone = max(maxGone, len(p.gone))
			if err := p.Check(); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if segs != p.counts.Segments {
				t.Fatalf("seed %d step %d: %d segments, counts say %d", seed, step, segs, p.counts.Segments)
			}
		}
	}
	t.Logf("at most %d sizes in p.gone", maxGone)
}

// forget's doc: it takes off p.gone "the segment it replaces". But every
// Add takes one size off, whatever the request: after BeforeGrow gives up
// 4 segments of 24 MiB and the first array of the grown state replaces
// one, three growth-step segments for 64 KiB requests (nowhere near 24
// MiB) take off the other three, and the state's next arrays get no
// headroom. Fails at 068fcf8 (gone empty, not 3 sizes).
func TestHostileS43bForgetTakesOneSizePerAddWhateverTheSize(t *testing.T) {
	p := NewArenas[int](512, 4, 0, DefaultPreferredSegment)
	var bs []*Block[int]
	for range 4 {
		bs = append(bs, p.Add(p.NewSegment(24<<20), 24<<20))
	}
	for _, b := range bs {
		p.Put(b)
	}
	n := int64(24<<20 + 24<<20/500)
	if len(p.BeforeGrow(n)) != 4 || len(p.gone) != 4 {
		t.Fatalf("gone %v", p.gone)
	}
	p.Add(p.NewSegment(n), n)
	for range 3 {
		small := int64(64 << 10)
		for p.Get(small) != nil {
		}
		p.Add(p.NewSegment(small), small)
	}
	if len(p.gone) != 3 {
		t.Errorf("p.gone %v: the three 24 MiB segments not yet replaced are forgotten", p.gone)
	}
	if got, want := p.SegmentSize(n), roundUp(n+n/HeadroomDivisor, OwnUnit); got != want {
		t.Errorf("the remade state's second array: a %d-byte segment, not %d", got, want)
	}
}
