package policy_test

import (
	"testing"

	"github.com/clpool/clpool/mempool/internal/policy"
	"github.com/stretchr/testify/require"
)

// FuzzArena drives the arena policy with random requests and frees and
// checks it against a model of byte ranges: no two active blocks overlap,
// free neighbours are merged unless one waits unmerged (at most
// DefaultQuick do, and none after TakeLargest), every byte of every
// segment is in exactly one block, and the counts agree (Check), after
// every step; a request goes to the device only if no free block fits
// it; and every new segment is sized as SegmentSize says: at least the
// request's block, in OwnUnit multiples, FirstSegment for the first small
// one, and no larger than the preferred size or the request's block with
// its headroom. A tiny request (see TinyBlock) takes a block of a tiny
// segment, or else the smallest fit of the others unless that is a wholly
// free segment, and else gets a tiny segment.
func FuzzArena(f *testing.F) {
	f.Add([]byte{1, 2, 3, 200, 4, 5, 130, 6, 255, 7, 8})
	f.Add([]byte{255, 255, 0, 128, 129, 64, 3, 3, 3, 3})
	f.Add([]byte("A\xa3A0\xa3\xa30"))                                   // a small request beside the tail of a segment made for a large one
	f.Add([]byte{0x17, 0x9f, 0x17, 0x30, 0x9f, 0xc0, 0x30, 0x30, 0x17}) // huge requests (maxSplit 0) among small ones
	f.Fuzz(func(t *testing.T, ops []byte) {
		// With an odd first byte, no request is oversize: those over
		// 32 MiB get huge segments (see Arenas.PassesOver).
		maxSplit := int64(16 << 20)
		if len(ops) > 0 && ops[0]%2 == 1 {
			maxSplit = 0
		}
		p := policy.NewArenas[int](512, 4, maxSplit, 64<<20)
		type active struct {
			b    *policy.Block[int]
			size int64
		}
		var live []active
		segs := map[*policy.Segment[int]]bool{}
		for i, op := range ops {
			switch {
			case op < 160 || len(live) == 0: // allocate
				size := int64(op%40+1) << (op % 24) // 1 B to ~320 MiB
				b := p.Get(size)
				consolidating := b == nil && p.Replacing()
				if b == nil && !p.Oversize(size) && !consolidating {
					// None fits that the request may take, waiting
					// blocks merged: a segment made for one request
					// serves a smaller one than OwnMin only once it is
					// wholly free (and not huge: see Arenas.PassesOver).
					n := p.Round(size)
					tiny := n <= policy.TinyBlock
					var best *policy.Block[int] // a tiny request's smallest fit of the other segments
					for s := range segs {
						may := s.Tiny() == tiny && (!s.Own() || n >= p.OwnMin() || s.WhollyFree() && !s.Huge()) && !p.PassesOver(s, size)
						for x := range s.Blocks() {
							fits := x.Free() && !s.Oversize && x.Size >= n
							require.False(t, fits && may,
								"step %d: a free %d-byte block fits %d bytes, but Get found none", i, x.Size, n)
							if fits && tiny && !s.Tiny() && !s.Own() && (best == nil || x.Size < best.Size || x.Size == best.Size && x.Whole()) {
								best = x
							}
						}
					}
					// A tiny request takes the smallest fit of the
					// ordinary segments, unless it is a wholly free one.
					if best != nil {
						require.True(t, best.Whole(),
							"step %d: a free %d-byte block of a segment in use fits a tiny request, but Get found none", i, best.Size)
					}
				}
				if b == nil { // in the pool's order: the segment sized, then BeforeGrow
					s := p.NewSegment(size)
					checkSegmentSize(t, p, s, size, len(segs) == 0)
					for _, s := range p.BeforeGrow(size) {
						require.True(t, segs[s])
						delete(segs, s)
					}
					if consolidating {
						// Get declined a block for a segment that
						// replaces every wholly free one but the tiny.
						for s := range segs {
							require.False(t, s.WhollyFree() && !s.Tiny(), "step %d: a wholly free segment beside the consolidated one", i)
						}
					}
					segs[s] = true
					b = p.Add(s, size)
				}
				require.GreaterOrEqual(t, b.Size, size)
				require.False(t, b.Free())
				for _, x := range live {
					if x.b.Seg == b.Seg {
						require.True(t, x.b.Off+x.b.Size <= b.Off || b.Off+b.Size <= x.b.Off, "overlap")
					}
				}
				live = append(live, active{b, size})
			case op < 250: // free one
				k := int(op) % len(live)
				require.Nil(t, p.Put(live[k].b))
				live = append(live[:k], live[k+1:]...)
			default: // free what can be freed
				for s := p.TakeLargest(); s != nil; s = p.TakeLargest() {
					require.True(t, segs[s])
					delete(segs, s)
				}
				require.Zero(t, p.Waiting(), "TakeLargest merges every waiting block")
			}
			require.NoError(t, p.Check(), "step %d", i)
			require.Equal(t, len(segs), p.Counts().Segments)
		}
		for _, x := range live {
			p.Put(x.b)
		}
		for s := p.TakeLargest(); s != nil; s = p.TakeLargest() {
			delete(segs, s)
		}
		require.Empty(t, segs, "every segment wholly free at the end")
		require.Equal(t, policy.Counts{}, *p.Counts())
	})
}

// checkSegmentSize checks a new segment s for a request of size against
// SegmentSize's contract (preferred: FuzzArena's 64 MiB); first: the
// arena holds no segment.
func checkSegmentSize(t *testing.T, p *policy.Arenas[int], s *policy.Segment[int], size int64, first bool) {
	t.Helper()
	n := p.Round(size)
	require.GreaterOrEqual(t, s.Size, n, "a %d-byte request's segment holds its block", size)
	require.Zero(t, s.Size%policy.OwnUnit, "segment of %d bytes: a multiple of OwnUnit", s.Size)
	headroom := (n + n/policy.HeadroomDivisor + policy.OwnUnit - 1) / policy.OwnUnit * policy.OwnUnit
	require.LessOrEqual(t, s.Size, max(int64(64<<20), headroom), "a %d-byte request's segment", size)
	if n <= policy.TinyBlock {
		require.True(t, s.Tiny() && s.Small, "a tiny request's segment is tiny")
		require.LessOrEqual(t, s.Size, max(int64(policy.TinySegment), 32<<20), "at most half the preferred size")
		return
	}
	if first && n <= policy.FirstSegment {
		require.Equal(t, int64(policy.FirstSegment), s.Size, "the first segment of a small request")
	}
}
