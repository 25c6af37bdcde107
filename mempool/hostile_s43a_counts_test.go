package mempool_test

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
)

// s43aDur is how long each case of the s43a stress tests runs
// (S43A_SECONDS; 1 s, or 0.5 s with -short).
func s43aDur() time.Duration {
	if s, err := strconv.ParseFloat(os.Getenv("S43A_SECONDS"), 64); err == nil && s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	if testing.Short() {
		return time.Second / 2
	}
	return time.Second
}

// s43aWorker is s41eWorker over any number of queues, the roles turning:
// at iteration i, queue a = qs[i%n] takes the miss and the open buffer,
// the others a hit and a Close each. One goroutine, at most one buffer
// open, so every Stats (the readers' and the last) must say peak 1. It
// returns the largest peak any reader's Stats saw, and the last Stats'.
func s43aWorker(t *testing.T, p *mempool.Pool, qs []*mempool.QueueAllocator, readers ...func(*atomic.Int64)) (seen, last int64) {
	n := len(qs)
	for _, q := range qs {
		require.NoError(t, hsAlloc(t, q.Allocate, 4096).Close())
	}
	x := hsAlloc(t, qs[0].Allocate, 4096)
	p.ResetPeak()
	var stop atomic.Bool
	var peak atomic.Int64
	var wg sync.WaitGroup
	for _, r := range readers {
		wg.Go(func() {
			for !stop.Load() {
				r(&peak)
			}
		})
	}
	deadline := time.Now().Add(s43aDur())
	for i := 0; time.Now().Before(deadline); i++ {
		a := qs[i%n]
		require.NoError(t, x.Close())
		for j := 1; j < n; j++ {
			y := hsAlloc(t, qs[(i+j)%n].Allocate, 4096)
			require.NoError(t, y.Close())
		}
		w := hsAlloc(t, a.Allocate, 8192+512*int64(i%24))
		require.NoError(t, w.Close())
		x = hsAlloc(t, a.Allocate, 4096)
		if i%256 == 255 && p.Stats().Allocation.All.Peak > 1 {
			break
		}
	}
	stop.Store(true)
	wg.Wait()
	s := p.Stats()
	require.NoError(t, x.Close())
	return peak.Load(), s.Allocation.All.Peak
}

func s43aStats(p *mempool.Pool) func(*atomic.Int64) {
	return func(peak *atomic.Int64) {
		v := p.Stats().Allocation.All.Peak
		for {
			old := peak.Load()
			if v <= old || peak.CompareAndSwap(old, v) {
				return
			}
		}
	}
}

func s43aDo(f func()) func(*atomic.Int64) { return func(*atomic.Int64) { f() } }

// Guard (s43a): one goroutine on 2 or 3 queues in turn, at most one
// buffer open; readers Stats, Snapshot, ResetPeak, ResetAccumulated and
// FreeHeld on other goroutines; arena and exact bins, with and without
// drop safety. Peak 1 everywhere.
func TestHostileS43aOneGoroutineManyReaders(t *testing.T) {
	type mix struct {
		name    string
		readers func(p *mempool.Pool) []func(*atomic.Int64)
	}
	mixes := []mix{
		{"stats-snapshot-resetacc", func(p *mempool.Pool) []func(*atomic.Int64) {
			return []func(*atomic.Int64){s43aStats(p), s43aStats(p), s43aStats(p), s43aDo(func() { _ = p.Snapshot() }), s43aDo(p.ResetAccumulated)}
		}},
		{"freeheld-resetpeak", func(p *mempool.Pool) []func(*atomic.Int64) {
			return []func(*atomic.Int64){s43aStats(p), s43aDo(func() { _ = p.FreeHeld() }), s43aDo(p.ResetPeak), s43aDo(func() { _ = p.Snapshot() })}
		}},
	}
	for _, arena := range []bool{true, false} {
		for _, drop := range []bool{true, false} {
			for _, nq := range []int{2, 3} {
				for _, m := range mixes {
					t.Run(fmt.Sprintf("arena=%v/drop=%v/queues=%d/%s", arena, drop, nq, m.name), func(t *testing.T) {
						q := cltest.Queue(t)
						opts := []mempool.Option{mempool.WithDropSafety(drop)}
						if arena {
							opts = append(opts, mempool.WithArena())
						}
						p := hsPool(t, q, opts...)
						qs := []*mempool.QueueAllocator{p.On(q)}
						for range nq - 1 {
							qs = append(qs, p.On(cltest.SecondQueue(t, q, 0)))
						}
						seen, last := s43aWorker(t, p, qs, m.readers(p)...)
						assert.Equal(t, int64(1), last, "one buffer open at most, on one goroutine")
						assert.LessOrEqual(t, seen, int64(1), "a reader's Stats")
						assert.Zero(t, mempool.FrozenLate(p), "no flush waited past frozenWait")
					})
				}
			}
		}
	}
}
