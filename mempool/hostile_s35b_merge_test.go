package mempool_test

import (
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PASSES (exploration). Two neighbouring blocks of one arena segment,
// each written late by a kernel on its own queue (A in order, B out of
// order) and closed at once, merge into the block a third queue C takes
// (the rest of the segment is in use, so only the merge serves it): C's
// kernels over each half must find what A's and B's kernels wrote, and
// the block must end with C's values. Then the merged block goes back on
// C and splits again for A and B. With and without queue caches and drop
// safety.
func TestHostileS35bMergedBlockWaitsForBothNeighbours(t *testing.T) {
	for _, pol := range s35bPolicies[3:] {
		t.Run(pol.name, func(t *testing.T) {
			q := cltest.Queue(t)
			qa := cltest.SecondQueue(t, q, 0)
			qb := cltest.SecondQueue(t, q, cl.QueueOutOfOrder)
			qc := cltest.SecondQueue(t, q, 0)
			const n = 1024
			rig := newS35bRig(t, q, n, qa, qb, qc)
			p := pooltest.New(t, q, pol.opts...)
			iters := cltest.Size(q, 100, 300000)
			x1, err := p.On(qa).Allocate(4 * n)
			require.NoError(t, err)
			x2, err := p.On(qb).Allocate(4 * n)
			require.NoError(t, err)
			require.Same(t, x1.Base(), x2.Base())
			require.Equal(t, x1.Offset()+4*n, x2.Offset(), "neighbours")
			fill := fillSegmentOf(t, p, x2)
			defer func() {
				for _, b := range fill {
					require.NoError(t, b.Close())
				}
			}()
			base, lo := x1.Base(), x1.Offset()
			v := int32(0)
			for trial := range cltest.Size(q, 2, 5) {
				if trial > 0 { // the merged block back on C, split again for A and B
					x1, err = p.On(qa).Allocate(4 * n)
					require.NoError(t, err)
					x2, err = p.On(qb).Allocate(4 * n)
					require.NoError(t, err)
					require.Equal(t, lo, x1.Offset())
					require.Equal(t, lo+4*n, x2.Offset())
				}
				prev := v
				if trial == 0 {
					prev = -1
				}
				rig.late(t, qa, x1, v+1, prev, iters)
				rig.late(t, qb, x2, v+2, prev, iters)
				require.NoError(t, x1.Close())
				require.NoError(t, x2.Close())
				y, err := p.On(qc).Allocate(8 * n)
				require.NoError(t, err)
				require.Same(t, base, y.Base())
				require.Equal(t, lo, y.Offset(), "the merged block")
				rig.late(t, qc, y, v+3, v+1, iters/4) // over x1's half
				require.NoError(t, rig.ks[qc].SetArgs(y.Base(), y.Offset()/4+n, v+3, v+2, int32(iters/4), rig.bad))
				require.NoError(t, qc.EnqueueKernel(rig.ks[qc], []int{n}, nil)) // over x2's half
				require.NoError(t, y.Close())
				v += 3
			}
			bad := rig.bads(t, q, qa, qb, qc)
			got := s35bRead(t, q, base, lo, 2*n)
			assert.Zero(t, bad, "elements where C's kernel did not find A's or B's value")
			assert.Equal(t, v, got[0])
			assert.Equal(t, v, got[2*n-1])
			s := p.Stats()
			t.Logf("queue C: %+v", s.Queues[len(s.Queues)-1])
		})
	}
}
