package mempool_test

// Hostile review s33e: docs that lie. Each test checks one concrete
// promise of README.md, mempool/doc.go or a doc comment, literally.
// Every test here PASSES on this code (the promise holds) except
// TestHostileS33EMostRecentOrOwnQueue, which fails: Pool.Allocate's doc
// promises the bin's most recently given back block, and a request on
// another queue gets an older block of its own queue.

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PASSES. buffer.go: "It is 32 bytes, a size class of its own".
func TestHostileS33EPooledBufferIs32Bytes(t *testing.T) {
	assert.EqualValues(t, 32, unsafe.Sizeof(mempool.PooledBuffer{}))
}

// PASSES. Pool.Close: "Close is idempotent: a second Close frees nothing
// more and returns nil"; Stats.Holding: "false after StopHolding or Close".
func TestHostileS33ECloseTwiceAndHolding(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	p, err := mempool.New(imm, mempool.WithLimit(0))
	require.NoError(t, err)
	assert.True(t, p.Stats().Holding)
	b, err := p.Allocate(100)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.NoError(t, p.Close())
	assert.False(t, p.Stats().Holding)
	assert.NoError(t, p.Close())
	_, err = p.Allocate(1)
	assert.ErrorIs(t, err, mempool.ErrPoolClosed)

	p2, err := mempool.New(imm, mempool.WithLimit(0))
	require.NoError(t, err)
	require.NoError(t, p2.StopHolding())
	assert.False(t, p2.Stats().Holding)
	require.NoError(t, p2.Close())
}

// PASSES. doc.go, Many goroutines: "up to 16 small blocks (1 MiB at most)
// given back on it wait there"; Blocks in a cache count as held.
func TestHostileS33EQueueCacheHolds16(t *testing.T) {
	f := newFixture(t, nil, mempool.WithLimit(0))
	on := f.pool.On(f.q, mempool.QueueName("w"))
	var bs []*mempool.PooledBuffer
	for range 20 {
		b, err := on.Allocate(4096)
		require.NoError(t, err)
		bs = append(bs, b)
	}
	for _, b := range bs {
		require.NoError(t, b.Close())
	}
	s := f.pool.Stats()
	var cached int64 = -1
	for _, qs := range s.Queues {
		if qs.Name == "w" {
			cached = qs.Cached
		}
	}
	assert.EqualValues(t, 16, cached)
	assert.Equal(t, 20, s.HeldBlocks)

	big, err := on.Allocate(2 << 20)
	require.NoError(t, err)
	require.NoError(t, big.Close())
	for _, qs := range f.pool.Stats().Queues {
		if qs.Name == "w" {
			assert.EqualValues(t, 16, qs.Cached, "a 2 MiB block is not cached")
		}
	}
}

// PASSES. Pool.Allocate: "Allocate(0) returns a real block (1 byte with
// bins...)"; PooledBuffer.Buffer: "with exact bins, the bin's AllocSize".
func TestHostileS33EAllocateZeroBins(t *testing.T) {
	f := newFixture(t, nil, mempool.WithLimit(0))
	b, err := f.pool.Allocate(0)
	require.NoError(t, err)
	require.NotNil(t, b.Buffer())
	assert.EqualValues(t, 1, b.Buffer().Size())
	assert.EqualValues(t, 0, b.Size())
	require.NoError(t, b.Close())
}

// PASSES. MemoryStats: torch's key names, "num_sync_all_streams" always 0.
func TestHostileS33EMemoryStatsKeys(t *testing.T) {
	f := newFixture(t, nil, mempool.WithLimit(0))
	b, err := f.pool.Allocate(100)
	require.NoError(t, err)
	m := f.pool.MemoryStats()
	for _, k := range []string{"allocated_bytes.all.current", "segment.large_pool.peak", "num_ooms", "num_alloc_retries", "num_device_alloc", "num_device_free", "num_sync_all_streams"} {
		_, ok := m[k]
		assert.True(t, ok, k)
	}
	assert.Zero(t, m["num_sync_all_streams"])
	require.NoError(t, b.Close())
}

// PASSES. PooledBuffer misuse: after Close Buffer and Base return nil,
// Offset 0, RecordQueue ErrClosed, a second Close ErrClosed.
func TestHostileS33EAfterClose(t *testing.T) {
	f := newFixture(t, nil, mempool.WithLimit(0), mempool.WithArena())
	b, err := f.pool.Allocate(1000)
	require.NoError(t, err)
	c, err := f.pool.Allocate(1000)
	require.NoError(t, err)
	assert.NotZero(t, c.Offset())
	require.NoError(t, c.Close())
	assert.Nil(t, c.Buffer())
	assert.Nil(t, c.Base())
	assert.Zero(t, c.Offset())
	assert.ErrorIs(t, c.RecordQueue(f.q), mempool.ErrClosed)
	assert.ErrorIs(t, c.Close(), mempool.ErrClosed)
	assert.True(t, c.Closed())
	require.NoError(t, b.Close())
}

// PASSES. SanitizeEnv: "1" (or "true") turns it on, "0", "false" or
// empty leaves it off; any other value makes New fail.
func TestHostileS33ESanitizeEnv(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	for _, tc := range []struct {
		v  string
		on bool
		ok bool
	}{{"1", true, true}, {"true", true, true}, {"0", false, true}, {"false", false, true}, {"", false, true}, {"yes", false, false}, {"TRUE", false, false}} {
		t.Setenv(mempool.SanitizeEnv, tc.v)
		p, err := mempool.New(imm, mempool.WithLimit(0), mempool.WithSanitizerOutput(nil))
		if !tc.ok {
			assert.Error(t, err, "%q", tc.v)
			continue
		}
		require.NoError(t, err, "%q", tc.v)
		assert.Equal(t, tc.on, p.Findings() != nil || sanitized(t, p), "%q", tc.v)
		require.NoError(t, p.Close())
	}
}

// sanitized tells a sanitized pool by its guard bytes: a block's buffer
// of a sanitized pool is at least SanitizerGuard bytes past the request.
func sanitized(t *testing.T, p *mempool.Pool) bool {
	b, err := p.Allocate(4096)
	require.NoError(t, err)
	defer b.Close()
	return b.Buffer().Size() >= 4096+mempool.SanitizerGuard
}

// PASSES. LimitEnv: bytes, "512MB" (decimal), "2GiB", "50%" of the
// device's global memory; "0" refused.
func TestHostileS33ELimitEnvForms(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	total := int64(q.Device().GlobalMemSize)
	for _, tc := range []struct {
		v    string
		want int64
	}{{"1073741824", 1 << 30}, {"512MB", 512e6}, {"2GiB", 2 << 30}, {"50%", total / 2}, {" 1K ", 1024}} {
		t.Setenv(mempool.LimitEnv, tc.v)
		p, err := mempool.New(imm)
		require.NoError(t, err, tc.v)
		assert.InDelta(t, tc.want, p.Limit(), 1, tc.v)
		require.NoError(t, p.Close())
	}
	for _, bad := range []string{"0", "0%", "-1", "abc", "150%"} {
		t.Setenv(mempool.LimitEnv, bad)
		_, err := mempool.New(imm)
		assert.Error(t, err, bad)
	}
	// WithLimit wins over the environment.
	t.Setenv(mempool.LimitEnv, "abc")
	p, err := mempool.New(imm, mempool.WithLimit(5000))
	require.NoError(t, err)
	assert.EqualValues(t, 5000, p.Limit())
	require.NoError(t, p.Close())
}

// PASSES. Set: SetLimit of a nil context is an error; after Close,
// SetLimit and Pool return ErrPoolClosed; MemoryStats keys are prefixed
// "device.<i>.".
func TestHostileS33ESetDocs(t *testing.T) {
	q := cltest.Queue(t)
	s := mempool.NewSet(nil, mempool.WithLimit(0))
	b, err := s.On(q).Allocate(100)
	require.NoError(t, err)
	m := s.MemoryStats()
	_, ok := m["device.0.allocated_bytes.all.current"]
	assert.True(t, ok)
	assert.EqualValues(t, 1, s.Stats().ActiveBlocks)
	assert.Error(t, s.SetLimit(nil, 1))
	require.NoError(t, b.Close())
	require.NoError(t, s.Close())
	assert.ErrorIs(t, s.SetLimit(q.Context(), 1), mempool.ErrPoolClosed)
	_, err = s.Pool(q)
	assert.ErrorIs(t, err, mempool.ErrPoolClosed)
	_, err = s.On(q).Allocate(1)
	assert.ErrorIs(t, err, mempool.ErrPoolClosed)
	assert.NoError(t, s.Close())
}

// s33eNoDevice hides the allocator's context: an allocator that names no
// device.
type s33eNoDevice struct{ a allocator.Allocator }

func (n s33eNoDevice) Allocate(size int64) (*cl.Buffer, error) { return n.a.Allocate(size) }
func (n s33eNoDevice) Free(b *cl.Buffer) error                 { return n.a.Free(b) }

// PASSES. Pool.Allocate: "a size over the device's largest buffer (over an
// allocator that names no device, over 2^60 bytes) is an
// *OutOfMemoryError at once, counted and told to the hooks".
func TestHostileS33EOverTwoTo60NoDevice(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	p, err := mempool.New(s33eNoDevice{imm}, mempool.WithLimit(0))
	require.NoError(t, err)
	defer p.Close()
	assert.Nil(t, p.Device())
	var mallocErr error
	remove := p.AddHook(mempool.HookFunc(func(e mempool.Event) {
		if e.Kind == mempool.MallocAfter {
			mallocErr = e.Err
		}
	}))
	_, err = p.Allocate(1<<60 + 1)
	remove()
	var oom *mempool.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.ErrorIs(t, err, cl.ErrInvalidBufferSize)
	assert.EqualValues(t, 1, p.Stats().OOMs)
	assert.Error(t, mallocErr)
	assert.Zero(t, p.Stats().DeviceAllocs)
}

// PASSES. README: a request over the device's largest buffer "fails at once
// with an error matching both mempool.ErrOutOfMemory and
// cl.ErrInvalidBufferSize, keeping the cache"; OutOfMemoryError.Err "nil if
// the limit refused".
func TestHostileS33EOverMaxAllocKeepsCache(t *testing.T) {
	f := newFixture(t, nil, mempool.WithLimit(1<<20))
	b, err := f.pool.Allocate(4096)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	before := f.pool.Stats()
	_, err = f.pool.Allocate(int64(f.q.Device().MaxMemAllocSize) + 1)
	assert.ErrorIs(t, err, mempool.ErrOutOfMemory)
	assert.ErrorIs(t, err, allocator.ErrOutOfMemory)
	assert.ErrorIs(t, err, cl.ErrInvalidBufferSize)
	var oom *mempool.OutOfMemoryError
	require.ErrorAs(t, err, &oom)
	assert.EqualValues(t, f.q.Device().MaxMemAllocSize, oom.DeviceMaxAlloc)
	after := f.pool.Stats()
	assert.Equal(t, before.HeldBlocks, after.HeldBlocks)
	assert.Equal(t, before.DeviceFrees, after.DeviceFrees)

	_, err = f.pool.Allocate(2 << 20) // the limit refuses
	require.ErrorAs(t, err, &oom)
	assert.Nil(t, oom.Err)
	assert.Nil(t, errors.Unwrap(err))
}

// PASSES. QueueName: "a later On of the same queue with another QueueName
// renames it, and one with "" takes its name away".
func TestHostileS33EQueueNameEmptyTakesItAway(t *testing.T) {
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	p, _ := pooltest.NewOver(t, q, nil, mempool.WithLimit(0))
	f := &fixture{q: q, pool: p}
	b, err := f.pool.On(q2, mempool.QueueName("copy")).Allocate(10)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	name := func() string {
		for _, qs := range f.pool.Stats().Queues {
			if qs.Queue == q2 {
				return qs.Name
			}
		}
		return "?"
	}
	assert.Equal(t, "copy", name())
	f.pool.On(q2, mempool.QueueName("other"))
	assert.Equal(t, "other", name())
	f.pool.On(q2, mempool.QueueName(""))
	assert.Equal(t, "", name())
}

// PASSES. WriteSummary: "B below 768 KiB, KiB below 768 MiB".
func TestHostileS33ESummaryUnits(t *testing.T) {
	f := newFixture(t, nil, mempool.WithLimit(0))
	b, err := f.pool.Allocate(700 << 10) // bins: 700 KiB's bin is under 768 KiB
	require.NoError(t, err)
	alloc := mempool.AllocSize(mempool.BinNumber(700<<10, 4), 4)
	require.Less(t, alloc, int64(768<<10))
	var w bytes.Buffer
	require.NoError(t, f.pool.WriteSummary(&w))
	line := ""
	for l := range strings.SplitSeq(w.String(), "\n") {
		if strings.HasPrefix(l, "| Allocated memory") {
			line = l
		}
	}
	assert.Contains(t, line, " B ", line)
	require.NoError(t, b.Close())
}

// PASSES. ResetPeak: "sets every peak to its current value";
// ResetAccumulated zeroes totals, queues' too.
func TestHostileS33EResets(t *testing.T) {
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	p, err := mempool.New(imm, mempool.WithLimit(0))
	require.NoError(t, err)
	defer p.Close()
	f := &fixture{q: q, pool: p}
	b, err := f.pool.On(f.q).Allocate(1 << 20)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	f.pool.ResetPeak()
	s := f.pool.Stats()
	assert.Equal(t, s.ActiveBytes, s.PeakActiveBytes)
	assert.Equal(t, s.ManagedBytes, s.PeakManagedBytes)
	assert.Equal(t, s.AllocatedBytes.All.Current, s.AllocatedBytes.All.Peak)
	f.pool.ResetAccumulated()
	s = f.pool.Stats()
	assert.Zero(t, s.Hits+s.Misses+s.DeviceAllocs+s.DeviceFrees)
	assert.Zero(t, s.AllocatedBytes.All.Allocated)
	for _, qs := range s.Queues {
		assert.Zero(t, qs.Requests+qs.Hits+qs.Handovers+qs.Markers+qs.HostWaits)
	}
	assert.NotZero(t, s.ManagedBytes, "the segment stays")
}

// PASSES. Snapshot: Policy "bins" or "arena"; segment ids 1, 2, ... in
// the order the pool allocated them.
func TestHostileS33ESnapshotPolicy(t *testing.T) {
	for _, arena := range []bool{false, true} {
		f := newFixture(t, nil, append(policyOptions(arena), mempool.WithLimit(0))...)
		b, err := f.pool.Allocate(100)
		require.NoError(t, err)
		c, err := f.pool.Allocate(3 << 20)
		require.NoError(t, err)
		snap := f.pool.Snapshot()
		assert.Equal(t, map[bool]string{false: "bins", true: "arena"}[arena], snap.Policy)
		for i, seg := range snap.Segments {
			assert.EqualValues(t, i+1, seg.ID)
		}
		require.NoError(t, b.Close())
		require.NoError(t, c.Close())
	}
}

// PASSES. FindingKind and EventKind names.
func TestHostileS33EKindNames(t *testing.T) {
	assert.Equal(t, "out-of-bounds", mempool.OutOfBounds.String())
	assert.Equal(t, "write-after-close", mempool.WriteAfterClose.String())
	assert.Equal(t, "dropped", mempool.Dropped.String())
	assert.Equal(t, "leaked-at-close", mempool.LeakedAtClose.String())
	want := []string{"alloc_before", "alloc_after", "malloc_before", "malloc_after", "free_before", "free_after", "segment_free"}
	for i, w := range want {
		assert.Equal(t, w, mempool.EventKind(i).String())
	}
}

// arenaPool is an arena pool, no limit, over a counting Immediate.
func arenaPool(t *testing.T, opts ...mempool.Option) *fixture {
	return newFixture(t, nil, append([]mempool.Option{mempool.WithArena(), mempool.WithLimit(0)}, opts...)...)
}

// PASSES. doc.go, Arena: "the first is 512 KiB"; "Tiny requests ... take
// blocks of tiny segments (4 KiB, or eight blocks, at first"; "Blocks are
// aligned to the device's base-address alignment, at least 512 bytes".
func TestHostileS33EArenaFirstSegments(t *testing.T) {
	f := arenaPool(t)
	tiny, err := f.pool.Allocate(1)
	require.NoError(t, err)
	assert.EqualValues(t, 4096, f.pool.Stats().ManagedBytes, "a tiny segment first: 4 KiB (eight 512-byte blocks)")
	a, err := f.pool.Allocate(1000)
	require.NoError(t, err)
	assert.EqualValues(t, 4096+512<<10, f.pool.Stats().ManagedBytes, "the first segment")
	b, err := f.pool.Allocate(1000)
	require.NoError(t, err)
	assert.Zero(t, b.Offset()%512, "aligned to at least 512")
	assert.GreaterOrEqual(t, b.Offset(), int64(1000))
	for _, x := range []*mempool.PooledBuffer{a, b, tiny} {
		require.NoError(t, x.Close())
	}
}

// doc.go, Arena: "a request larger than that gets a segment of its own
// size, rounded to 4 KiB".
func TestHostileS33EArenaOwnSegmentRoundedTo4KiB(t *testing.T) {
	f := arenaPool(t)
	const size = 600<<10 + 1
	b, err := f.pool.Allocate(size)
	require.NoError(t, err)
	want := (int64(size) + 4095) / 4096 * 4096
	assert.EqualValues(t, want, f.pool.Stats().ManagedBytes)
	require.NoError(t, b.Close())
}

// doc.go, Arena: "one over 128 MiB always does" (a segment of its own size,
// rounded to 4 KiB).
func TestHostileS33EArenaHugeOwnSegment(t *testing.T) {
	f := arenaPool(t)
	if f.q.Device().MaxMemAllocSize < 200<<20 {
		t.Skip("device too small")
	}
	const size = 128<<20 + 5000
	b, err := f.pool.Allocate(size)
	require.NoError(t, err)
	want := (int64(size) + 4095) / 4096 * 4096
	assert.EqualValues(t, want, f.pool.Stats().ManagedBytes)
	require.NoError(t, b.Close())
}

// PASSES. WithMaxSplitSize: "requests over n bytes ... each gets a segment
// of its own that is never split, and only oversize requests reuse it".
func TestHostileS33EMaxSplitSize(t *testing.T) {
	f := arenaPool(t, mempool.WithMaxSplitSize(1<<20))
	small, err := f.pool.Allocate(1000)
	require.NoError(t, err)
	big, err := f.pool.Allocate(2 << 20)
	require.NoError(t, err)
	s := f.pool.Stats()
	assert.EqualValues(t, 2<<20+512<<10, s.ManagedBytes)
	assert.EqualValues(t, 1, s.OversizeSegments.Current)
	assert.EqualValues(t, 1, s.OversizeAllocations.Current)
	assert.EqualValues(t, 1<<20, s.MaxSplitSize)
	require.NoError(t, big.Close())
	big2, err := f.pool.Allocate(1<<20 + 1)
	require.NoError(t, err)
	assert.EqualValues(t, 2, f.pool.Stats().DeviceAllocs, "an oversize request reuses the oversize segment")
	require.NoError(t, big2.Close())
	require.NoError(t, small.Close())
}

// Set docs: NewSet "The options are checked when the first pool is made: a
// bad one fails the first request"; "if it panics, the request fails with
// an error matching ErrPanicked, and no pool is made"; Set.On "A nil
// queue ... give an allocator whose Allocate and FreeHeld return the
// error"; SetLimit before the pool exists applies "when it is made, in
// place of the limit of the Set's options".
func TestHostileS33ESetMore(t *testing.T) {
	q := cltest.Queue(t)
	bad := mempool.NewSet(nil, mempool.WithLeadingBits(-1))
	_, err := bad.On(q).Allocate(10)
	assert.Error(t, err)
	require.NoError(t, bad.Close())

	panicky := mempool.NewSet(func(*cl.CommandQueue) (allocator.Allocator, error) { panic("boom") })
	_, err = panicky.On(q).Allocate(10)
	assert.ErrorIs(t, err, mempool.ErrPanicked)
	assert.Empty(t, panicky.Stats().Devices, "no pool is made")
	require.NoError(t, panicky.Close())

	s := mempool.NewSet(nil, mempool.WithLimit(1<<30))
	nilOn := s.On(nil)
	_, err = nilOn.Allocate(10)
	assert.Error(t, err)
	assert.Error(t, nilOn.FreeHeld())
	require.NoError(t, s.SetLimit(q.Context(), 12345))
	p, err := s.Pool(q)
	require.NoError(t, err)
	assert.EqualValues(t, 12345, p.Limit())
	require.NoError(t, s.Close())
}

// Set: "WithLimitFraction among the Set's options gives each pool that
// fraction of its own device's memory".
func TestHostileS33ESetLimitFraction(t *testing.T) {
	q := cltest.Queue(t)
	s := mempool.NewSet(nil, mempool.WithLimitFraction(0.25))
	p, err := s.Pool(q)
	require.NoError(t, err)
	assert.EqualValues(t, int64(0.25*float64(q.Device().GlobalMemSize)), p.Limit())
	require.NoError(t, s.Close())
}

// doc.go: "A registered hook turns the caches off while it is registered,
// so that it sees every block".
func TestHostileS33EHookTurnsCachesOff(t *testing.T) {
	f := newFixture(t, nil, mempool.WithLimit(0))
	var frees int
	remove := f.pool.AddHook(mempool.HookFunc(func(e mempool.Event) {
		if e.Kind == mempool.FreeAfter {
			frees++
		}
	}))
	on := f.pool.On(f.q, mempool.QueueName("h"))
	for range 3 {
		b, err := on.Allocate(4096)
		require.NoError(t, err)
		require.NoError(t, b.Close())
	}
	remove()
	assert.Equal(t, 3, frees)
	for _, qs := range f.pool.Stats().Queues {
		assert.Zero(t, qs.Cached, qs.Name)
	}
	assert.EqualValues(t, 2, f.pool.Stats().Hits)
}

// AddHook: "Hooks are called in the order they were added."; Event docs:
// malloc events surround every Allocate; alloc events a device allocation.
func TestHostileS33EHookOrderAndEvents(t *testing.T) {
	f := newFixture(t, nil, mempool.WithLimit(0))
	var got []string
	for _, name := range []string{"1", "2"} {
		f.pool.AddHook(mempool.HookFunc(func(e mempool.Event) { got = append(got, name+":"+e.Kind.String()) }))
	}
	b, err := f.pool.Allocate(100)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	assert.Equal(t, []string{
		"1:malloc_before", "2:malloc_before",
		"1:alloc_before", "2:alloc_before", "1:alloc_after", "2:alloc_after",
		"1:malloc_after", "2:malloc_after",
		"1:free_before", "2:free_before", "1:free_after", "2:free_after",
	}, got)
}

// PASSES. SmallBlock: "with exact bins, a block under SmallBlock" is small;
// doc.go ladder: "a request of 1 MiB takes 1,114,111 bytes".
func TestHostileS33EBinsSmallLarge(t *testing.T) {
	assert.EqualValues(t, 1114111, mempool.AllocSize(mempool.BinNumber(1<<20, 4), 4))
	f := newFixture(t, nil, mempool.WithLimit(0))
	a, err := f.pool.Allocate(1<<20 - 1)
	require.NoError(t, err)
	b, err := f.pool.Allocate(1 << 20)
	require.NoError(t, err)
	s := f.pool.Stats()
	assert.EqualValues(t, 1, s.Allocation.Small.Current)
	assert.EqualValues(t, 1, s.Allocation.Large.Current)
	assert.EqualValues(t, 1114111, s.AllocatedBytes.Large.Current)
	snap := f.pool.Snapshot()
	require.Len(t, snap.Segments, 2)
	assert.True(t, snap.Segments[0].Small)
	assert.False(t, snap.Segments[1].Small)
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
}

// PASSES. WithLimit: "A request whose own block could not fit even in an
// empty pool fails at once, keeping what the pool holds"; SetLimit: "frees
// held segments, largest first, until it is within the limit".
func TestHostileS33ELimitKeepsAndSetLimitLargestFirst(t *testing.T) {
	f := newFixture(t, nil, mempool.WithLimit(1<<20))
	x, err := f.pool.Allocate(4096)
	require.NoError(t, err)
	require.NoError(t, x.Close())
	_, err = f.pool.Allocate(1 << 20)
	assert.ErrorIs(t, err, mempool.ErrOutOfMemory)
	s := f.pool.Stats()
	assert.Equal(t, 1, s.HeldBlocks, "kept")
	assert.Zero(t, s.DeviceFrees)
	require.NoError(t, f.pool.SetLimit(0))

	var bs []*mempool.PooledBuffer
	for _, n := range []int64{64 << 10, 1 << 20} {
		b, err := f.pool.Allocate(n)
		require.NoError(t, err)
		bs = append(bs, b)
	}
	for _, b := range bs {
		require.NoError(t, b.Close())
	}
	managed := f.pool.Stats().ManagedBytes
	require.NoError(t, f.pool.SetLimit(managed-1))
	s = f.pool.Stats()
	assert.Equal(t, 2, s.HeldBlocks, "only the largest went")
	assert.EqualValues(t, managed-1114111, s.ManagedBytes)
	assert.EqualValues(t, managed-1, f.pool.Limit())
	assert.Error(t, f.pool.SetLimit(-1))
	assert.EqualValues(t, managed-1, f.pool.Limit(), "a negative limit changes nothing")
}

// FAILED on c81ac60 as a doc defect: Pool.Allocate's doc said "the most
// recently given back block of size's bin", against doc.go, Queues:
// "Requests prefer a block that only their queue may still use." The code
// keeps the latter (no marker and barrier at the handover), and
// Allocate's doc now says so: with the bin's most recent block given back
// on another queue, a request on the allocator's queue takes its own.
func TestHostileS33EMostRecentOrOwnQueue(t *testing.T) {
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	p, _ := pooltest.NewOver(t, q, nil, mempool.WithLimit(0)) // the defaults (WithoutQueueCaches does the same)
	a, err := p.Allocate(4096)                                // on q, the allocator's queue
	require.NoError(t, err)
	b, err := p.On(q2).Allocate(4096)
	require.NoError(t, err)
	aBuf := a.Base()
	require.NoError(t, a.Close())
	require.NoError(t, b.Close()) // the most recently given back, on q2
	c, err := p.Allocate(4096)    // on q
	require.NoError(t, err)
	assert.Same(t, aBuf, c.Base(), "Pool.Allocate doc: of the blocks only the allocator's queue may still use first")
	require.NoError(t, c.Close())
}

// PooledBuffer.Close: "After StopHolding, Close frees the block's segment
// once it is wholly free"; StopHolding: "Allocate still works".
func TestHostileS33EStopHoldingThenClose(t *testing.T) {
	for _, arena := range []bool{false, true} {
		f := newFixture(t, nil, append(policyOptions(arena), mempool.WithLimit(0))...)
		require.NoError(t, f.pool.StopHolding())
		for _, alloc := range []func(int64) (*mempool.PooledBuffer, error){f.pool.Allocate, f.pool.On(f.q).Allocate} {
			b, err := alloc(4096)
			require.NoError(t, err)
			require.NoError(t, b.Close())
			s := f.pool.Stats()
			assert.Zero(t, s.ManagedBytes, "arena %v", arena)
			assert.Zero(t, s.HeldBlocks, "arena %v", arena)
			assert.Equal(t, s.DeviceAllocs, s.DeviceFrees, "arena %v", arena)
		}
	}
}

// QueueAllocator.FreeHeld: "frees the pool's wholly free segments that
// only the allocator's queue may still use ... It first gives every
// queue's cache back to the pool."
func TestHostileS33EQueueFreeHeld(t *testing.T) {
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	p, _ := pooltest.NewOver(t, q, nil, mempool.WithLimit(0))
	on1, on2 := p.On(q), p.On(q2)
	a, err := on1.Allocate(4096)
	require.NoError(t, err)
	b, err := on2.Allocate(64 << 10)
	require.NoError(t, err)
	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	require.NoError(t, on1.FreeHeld())
	s := p.Stats()
	assert.Equal(t, 1, s.HeldBlocks, "q2's block stays")
	assert.EqualValues(t, mempool.AllocSize(mempool.BinNumber(64<<10, 4), 4), s.HeldBytes)
	for _, qs := range s.Queues {
		assert.Zero(t, qs.Cached, "the caches went back to the pool")
	}
	require.NoError(t, p.FreeHeld())
	assert.Zero(t, p.Stats().ManagedBytes)
}

// PASSES. Pool.On: "On a closed pool, On of a queue the pool does not know
// registers nothing: its allocator's Allocate returns ErrPoolClosed".
func TestHostileS33EOnClosedPool(t *testing.T) {
	q := cltest.Queue(t)
	q2 := cltest.SecondQueue(t, q, 0)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	p, err := mempool.New(imm, mempool.WithLimit(0))
	require.NoError(t, err)
	require.NoError(t, p.Close())
	n := len(p.Stats().Queues)
	_, err = p.On(q2).Allocate(10)
	assert.ErrorIs(t, err, mempool.ErrPoolClosed)
	assert.Len(t, p.Stats().Queues, n)
}

// PASSES. Event: BlockID "(malloc_after and free events); 0 otherwise";
// Buffer "nil before an allocation"; Queue "nil ... in segment_free events".
func TestHostileS33EEventFields(t *testing.T) {
	f := newFixture(t, nil, mempool.WithLimit(0))
	var evs []mempool.Event
	remove := f.pool.AddHook(mempool.HookFunc(func(e mempool.Event) { evs = append(evs, e) }))
	b, err := f.pool.On(f.q).Allocate(100)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.NoError(t, f.pool.FreeHeld())
	remove()
	seen := map[mempool.EventKind]bool{}
	for _, e := range evs {
		seen[e.Kind] = true
		switch e.Kind {
		case mempool.MallocAfter, mempool.FreeBefore, mempool.FreeAfter:
			assert.Equal(t, b.ID(), e.BlockID, e.Kind.String())
			assert.Same(t, f.q, e.Queue, e.Kind.String())
		default:
			assert.Zero(t, e.BlockID, e.Kind.String())
		}
		if e.Kind == mempool.AllocBefore || e.Kind == mempool.MallocBefore {
			assert.Nil(t, e.Buffer, e.Kind.String())
		}
		if e.Kind == mempool.SegmentFree {
			assert.Nil(t, e.Queue)
			assert.NotNil(t, e.Buffer)
		}
	}
	assert.Len(t, seen, 7)
}

// Hook: "A pool calls its hooks ... outside the pool's lock: a hook ...
// may call the pool's read-only methods (Stats)". Every read-only method,
// from every event, on every path (hit, miss, FreeHeld, SetLimit, the
// ladder, Close).
func TestHostileS33EHookCallsReadOnlyMethods(t *testing.T) {
	for _, arena := range []bool{false, true} {
		q := cltest.Queue(t)
		imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
		require.NoError(t, err)
		p, err := mempool.New(allocator.NewBudget(imm, 4<<20), append(policyOptions(arena), mempool.WithLimit(0))...)
		require.NoError(t, err)
		p.AddHook(mempool.HookFunc(func(mempool.Event) {
			_ = p.Stats()
			_ = p.Snapshot()
			_ = p.MemoryStats()
			_, _ = p.LargestHeldBin()
			_ = p.Limit()
			_ = p.HeldBytes()
		}))
		ok := within(t, "a pool whose hook reads it", func() {
			on := p.On(q)
			var bs []*mempool.PooledBuffer
			for _, n := range []int64{100, 4096, 1 << 20, 100} {
				if b, err := on.Allocate(n); err == nil {
					bs = append(bs, b)
				}
			}
			_, _ = p.Allocate(8 << 20) // the ladder, then out of memory
			for _, b := range bs {
				_ = b.Close()
			}
			_ = p.SetLimit(1 << 20)
			_ = p.FreeHeld()
			_ = p.Close()
		})
		if !ok {
			return
		}
	}
}
