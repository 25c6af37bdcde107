package mempool_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/require"
)

// s34aTracker keeps every sub-buffer Buffer() handed out, to check the
// promise of parking off: no two live sub-buffers of one segment ever
// partly overlap, and none an open block still has is released.
type s34aTracker struct {
	subs []*cl.Buffer
	seen map[*cl.Buffer]bool
}

func (tr *s34aTracker) add(b *cl.Buffer) {
	if b == nil {
		return
	}
	if p, _ := b.Parent(); p == nil {
		return // a whole segment
	}
	if tr.seen == nil {
		tr.seen = map[*cl.Buffer]bool{}
	}
	if !tr.seen[b] {
		tr.seen[b] = true
		tr.subs = append(tr.subs, b)
	}
}

// check returns an error naming two live sub-buffers of one parent that
// partly overlap (overlap, neither containing the other, not identical).
func (tr *s34aTracker) check() error {
	type rng struct{ lo, hi int64 }
	byParent := map[*cl.Buffer][]rng{}
	for _, s := range tr.subs {
		if s.Released() {
			continue
		}
		p, off := s.Parent()
		byParent[p] = append(byParent[p], rng{off, off + s.Size()})
	}
	for _, rs := range byParent {
		for i := range rs {
			for j := i + 1; j < len(rs); j++ {
				a, b := rs[i], rs[j]
				if a.lo < b.hi && b.lo < a.hi && a != b {
					contains := a.lo <= b.lo && b.hi <= a.hi || b.lo <= a.lo && a.hi <= b.hi
					if !contains {
						return fmt.Errorf("live sub-buffers [%d,%d) and [%d,%d) partly overlap", a.lo, a.hi, b.lo, b.hi)
					}
					return fmt.Errorf("live sub-buffers [%d,%d) and [%d,%d) overlap (one contains the other)", a.lo, a.hi, b.lo, b.hi)
				}
			}
		}
	}
	return nil
}

// PASSES (so far): a random churn of Allocate, Buffer, Close, FreeHeld,
// queue caches on two queues, SetLimit, drop safety and the sanitizer, with
// parking off, and a budget that makes the device refuse segments: after every step, no two live sub-buffers overlap (not even
// by containment: without parking a sub-buffer exists only for a block's
// present range), no open block's sub-buffer is released, and after Close
// every sub-buffer is released (no leak).
func TestHostileS34aNoParkingChurn(t *testing.T) {
	type variant struct {
		name string
		opts []mempool.Option
		drop bool
		wrap func(allocator.Allocator) allocator.Allocator
	}
	vs := []variant{
		{"plain", []mempool.Option{mempool.WithArena()}, false, nil},
		{"nocaches", []mempool.Option{mempool.WithArena(), mempool.WithoutQueueCaches()}, false, nil},
		{"limit", []mempool.Option{mempool.WithArena(), mempool.WithLimit(3 << 20)}, false, nil},
		{"drop", []mempool.Option{mempool.WithArena(), mempool.WithDropSafety(true)}, true, nil},
		{"sanitizer", []mempool.Option{mempool.WithArena(), mempool.WithSanitizer()}, false, nil},
		{"maxsplit", []mempool.Option{mempool.WithArena(), mempool.WithMaxSplitSize(256 << 10)}, false, nil},
		// the out-of-memory ladder: the device (a budget) refuses segments
		{"budget", []mempool.Option{mempool.WithArena()}, false, func(a allocator.Allocator) allocator.Allocator { return allocator.NewBudget(a, 3<<20) }},
		{"budget-drop", []mempool.Option{mempool.WithArena(), mempool.WithDropSafety(true)}, true, func(a allocator.Allocator) allocator.Allocator { return allocator.NewBudget(a, 3<<20) }},
	}
	for _, v := range vs {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s/%d", v.name, seed), func(t *testing.T) {
				f := newFixture(t, v.wrap, v.opts...)
				mempool.SetParking(f.pool, false)
				q2 := cltest.SecondQueue(t, f.q, 0)
				allocs := []func(int64) (*mempool.PooledBuffer, error){
					f.pool.Allocate,
					f.pool.On(f.q).Allocate,
					f.pool.On(q2).Allocate,
				}
				r := rand.New(rand.NewPCG(seed, 34))
				var tr s34aTracker
				type held struct {
					pb  *mempool.PooledBuffer
					sub *cl.Buffer
				}
				var open []held
				for step := range 600 {
					switch op := r.IntN(20); {
					case op < 9:
						size := int64(1+r.IntN(64)) << (8 + r.IntN(6))
						pb, err := allocs[r.IntN(len(allocs))](size)
						if err != nil {
							continue
						}
						h := held{pb: pb}
						if r.IntN(3) > 0 {
							h.sub = pb.Buffer()
							tr.add(h.sub)
							if h.sub != nil {
								q := f.q
								if pb.Queue() != nil {
									q = pb.Queue()
								}
								require.NoError(t, q.WriteBuffer(h.sub, 0, []byte{byte(step)}))
							}
						}
						open = append(open, h)
					case op < 17 && len(open) > 0:
						i := r.IntN(len(open))
						h := open[i]
						open = append(open[:i], open[i+1:]...)
						if v.drop && r.IntN(4) == 0 {
							continue // dropped: the collector gives it back
						}
						require.NoError(t, h.pb.Close())
					case op == 17:
						require.NoError(t, f.pool.FreeHeld())
					case op == 18:
						if v.drop {
							runtime.GC()
						}
					default:
						_ = f.pool.SetLimit(int64(2+r.IntN(6)) << 20)
					}
					for _, h := range open {
						if h.sub != nil {
							require.False(t, h.sub.Released(), "step %d: an open block's sub-buffer was released", step)
						}
					}
					require.NoError(t, tr.check(), "step %d", step)
				}
				require.NoError(t, f.q.Finish())
				require.NoError(t, q2.Finish())
				for _, h := range open {
					require.NoError(t, h.pb.Close())
				}
				open = nil
				for i := 0; v.drop && i < 50 && f.pool.ActiveBlocks() > 0; i++ {
					runtime.GC() // the dropped ones come back
					time.Sleep(time.Millisecond)
				}
				require.Zero(t, f.pool.ActiveBlocks())
				require.NoError(t, f.pool.Close())
				for i, s := range tr.subs {
					require.True(t, s.Released(), "sub-buffer %d still live after the pool's Close", i)
				}
			})
		}
	}
}
