package policy_test

import (
	"fmt"
	"math/rand"
	"os"
	"testing"

	"github.com/clpool/clpool/mempool/internal/policy"
	"github.com/clpool/clpool/trace"
)

// s33hTrace is a random trace of huge arrays (over half the preferred
// segment), own-sized ones and small ones, growing and shrinking.
func s33hTrace(seed int64, n int) []trace.Event {
	rng := rand.New(rand.NewSource(seed))
	var ev []trace.Event
	live := map[int64]int64{}
	var ids []int64
	var id int64
	var liveBytes int64
	budget := int64(rng.Intn(6)+2) << 30
	for i := 0; i < n; i++ {
		if rng.Intn(2) == 0 || len(ids) == 0 {
			var size int64
			switch rng.Intn(6) {
			case 0:
				size = int64(128<<20 + rng.Intn(400<<20)) // huge
			case 1:
				size = int64(8<<20 + rng.Intn(120<<20))
			case 2:
				size = int64(1<<20 + rng.Intn(8<<20))
			case 3:
				size = int64(rng.Intn(1 << 20))
			default:
				if len(ids) > 0 { // grow or shrink a live array
					old := live[ids[rng.Intn(len(ids))]]
					size = old + old/int64(rng.Intn(20)+2)*int64(rng.Intn(3)-1)
				} else {
					size = int64(rng.Intn(64 << 20))
				}
			}
			if size <= 0 {
				size = 1
			}
			if liveBytes+size > budget {
				continue
			}
			id++
			live[id] = size
			ids = append(ids, id)
			liveBytes += size
			ev = append(ev, trace.Event{Op: trace.Alloc, ID: id, Size: size})
		} else {
			k := rng.Intn(len(ids))
			x := ids[k]
			ids[k] = ids[len(ids)-1]
			ids = ids[:len(ids)-1]
			liveBytes -= live[x]
			delete(live, x)
			ev = append(ev, trace.Event{Op: trace.Free, ID: x})
		}
	}
	return ev
}

// checked wraps Arenas: Check after every call, and a Get that returns
// nil while a free block of a non-oversize segment fits is reported.
type s33hChecked struct {
	*policy.Arenas[int]
	t    testing.TB
	segs map[*policy.Segment[int]]bool
}

func (c s33hChecked) Add(seg *policy.Segment[int], size int64) *policy.Block[int] {
	c.segs[seg] = true
	b := c.Arenas.Add(seg, size)
	if err := c.Check(); err != nil {
		c.t.Fatal(err)
	}
	return b
}

func (c s33hChecked) Put(b *policy.Block[int]) *policy.Segment[int] {
	s := c.Arenas.Put(b)
	if err := c.Check(); err != nil {
		c.t.Fatal(err)
	}
	return s
}

func (c s33hChecked) BeforeGrow(size int64) []*policy.Segment[int] {
	out := c.Arenas.BeforeGrow(size)
	for _, s := range out {
		delete(c.segs, s)
	}
	if err := c.Check(); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// TestHostileS33HExplore replays 200 such traces, checked after every
// step (held on this code); S33H_OUT writes their figures.
func TestHostileS33HExplore(t *testing.T) {
	seeds := 200
	out := os.Getenv("S33H_OUT")
	var lines string
	for seed := int64(1); seed <= int64(seeds); seed++ {
		ev := s33hTrace(seed, 600)
		p := s33hChecked{policy.NewArenas[int](512, 4, 0, policy.DefaultPreferredSegment), t, map[*policy.Segment[int]]bool{}}
		r := simulate(t, ev, p)
		lines += fmt.Sprintf("%d %d %d %d\n", seed, r.peakManaged, r.peakLive, r.segments)
	}
	if out != "" {
		os.WriteFile(out, []byte(lines), 0o644)
	}
}
