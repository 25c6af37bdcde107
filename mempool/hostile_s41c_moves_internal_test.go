package mempool

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHostileS41cSplitMovesReplayExactly: splitMoves (splits.go) as the
// queue cache drives it (trip, else list; cut at each turn; flushed, cut
// and reset at flushOps operations): expanded, each move followed by its
// round trips, the list gives back every move in order, in its segment's
// run, and never more than flushOps of them. Long runs of round trips (a
// move undone and made again up to flushOps times), odd and even, with
// cuts between halves, on two segments and two sizes.
func TestHostileS41cSplitMovesReplayExactly(t *testing.T) {
	type mv struct {
		seg  *segment
		size int64
	}
	segs := []*segment{new(segment), new(segment)}
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 41))
		m := new(splitMoves)
		var made []mv // since the last flush
		ops := 0
		flush := func() {
			m.cut()
			require.LessOrEqual(t, m.n, flushOps, "seed %d", seed)
			require.LessOrEqual(t, m.n, ops, "seed %d: no more moves than operations", seed)
			var got []mv
			r := -1
			for _, x := range m.moves[:m.n] {
				if x.first {
					r++
				}
				require.GreaterOrEqual(t, r, 0, "seed %d: the first move begins a run", seed)
				s := m.segs[r]
				got = append(got, mv{s, int64(x.size)})
				for range x.trips {
					got = append(got, mv{s, -int64(x.size)}, mv{s, int64(x.size)})
				}
			}
			require.Equal(t, r+1, m.runs, "seed %d", seed)
			require.Equal(t, len(made), len(got), "seed %d: moves", seed)
			for i := range made {
				require.Same(t, made[i].seg, got[i].seg, "seed %d move %d", seed, i)
				require.Equal(t, made[i].size, got[i].size, "seed %d move %d", seed, i)
			}
			m.reset()
			made, ops = made[:0], 0
		}
		last := mv{segs[0], 4096}
		for range 3000 {
			var x mv
			switch k := rng.IntN(10); {
			case k < 7: // undo the last move: a round trip's half
				x = mv{last.seg, -last.size}
			default:
				x = mv{segs[rng.IntN(2)], []int64{4096, 8192}[rng.IntN(2)]}
				if rng.IntN(2) == 0 {
					x.size = -x.size
				}
			}
			if rng.IntN(50) == 0 {
				m.cut() // another queue began a turn
			}
			if !m.trip(x.seg, x.size) {
				m.list(x.seg, x.size)
			}
			made = append(made, x)
			last = x
			ops++
			if ops >= flushOps || rng.IntN(200) == 0 {
				flush()
			}
		}
		flush()
	}
}
