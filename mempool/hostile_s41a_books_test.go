package mempool_test

import (
	"strings"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s41aCheckBooks checks, on a quiet pool, that every byte of every
// segment is in a block handed out or in one held, as the Stats doc says
// (held: "the policy's free blocks ... and the blocks cached in the
// queues' caches"), and that Snapshot agrees with Stats.
func s41aCheckBooks(t *testing.T, p *mempool.Pool, what string) {
	t.Helper()
	s := p.Stats()
	pooltest.CheckStats(t, s)
	assert.Equal(t, s.ReservedBytes.All.Current, s.AllocatedBytes.All.Current+s.HeldBytes,
		"%s: reserved = allocated + held (%+v)", what, s)
	assert.LessOrEqual(t, s.InactiveSplitBytes.All.Current, s.HeldBytes, what)
	for _, g := range []mempool.StatGroup{s.Allocation, s.AllocatedBytes, s.RequestedBytes, s.InactiveSplit, s.InactiveSplitBytes, s.Segment, s.ReservedBytes} {
		assert.Equal(t, g.All.Current, g.Small.Current+g.Large.Current, what)
		assert.Equal(t, g.All.Allocated, g.Small.Allocated+g.Large.Allocated, what)
		assert.Equal(t, g.All.Freed, g.Small.Freed+g.Large.Freed, what)
		assert.Equal(t, g.All.Current, g.All.Allocated-g.All.Freed, what)
		assert.GreaterOrEqual(t, g.All.Peak, g.All.Current, what)
		assert.LessOrEqual(t, g.All.Peak, g.Small.Peak+g.Large.Peak, what)
	}
	snap := p.Snapshot()
	var active, held, split, heldBytes, splitBytes, reserved int64
	var activeReq int64
	for _, seg := range snap.Segments {
		reserved += seg.Size
		var cover int64
		for _, b := range seg.Blocks {
			cover += b.Size
			switch b.State {
			case mempool.StateActive:
				active++
				activeReq += b.Requested
			case mempool.StateHeld:
				held++
				heldBytes += b.Size
			case mempool.StateInactiveSplit:
				split++
				splitBytes += b.Size
			}
		}
		assert.Equal(t, seg.Size, cover, "%s: the blocks cover segment %d", what, seg.ID)
	}
	assert.Equal(t, s.ManagedBytes, reserved, "%s: snapshot's segments", what)
	assert.Equal(t, s.ManagedBytes, snap.ManagedBytes, what)
	assert.Equal(t, int64(s.ActiveBlocks), active, "%s: snapshot's active blocks", what)
	assert.Equal(t, s.ActiveBytes, activeReq, "%s: snapshot's requested bytes", what)
	assert.Equal(t, int64(s.HeldBlocks), held+split, "%s: snapshot's held blocks", what)
	assert.Equal(t, s.HeldBytes, heldBytes+splitBytes, "%s: snapshot's held bytes", what)
	assert.Equal(t, s.InactiveSplitBytes.All.Current, splitBytes, "%s: snapshot's inactive split bytes", what)
	assert.Equal(t, s.InactiveSplit.All.Current, split, "%s: snapshot's inactive split blocks", what)
}

// s41aWorkload allocates and frees a mix of sizes on two queues, checking
// the books after each phase.
func s41aWorkload(t *testing.T, p *mempool.Pool, q *cl.CommandQueue) {
	q2 := cltest.SecondQueue(t, q, 0)
	on1, on2 := p.On(q), p.On(q2)
	var open []*mempool.PooledBuffer
	sizes := []int64{1, 512, 4000, 70000, 300000, 1 << 20, 3 << 20}
	for i, n := range sizes {
		on := on1
		if i%2 == 1 {
			on = on2
		}
		for range 3 {
			b, err := on.Allocate(n)
			require.NoError(t, err)
			open = append(open, b)
		}
	}
	s41aCheckBooks(t, p, "all open")
	for i := 0; i < len(open); i += 2 {
		require.NoError(t, open[i].Close())
	}
	s41aCheckBooks(t, p, "half closed")
	for i, n := range sizes {
		on := on2
		if i%2 == 1 {
			on = on1
		}
		b, err := on.Allocate(n)
		require.NoError(t, err)
		open = append(open, b)
	}
	s41aCheckBooks(t, p, "reallocated")
	for i := 1; i < len(open); i += 2 {
		require.NoError(t, open[i].Close())
	}
	s41aCheckBooks(t, p, "more closed")
	for i := 0; i < len(open); i += 2 {
		_ = open[i].Close()
	}
	s41aCheckBooks(t, p, "all closed")
	require.NoError(t, on1.FreeHeld())
	s41aCheckBooks(t, p, "queue FreeHeld")
	require.NoError(t, p.FreeHeld())
	s41aCheckBooks(t, p, "FreeHeld")
}

// PASSES (regression guard): on a quiet pool of every configuration,
// Stats' reserved bytes are its allocated plus held bytes, its groups sum,
// and Snapshot shows what Stats counts.
func TestS41aBooksBalanceEveryConfiguration(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []mempool.Option
	}{
		{"bins", nil},
		{"arena", []mempool.Option{mempool.WithArena()}},
		{"arena-split", []mempool.Option{mempool.WithArena(), mempool.WithMaxSplitSize(1 << 20)}},
		{"bins-nodrop", []mempool.Option{mempool.WithDropSafety(false)}},
		{"arena-limit", []mempool.Option{mempool.WithArena(), mempool.WithLimit(32 << 20)}},
		{"bins-san", []mempool.Option{mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil)}},
		{"arena-san", []mempool.Option{mempool.WithArena(), mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := cltest.Queue(t)
			p := pooltest.New(t, q, c.opts...)
			s41aWorkload(t, p, q)
		})
		t.Run(c.name+"-pinned", func(t *testing.T) {
			if strings.HasSuffix(c.name, "san") {
				t.Skip("no sanitizer over pinned memory")
			}
			q := cltest.Queue(t)
			pin, err := allocator.NewPinned(q)
			require.NoError(t, err)
			p, err := mempool.New(pin, c.opts...)
			require.NoError(t, err)
			defer func() { assert.NoError(t, p.Close()); assert.Zero(t, pin.Live()) }()
			s41aWorkload(t, p, q)
		})
		t.Run(c.name+"-svm", func(t *testing.T) {
			f := newSVMFixture(t, false, nil, c.opts...)
			s41aWorkload(t, f.pool, f.q)
		})
	}
}
