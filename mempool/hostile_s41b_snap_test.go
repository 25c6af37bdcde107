package mempool_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/require"
)

// s41bCheckSnapshot checks that a snapshot agrees with itself and with
// the Stats taken with nothing else running: segments covered by their
// blocks, with no overlap; the segments' sums are ManagedBytes and the
// small/large reserved bytes; the active blocks are ActiveBlocks and
// their requested bytes ActiveBytes; held and inactive-split blocks are
// HeldBlocks/HeldBytes and InactiveSplit/InactiveSplitBytes (Snapshot's
// doc: "As Stats counts them").
func s41bCheckSnapshot(t *testing.T, name string, s mempool.Stats, snap mempool.Snapshot) {
	t.Helper()
	var segBytes, smallBytes, largeBytes, held, activeReq, activeSize, split, smallActive, largeActive int64
	var heldN, activeN, splitN, smallSegs, largeSegs int
	for _, seg := range snap.Segments {
		segBytes += seg.Size
		if seg.Small {
			smallBytes += seg.Size
			smallSegs++
		} else {
			largeBytes += seg.Size
			largeSegs++
		}
		off := int64(0)
		for _, b := range seg.Blocks {
			require.Equal(t, off, b.Offset, "%s: segment %d: blocks cover the segment in order, no gap or overlap", name, seg.ID)
			require.Positive(t, b.Size, "%s: segment %d", name, seg.ID)
			off += b.Size
			switch b.State {
			case mempool.StateActive:
				activeN++
				activeReq += b.Requested
				activeSize += b.Size
				if seg.Small {
					smallActive++
				} else {
					largeActive++
				}
			case mempool.StateInactiveSplit:
				splitN++
				split += b.Size
				heldN++
				held += b.Size
			case mempool.StateHeld:
				heldN++
				held += b.Size
			default:
				t.Fatalf("%s: unknown state %q", name, b.State)
			}
		}
		require.Equal(t, seg.Size, off, "%s: segment %d: its blocks sum to its size", name, seg.ID)
	}
	require.Equal(t, s.ManagedBytes, segBytes, name+": managed bytes = segments' sum")
	require.Equal(t, s.ManagedBytes, snap.ManagedBytes, name)
	require.Equal(t, s.ReservedBytes.Small.Current, smallBytes, name+": small reserved")
	require.Equal(t, s.ReservedBytes.Large.Current, largeBytes, name+": large reserved")
	require.Equal(t, s.Segment.Small.Current, int64(smallSegs), name+": small segments")
	require.Equal(t, s.Segment.Large.Current, int64(largeSegs), name+": large segments")
	require.Equal(t, s.ActiveBlocks, activeN, name+": active blocks")
	require.Equal(t, s.ActiveBytes, activeReq, name+": active requested bytes")
	require.Equal(t, s.ActiveBytes, snap.ActiveBytes, name)
	require.Equal(t, s.AllocatedBytes.All.Current, activeSize, name+": allocated bytes = active blocks' sizes")
	require.Equal(t, s.Allocation.Small.Current, smallActive, name+": small allocations")
	require.Equal(t, s.Allocation.Large.Current, largeActive, name+": large allocations")
	require.Equal(t, s.HeldBlocks, heldN, name+": held blocks")
	require.Equal(t, s.HeldBytes, held, name+": held bytes")
	require.Equal(t, s.InactiveSplit.All.Current, int64(splitN), name+": inactive splits")
	require.Equal(t, s.InactiveSplitBytes.All.Current, split, name+": inactive split bytes")
	require.Equal(t, s.PeakManagedBytes, snap.PeakManagedBytes, name)
	require.Equal(t, s.PeakActiveBytes, snap.PeakActiveBytes, name)
}

// s41bCheckStats checks every Stat of s: peaks at least the currents, and
// no current below zero.
func s41bCheckStats(t *testing.T, name string, s mempool.Stats) {
	t.Helper()
	gs := map[string]mempool.StatGroup{"allocation": s.Allocation, "allocated_bytes": s.AllocatedBytes, "requested_bytes": s.RequestedBytes,
		"active": s.Active, "active_bytes": s.ActiveBlockBytes, "inactive_split": s.InactiveSplit, "inactive_split_bytes": s.InactiveSplitBytes,
		"segment": s.Segment, "reserved_bytes": s.ReservedBytes}
	for gname, g := range gs {
		for pname, st := range map[string]mempool.Stat{"all": g.All, "small": g.Small, "large": g.Large} {
			require.GreaterOrEqual(t, st.Current, int64(0), "%s: %s.%s current", name, gname, pname)
			require.GreaterOrEqual(t, st.Peak, st.Current, "%s: %s.%s peak below current", name, gname, pname)
		}
		require.Equal(t, g.All.Current, g.Small.Current+g.Large.Current, "%s: %s", name, gname)
	}
	for pname, st := range map[string]mempool.Stat{"oversize_allocations": s.OversizeAllocations, "oversize_segments": s.OversizeSegments} {
		require.GreaterOrEqual(t, st.Current, int64(0), "%s: %s", name, pname)
		require.GreaterOrEqual(t, st.Peak, st.Current, "%s: %s", name, pname)
	}
	require.GreaterOrEqual(t, s.PeakManagedBytes, s.ManagedBytes, name)
	require.GreaterOrEqual(t, s.PeakActiveBytes, s.ActiveBytes, name)
}

// TestHostileS41bSnapshotMatchesStatsRandom runs random single-goroutine
// workloads (arena and bins, drop safety on and off, three queues, a
// budget, the sanitizer) and after each step checks the snapshot against
// Stats, block by block. It passes (a regression guard).
func TestHostileS41bSnapshotMatchesStatsRandom(t *testing.T) {
	for _, c := range []struct {
		arena, drop, san, oversize bool
	}{{false, true, false, false}, {true, true, false, false}, {true, false, false, false}, {false, false, false, false},
		{true, true, true, false}, {false, true, true, false}, {true, false, false, true}} {
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("arena=%v/drop=%v/san=%v/oversize=%v/seed=%d", c.arena, c.drop, c.san, c.oversize, seed), func(t *testing.T) {
				s41bRandom(t, c.arena, c.drop, c.san, c.oversize, seed)
			})
		}
	}
}

func s41bRandom(t *testing.T, arena, drop, san, oversize bool, seed uint64) {
	q := cltest.Queue(t)
	qs := []*cl.CommandQueue{q, cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, cl.QueueOutOfOrder)}
	rng := rand.New(rand.NewPCG(41, seed))
	opts := []mempool.Option{mempool.WithDropSafety(drop)}
	if arena {
		opts = append(opts, mempool.WithArena())
	}
	if oversize {
		opts = append(opts, mempool.WithMaxSplitSize(1<<20))
	}
	if san {
		opts = append(opts, mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil))
	}
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	count := allocator.NewCounting(imm)
	budget := allocator.NewBudget(count, 12<<20)
	p, err := mempool.New(budget, opts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		require.NoError(t, p.Close())
		require.Zero(t, count.Stats().Live)
	})
	sizes := []int64{0, 1, 100, 1000, 4096, 5000, 65536, 300 << 10, 1 << 20, 1<<20 + 1, 3 << 20}
	var list []*mempool.PooledBuffer
	steps := cltest.Size(q, 40, 250)
	for step := range steps {
		op := rng.IntN(20)
		name := fmt.Sprintf("seed %d step %d op %d", seed, step, op)
		switch {
		case op < 9:
			size := sizes[rng.IntN(len(sizes))]
			var b *mempool.PooledBuffer
			if k := rng.IntN(4); k == 3 {
				b, err = p.Allocate(size)
			} else {
				b, err = p.On(qs[k]).Allocate(size)
			}
			if err != nil {
				require.ErrorIs(t, err, mempool.ErrOutOfMemory, name)
				break
			}
			list = append(list, b)
		case op < 16:
			if len(list) > 0 {
				i := rng.IntN(len(list))
				require.NoError(t, list[i].Close(), name)
				list = append(list[:i], list[i+1:]...)
			}
		case op == 16:
			require.NoError(t, p.FreeHeld(), name)
		case op == 17:
			require.NoError(t, p.On(qs[rng.IntN(len(qs))]).FreeHeld(), name)
		case op == 18:
			p.ResetPeak()
		case op == 19:
			require.NoError(t, p.SetLimit([]int64{0, 0, 4 << 20, 8 << 20}[rng.IntN(4)]), name)
		}
		snap := p.Snapshot()
		s := p.Stats()
		s41bCheckStats(t, name, s)
		s41bCheckSnapshot(t, name, s, snap)
		var cached int64
		for i, qs := range s.Queues {
			require.GreaterOrEqual(t, qs.Cached, int64(0), "%s: queue %d", name, i)
			cached += qs.Cached
		}
		require.LessOrEqual(t, cached, int64(s.HeldBlocks), name+": blocks cached in the queues are held")
	}
	for _, b := range list {
		require.NoError(t, b.Close())
	}
	s := p.Stats()
	s41bCheckSnapshot(t, "all closed", s, p.Snapshot())
	require.NoError(t, p.FreeHeld())
	s = p.Stats()
	s41bCheckStats(t, "after FreeHeld", s)
	require.Zero(t, s.ActiveBlocks)
	require.Zero(t, s.HeldBlocks, "FreeHeld with nothing active frees every held block")
	require.Zero(t, s.HeldBytes)
	require.Zero(t, s.ManagedBytes)
	require.Zero(t, s.InactiveSplit.All.Current)
	require.Zero(t, s.InactiveSplitBytes.All.Current)
	require.Zero(t, s.Segment.All.Current)
	require.Zero(t, s.OversizeSegments.Current)
	require.Zero(t, s.OversizeAllocations.Current)
	require.Zero(t, count.Stats().Live, "every device buffer freed")
	for i, qs := range s.Queues {
		require.Zero(t, qs.Cached, "queue %d: FreeHeld empties the caches", i)
	}
	s41bCheckSnapshot(t, "after FreeHeld", s, p.Snapshot())
}

// TestHostileS41bSnapshotWhileBusy takes snapshots while goroutines, each
// on a queue of its own (and one on the pool's own Allocate), allocate
// and close, and checks each snapshot against itself and the Stats it
// was taken with: the doc says a snapshot is taken under the pool's lock
// and every queue cache's, so it is one moment of the pool. It passes
// (a regression guard).
func TestHostileS41bSnapshotWhileBusy(t *testing.T) {
	for _, arena := range []bool{false, true} {
		for _, drop := range []bool{false, true} {
			t.Run(fmt.Sprintf("arena=%v/drop=%v", arena, drop), func(t *testing.T) {
				qs, p := s41bPool(t, arena, drop)
				defer p.Close()
				sink := &errSink{}
				stop := make(chan struct{})
				done := make(chan struct{})
				workers := len(qs) + 1
				for g := range workers {
					go func() {
						defer func() { done <- struct{}{} }()
						rng := rand.New(rand.NewPCG(uint64(g), 41))
						var on interface {
							Allocate(int64) (*mempool.PooledBuffer, error)
						} = p
						if g < len(qs) {
							on = p.On(qs[g])
						}
						var held []*mempool.PooledBuffer
						for i := 0; ; i++ {
							select {
							case <-stop:
								for _, b := range held {
									sink.add(b.Close())
								}
								return
							default:
							}
							if len(held) < 6 && rng.IntN(2) == 0 {
								b, err := on.Allocate([]int64{256, 512, 4096, 5000, 70000, 1 << 20}[rng.IntN(6)])
								if err != nil {
									sink.add(err)
									continue
								}
								held = append(held, b)
							} else if len(held) > 0 {
								k := rng.IntN(len(held))
								sink.add(held[k].Close())
								held = append(held[:k], held[k+1:]...)
							}
						}
					}()
				}
				var bad []string
				for i := range cltest.Size(qs[0], 30, 300) {
					snap := p.Snapshot()
					var segBytes, held, activeReq, split int64
					var heldN, activeN, splitN int
					for _, seg := range snap.Segments {
						segBytes += seg.Size
						off := int64(0)
						for _, b := range seg.Blocks {
							if b.Offset != off {
								bad = append(bad, fmt.Sprintf("snapshot %d: segment %d: block at %d, want %d", i, seg.ID, b.Offset, off))
							}
							off = b.Offset + b.Size
							switch b.State {
							case mempool.StateActive:
								activeN++
								activeReq += b.Requested
							case mempool.StateInactiveSplit:
								splitN++
								split += b.Size
								fallthrough
							default:
								heldN++
								held += b.Size
							}
						}
						if off != seg.Size {
							bad = append(bad, fmt.Sprintf("snapshot %d: segment %d: blocks end at %d of %d", i, seg.ID, off, seg.Size))
						}
					}
					if segBytes != snap.ManagedBytes {
						bad = append(bad, fmt.Sprintf("snapshot %d: segments sum to %d, managed %d", i, segBytes, snap.ManagedBytes))
					}
					if activeReq != snap.ActiveBytes {
						bad = append(bad, fmt.Sprintf("snapshot %d: active blocks ask %d, active bytes %d", i, activeReq, snap.ActiveBytes))
					}
					if snap.PeakManagedBytes < snap.ManagedBytes || snap.PeakActiveBytes < snap.ActiveBytes {
						bad = append(bad, fmt.Sprintf("snapshot %d: peaks below the currents", i))
					}
					if len(bad) > 5 {
						break
					}
				}
				close(stop)
				for range workers {
					<-done
				}
				require.NoError(t, sink.err())
				require.Empty(t, bad)
				s := p.Stats()
				require.Zero(t, s.ActiveBlocks)
				require.NoError(t, p.FreeHeld())
				s = p.Stats()
				require.Zero(t, s.HeldBlocks)
				require.Zero(t, s.ManagedBytes)
				s41bCheckStats(t, "idle", s)
			})
		}
	}
}
