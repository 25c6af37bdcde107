package mempool_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
)

// s31aSeq runs one goroutine's random sequence on p, over the pool's own
// Allocate and the queues qs (an out-of-order one among them, maybe),
// looking at Stats after every step if look. It returns the last Stats.
func s31aSeq(t *testing.T, p *mempool.Pool, qs []*cl.CommandQueue, seed uint64, steps int, look bool, sizes func(*rand.Rand) int64) mempool.Stats {
	rng := rand.New(rand.NewPCG(seed, 31))
	allocs := []func(int64) (*mempool.PooledBuffer, error){p.Allocate}
	ons := []*mempool.QueueAllocator{nil}
	for _, q := range qs {
		on := p.On(q)
		allocs = append(allocs, on.Allocate)
		ons = append(ons, on)
	}
	var open []*mempool.PooledBuffer
	for step := range steps {
		switch r := rng.IntN(1000); {
		case r < 480:
			k := rng.IntN(len(allocs))
			b, err := allocs[k](sizes(rng))
			require.NoError(t, err)
			open = append(open, b)
		case r < 970:
			if len(open) == 0 {
				continue
			}
			i := len(open) - 1 - rng.IntN(min(len(open), 4))
			require.NoError(t, open[i].Close())
			open = append(open[:i], open[i+1:]...)
		case r < 980:
			p.ResetPeak()
		case r < 990: // (not ResetAccumulated: pooltest checks the device counts at the end)
			require.NoError(t, p.FreeHeld())
		case r < 995:
			if on := ons[rng.IntN(len(ons))]; on != nil {
				require.NoError(t, on.FreeHeld())
			}
		default:
			_ = p.Snapshot()
		}
		if look {
			s := p.Stats()
			pooltest.CheckStats(t, s)
			_ = step
		}
	}
	for _, b := range open {
		require.NoError(t, b.Close())
	}
	s := p.Stats()
	for i := range s.Queues { // whether a marker was complete already is the device's timing
		s.Queues[i].Ready, s.Queues[i].Barriers, s.Queues[i].HostWaits = 0, 0, 0
	}
	return s
}

func s31aSmall(rng *rand.Rand) int64 {
	switch rng.IntN(10) {
	case 0:
		return 1 + rng.Int64N(3<<20)
	case 1, 2:
		return 1 + rng.Int64N(64<<10)
	default:
		return []int64{512, 1024, 4096, 4096, 8192, 3000, 100}[rng.IntN(7)]
	}
}

// Holds on 02957d1: one goroutine's random sequence on the pool's own
// Allocate and two to four queues (an out-of-order one among them in
// some runs), with ResetPeak, FreeHeld, a queue's
// FreeHeld and Snapshot mixed in, gives the same Stats, every figure and
// peak, when Stats is only read at the end as when it is read (and so
// every cache flushed) after every step: the contract of qflush.go, on
// bins and arena, with drop safety and without.
func TestHostileS31aOneGoroutineLookedOrNot(t *testing.T) {
	q := cltest.Queue(t)
	q2, q3, q4 := cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, 0)
	ooo := cltest.SecondQueue(t, q, cl.QueueOutOfOrder)
	for _, tc := range []struct {
		name  string
		qs    []*cl.CommandQueue
		steps int
	}{
		{"two", []*cl.CommandQueue{q, q2}, 1500},
		// Fewer steps: POCL's out-of-order queue takes tens of seconds
		// to finish (at its release) the barriers of 1500 steps.
		{"three+ooo", []*cl.CommandQueue{q, q2, ooo}, 300},
		{"four", []*cl.CommandQueue{q, q2, q3, q4}, 1500},
	} {
		for _, opts := range []struct {
			name string
			o    []mempool.Option
		}{
			{"bins", []mempool.Option{mempool.WithDropSafety(false)}},
			{"bins/drop", nil},
			{"arena", []mempool.Option{mempool.WithArena(), mempool.WithDropSafety(false)}},
			{"arena/drop", []mempool.Option{mempool.WithArena()}},
		} {
			t.Run(tc.name+"/"+opts.name, func(t *testing.T) {
				for seed := range uint64(3) {
					var res [2]mempool.Stats
					for i, look := range []bool{true, false} {
						p := pooltest.New(t, q, opts.o...)
						res[i] = s31aSeq(t, p, tc.qs, seed, tc.steps, look, s31aSmall)
						pooltest.CheckStats(t, res[i])
					}
					assert.Equal(t, res[0], res[1], fmt.Sprintf("seed %d: looked at every step (left) or only at the end (right)", seed))
				}
			})
		}
	}
}
