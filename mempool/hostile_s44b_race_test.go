package mempool_test

import (
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Expected (held if it passes): oversize requests on several queues,
// racing with ordinary requests (cache hits and misses) and Stats readers,
// keep the counts in agreement: every oversize error is one OOM, one miss
// and one request of its queue; Hits+Misses equals the queues' requests;
// MemoryStats' num_ooms and Summary agree with Stats.
func TestHostileS44bOversizeConcurrentCountsAgree(t *testing.T) {
	cltest.Watchdog(t, 5*time.Minute)
	q := cltest.Queue(t)
	qs := []*cl.CommandQueue{q, cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, 0)}
	p := pooltest.New(t, q)
	max := p.Device().MaxMemAllocSize
	stop := pooltest.ReadStats(t, p, func(i int) {
		if i%7 == 0 {
			_ = p.MemoryStats()
			_ = p.Snapshot()
		}
	})
	var ooms, served atomic.Int64
	var wg sync.WaitGroup
	errs := &errSink{}
	for g := 0; g < 6; g++ {
		on := p.On(qs[g%len(qs)])
		wg.Go(func() {
			for i := 0; i < 150; i++ {
				if (i+g)%3 == 0 {
					_, err := on.Allocate(max + 1 + int64(i))
					if !errors.Is(err, mempool.ErrOutOfMemory) {
						errs.add(err)
						continue
					}
					ooms.Add(1)
					continue
				}
				pb, err := on.Allocate(int64(256 + 64*(i%5)))
				if err != nil {
					errs.add(err)
					continue
				}
				served.Add(1)
				errs.add(pb.Close())
			}
		})
	}
	wg.Wait()
	stop()
	require.NoError(t, errs.err())
	s := p.Stats()
	var req int64
	for _, qs := range s.Queues {
		req += qs.Requests
	}
	assert.Equal(t, ooms.Load(), s.OOMs, "every oversize error is one OOM")
	assert.Equal(t, ooms.Load()+served.Load(), s.Hits+s.Misses, "every request a hit or a miss")
	assert.Equal(t, s.Hits+s.Misses, req, "the queues' requests are the pool's")
	assert.Equal(t, s.OOMs, p.MemoryStats()["num_ooms"])
	var sb strings.Builder
	require.NoError(t, p.WriteSummary(&sb))
	assert.Contains(t, sb.String(), "OOMs: "+strconv.FormatInt(s.OOMs, 10))
}

// Expected (held if it passes): oversize requests racing with the pool's
// Close return ErrPoolClosed or an OOM, nothing else, and every OOM
// returned is counted once; a request made after Close returned gets
// ErrPoolClosed and changes no count; -race finds no data race.
func TestHostileS44bOversizeRacesClose(t *testing.T) {
	cltest.Watchdog(t, 5*time.Minute)
	for round := 0; round < 5; round++ {
		q := cltest.Queue(t)
		q2 := cltest.SecondQueue(t, q, 0)
		imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
		require.NoError(t, err)
		p, err := mempool.New(imm)
		require.NoError(t, err)
		max := p.Device().MaxMemAllocSize
		var ooms atomic.Int64
		var wg sync.WaitGroup
		errs := &errSink{}
		start := make(chan struct{})
		for g := 0; g < 4; g++ {
			on := p.On([]*cl.CommandQueue{q, q2}[g%2])
			wg.Go(func() {
				<-start
				for i := 0; i < 200; i++ {
					if g%2 == 0 {
						pb, err := on.Allocate(512)
						if err == nil {
							errs.add(pb.Close())
						} else if !errors.Is(err, mempool.ErrPoolClosed) {
							errs.add(err)
						}
					}
					_, err := on.Allocate(max + 1)
					switch {
					case errors.Is(err, mempool.ErrOutOfMemory):
						ooms.Add(1)
					case errors.Is(err, mempool.ErrPoolClosed):
					default:
						errs.add(err)
					}
				}
			})
		}
		close(start)
		time.Sleep(time.Duration(round) * time.Millisecond)
		require.NoError(t, p.Close())
		wg.Wait()
		require.NoError(t, errs.err())
		s := p.Stats()
		assert.Equal(t, ooms.Load(), s.OOMs, "round %d: each OOM returned counted once", round)
		_, err = p.Allocate(max + 1)
		require.ErrorIs(t, err, mempool.ErrPoolClosed)
		assert.Equal(t, s, p.Stats(), "a request after Close changes nothing")
		assert.Zero(t, p.Stats().ManagedBytes)
	}
}

// Expected (held if it passes): over an allocator that names no device,
// a request of exactly 2^60 bytes goes down the ladder (here: the limit
// refuses it) and 2^60+1 is refused at once; both are one OOM, one miss
// and one request of the queue, and the second's error says what is
// active and held. A negative size counts nothing, tells no hook, and
// drains nothing.
func TestHostileS44bSizeCapEdges(t *testing.T) {
	q := cltest.Queue(t)
	p, _ := pooltest.NewOver(t, q, func(a allocator.Allocator) allocator.Allocator { return s44aHidden{a} },
		mempool.WithLimit(1<<20))
	require.Nil(t, p.Device())
	log := &recorder{}
	defer p.AddHook(log)()
	active, err := p.Allocate(4096)
	require.NoError(t, err)
	defer func() { require.NoError(t, active.Close()) }()
	for _, size := range []int64{1 << 60, 1<<60 + 1, 1<<63 - 1} {
		before := p.Stats()
		log.take()
		_, err := p.Allocate(size)
		require.ErrorIs(t, err, mempool.ErrOutOfMemory, "%d", size)
		var oom *mempool.OutOfMemoryError
		require.True(t, errors.As(err, &oom))
		after := p.Stats()
		assert.Equal(t, before.OOMs+1, after.OOMs, "%d", size)
		assert.Equal(t, before.Misses+1, after.Misses, "%d", size)
		assert.Equal(t, 1, oom.ActiveBlocks, "%d: %v", size, err)
		assert.Equal(t, []mempool.EventKind{mempool.MallocBefore, mempool.MallocAfter}, kinds(log.take()), "%d", size)
		t.Logf("%d: %v", size, err)
	}
	for _, size := range []int64{-1, -1 << 63} {
		before := p.Stats()
		log.take()
		_, err := p.Allocate(size)
		require.ErrorIs(t, err, cl.ErrInvalidBufferSize)
		assert.NotErrorIs(t, err, mempool.ErrOutOfMemory)
		assert.Equal(t, before, p.Stats(), "a negative size changes nothing")
		assert.Empty(t, kinds(log.take()), "a negative size tells no hook")
	}
}

// Expected (held if it passes): an SVM pool refuses a request over the
// device's largest allocation as a buffer pool does: an OOM, counted once,
// on its queue, matching cl.ErrInvalidBufferSize, its error saying what
// is active.
func TestHostileS44bOversizeSVM(t *testing.T) {
	q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
	a, err := allocator.NewImmediateSVM(q, false)
	require.NoError(t, err)
	p, err := mempool.NewSVM(a)
	require.NoError(t, err)
	defer func() { require.NoError(t, p.Close()) }()
	log := &recorder{}
	defer p.AddHook(log)()
	active, err := p.Allocate(4096)
	require.NoError(t, err)
	defer func() { require.NoError(t, active.Close()) }()
	before := p.Stats()
	log.take()
	_, err = p.On(q).Allocate(p.Device().MaxMemAllocSize + 1)
	require.ErrorIs(t, err, mempool.ErrOutOfMemory)
	require.ErrorIs(t, err, cl.ErrInvalidBufferSize)
	var oom *mempool.OutOfMemoryError
	require.True(t, errors.As(err, &oom))
	assert.Equal(t, 1, oom.ActiveBlocks)
	assert.Equal(t, p.Device().MaxMemAllocSize, oom.DeviceMaxAlloc)
	after := p.Stats()
	assert.Equal(t, before.OOMs+1, after.OOMs)
	assert.Equal(t, before.Misses+1, after.Misses)
	for _, e := range log.take() {
		assert.True(t, e.Queue == q, "%v names queue %p, want %p", e.Kind, e.Queue, q)
	}
}

// Expected (held if it passes): a Set routes an oversize request to its
// context's pool, which counts it once; the Set's Stats sum it.
func TestHostileS44bOversizeSet(t *testing.T) {
	q := cltest.Queue(t)
	s := mempool.NewSet(nil)
	defer func() { require.NoError(t, s.Close()) }()
	_, err := s.On(q).Allocate(q.Device().MaxMemAllocSize + 1)
	require.ErrorIs(t, err, mempool.ErrOutOfMemory)
	assert.Equal(t, int64(1), s.Stats().OOMs)
}
