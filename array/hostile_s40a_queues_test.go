package array_test

// Hostile review s40a: arrays over one arena pool on two queues at once,
// through pool.On(q), with a limit that makes the blocks move between the
// queues, the queue caches and the pool.

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/clpool/clpool/array"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PASSES (exploration): two goroutines, each on its own queue, compute
// y = 2x + 1 (Axpy, temporaries, views) and check Sum and the elements,
// over one arena capped at a few arrays' worth: every result is right.
func TestS40aArraysOnTwoQueuesOverOneCappedArena(t *testing.T) {
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	n := cltest.Size(q, 512, 32<<10)
	pool := pooltest.New(t, q, mempool.WithArena(), mempool.WithLimit(int64(24*4*n)))
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for g, qq := range []*cl.CommandQueue{q, q2} {
		alloc := pool.On(qq).Allocate
		wg.Go(func() {
			errs[g] = func() error {
				for i := range cltest.Size(q, 5, 40) {
					x, err := array.Arange[int32](qq, n, int32(g*1000+i), 1, alloc)
					if err != nil {
						return err
					}
					ones, err := array.Full[int32](qq, n, 1, alloc)
					if err != nil {
						x.Close()
						return err
					}
					y, err := array.Axpy(2, x, ones)
					x.Close()
					ones.Close()
					if err != nil {
						return err
					}
					v, err := y.Slice(1, n)
					if err != nil {
						y.Close()
						return err
					}
					s, err := array.Sum(v)
					got, gerr := y.Get()
					v.Close()
					y.Close()
					if err != nil || gerr != nil {
						return fmt.Errorf("%w %w", err, gerr)
					}
					var want int32
					for k := 1; k < n; k++ {
						want += 2*int32(g*1000+i+k) + 1
					}
					if s != want {
						return fmt.Errorf("goroutine %d step %d: Sum %d, want %d", g, i, s, want)
					}
					for k, e := range got {
						if e != 2*int32(g*1000+i+k)+1 {
							return fmt.Errorf("goroutine %d step %d: y[%d] = %d", g, i, k, e)
						}
					}
				}
				return nil
			}()
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the two goroutines hung")
	}
	for _, err := range errs {
		assert.NoError(t, err)
	}
	require.NoError(t, q2.Finish())
}
