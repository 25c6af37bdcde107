package mempool_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PASSES (so far): a Set over three contexts (two queues each) first used
// by goroutines at once, while SetLimit changes each context's limit and
// FreeHeld and finally Close run; after the last block is closed, every
// device buffer was freed once, each pool's limit is the last SetLimit's,
// and Set.Stats' sums are its pools'.
func TestHostileS33FSetRacesFirstUseLimitsClose(t *testing.T) {
	cltest.Watchdog(t, 60*time.Second)
	q0 := cltest.Queue(t)
	var qs [][2]*cl.CommandQueue
	var ctxs []*cl.Context
	for range 3 {
		ctx, err := cl.CreateContext(q0.Device())
		require.NoError(t, err)
		t.Cleanup(func() { ctx.Release() })
		a, err := cl.NewCommandQueue(ctx, q0.Device(), 0)
		require.NoError(t, err)
		b, err := cl.NewCommandQueue(ctx, q0.Device(), 0)
		require.NoError(t, err)
		t.Cleanup(func() { a.Release(); b.Release() })
		qs = append(qs, [2]*cl.CommandQueue{a, b})
		ctxs = append(ctxs, ctx)
	}
	for _, arena := range []bool{false, true} {
		t.Run(fmt.Sprintf("arena=%v", arena), func(t *testing.T) {
			s, _ := hostileCountingSet(t, policyOptions(arena)...)
			stop := make(chan struct{})
			errs := make(chan error, 64)
			var wg sync.WaitGroup
			var mu sync.Mutex
			var left []*mempool.PooledBuffer
			for g := range 6 {
				qq := qs[g%3][g/3]
				wg.Go(func() {
					open := s33fChurn(s.On(qq), uint64(g+100), stop, errs)
					mu.Lock()
					left = append(left, open...)
					mu.Unlock()
				})
			}
			last := map[*cl.Context]int64{}
			for i := range 30 {
				ctx := ctxs[i%3]
				l := int64((i % 5) << 20)
				if err := s.SetLimit(ctx, l); err != nil {
					assert.ErrorIs(t, err, mempool.ErrPoolClosed)
				} else {
					last[ctx] = l
				}
				if i%7 == 0 {
					assert.NoError(t, s.FreeHeld())
				}
				if i == 24 {
					assert.NoError(t, s.Close())
				}
				time.Sleep(2 * time.Millisecond)
			}
			close(stop)
			if !withinWork(t, "the churning goroutines", wg.Wait) {
				return
			}
			close(errs)
			for err := range errs {
				if !errors.Is(err, mempool.ErrOutOfMemory) {
					t.Errorf("unexpected error: %v", err)
				}
			}
			for _, b := range left {
				assert.NoError(t, b.Close())
			}
			st := s.Stats()
			var managed int64
			for _, d := range st.Devices {
				managed += d.Stats.ManagedBytes
				if l, ok := last[d.Context]; ok {
					assert.Equal(t, l, d.Stats.Limit, "the last SetLimit's limit")
				}
			}
			assert.Equal(t, managed, st.ManagedBytes)
			assert.Zero(t, st.ManagedBytes)
			assert.Equal(t, st.DeviceAllocs, st.DeviceFrees)
			assert.Len(t, st.Devices, 3)
		})
	}
}
