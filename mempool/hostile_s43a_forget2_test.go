package mempool_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
)

// Control (s43a) for TestHostileS43aForgetReleasedSplitsTurns: the same
// goroutine registers queues but releases them only after the worker is
// done, so forgetReleased runs (every 2x the states) but forgets nothing
// and flushes nothing. Peak 1: the split above is forgetReleased's
// emptyCacheLocked, not the registration.
func TestHostileS43aRegisterWithoutForgetHolds(t *testing.T) {
	q := cltest.Queue(t)
	p := hsPool(t, q, mempool.WithArena())
	b := p.On(q)
	a := p.On(cltest.SecondQueue(t, q, 0))
	var made []*cl.CommandQueue
	t.Cleanup(func() {
		for _, q3 := range made {
			_ = q3.Release()
		}
	})
	register := func() {
		if len(made) >= 300 {
			return
		}
		q3, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
		require.NoError(t, err)
		made = append(made, q3)
		_ = p.On(q3)
	}
	s := s41eWorker(t, p, a, b, register)
	assert.Equal(t, int64(1), s.Allocation.All.Peak, "one buffer open at most, on one goroutine")
}
