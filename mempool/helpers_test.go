package mempool_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/require"
)

// errSink collects the errors of several goroutines: add is safe for
// concurrent use, and drops nil.
type errSink struct {
	mu   sync.Mutex
	errs []error
}

func (s *errSink) add(err error) {
	if err != nil {
		s.mu.Lock()
		s.errs = append(s.errs, err)
		s.mu.Unlock()
	}
}

// err returns the errors added, joined (nil if none).
func (s *errSink) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(s.errs...)
}

// fixture is a pool over a counting Immediate allocator on the test device.
type fixture struct {
	q     *cl.CommandQueue
	count *allocator.Counting
	pool  *mempool.Pool
}

// newFixture builds the pool over wrap(Immediate), counting what reaches
// the device (pooltest.NewOver). When the test ends, with every buffer
// closed, it closes the pool and checks that every device allocation was
// freed exactly once.
func newFixture(t *testing.T, wrap func(allocator.Allocator) allocator.Allocator, opts ...mempool.Option) *fixture {
	t.Helper()
	q := cltest.Queue(t)
	p, count := pooltest.NewOver(t, q, wrap, opts...)
	return &fixture{q: q, count: count, pool: p}
}

// hangLimit is how long a call of the pool may take before a test calls
// it hung: far longer than any takes, a garbage collection and Oclgrind
// included.
const hangLimit = 10 * time.Second

// workLimit is how long a workload may take before a test calls it
// hung: goroutines making hundreds of requests each (the ladder's
// collections, a garbage collection each, among them), or a wait for a
// slow kernel's Release. Such a run is bound by the CPU, which the race
// detector slows 5-20x and CI's two cores share with other jobs: under
// that load runs of 1-3 s took 11-28 s (TestHostileS33AConcurrentLadderUnderPressure),
// and a Release of a 1.7 s kernel past 10 s (TestHostileS36aForgetStopsAfterRegistrationRace),
// failing as hangs at hangLimit. A hang still fails, later.
const workLimit = 2 * time.Minute

// within runs fn in a goroutine and reports whether it returned within
// hangLimit. If it did not, it fails the test, saying what hung, and
// leaves fn running, so that a hang fails the test instead of hanging the
// suite (a test whose pool may still hold its lock must then call nothing
// of it, nor leave a cleanup that does). fn runs off the test's
// goroutine: it must not call t.FailNow (no require), only record what it
// got.
func within(t testing.TB, what string, fn func()) bool {
	t.Helper()
	return withinLimit(t, what, hangLimit, fn)
}

// withinWork is within for a workload, under workLimit rather than
// hangLimit.
func withinWork(t testing.TB, what string, fn func()) bool {
	t.Helper()
	return withinLimit(t, what, workLimit, fn)
}

// withinLimit is within under limit.
func withinLimit(t testing.TB, what string, limit time.Duration, fn func()) bool {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
		return true
	case <-time.After(limit):
		buf := make([]byte, 8<<20)
		n := runtime.Stack(buf, true)
		fmt.Fprintf(os.Stderr, "\n=== %s: %s hung for %v; every goroutine:\n%s\n", t.Name(), what, limit, buf[:n])
		t.Errorf("%s did not return within %v: it hangs (goroutines dumped to stderr)", what, limit)
		return false
	}
}

// counters is the part of Stats the pool's semantics pin.
type counters struct {
	Active, Held                    int
	Managed, ActiveBytes, HeldBytes int64
}

func countersOf(s mempool.Stats) counters {
	return counters{s.ActiveBlocks, s.HeldBlocks, s.ManagedBytes, s.ActiveBytes, s.HeldBytes}
}

// injector fails the next allocations with the errors queued in it, then
// passes through to the wrapped allocator.
type injector struct {
	allocator.Allocator
	mu    sync.Mutex
	fails []error
	calls int
}

func (i *injector) failNext(errs ...error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.fails = append(i.fails, errs...)
}

func (i *injector) Allocate(size int64) (*cl.Buffer, error) {
	i.mu.Lock()
	i.calls++
	if len(i.fails) > 0 {
		err := i.fails[0]
		i.fails = i.fails[1:]
		i.mu.Unlock()
		return nil, err
	}
	i.mu.Unlock()
	return i.Allocator.Allocate(size)
}

// newCappedFixture is newFixture with its memory capped at total bytes,
// by a Budget of the device (by "budget") or by the pool's limit (by
// "limit"); the allocator the pool sees is wrap of that (nil: itself).
func newCappedFixture(t *testing.T, by string, total int64, wrap func(allocator.Allocator) allocator.Allocator, opts ...mempool.Option) *fixture {
	t.Helper()
	if by == "limit" {
		opts = append(opts[:len(opts):len(opts)], mempool.WithLimit(total))
	}
	return newFixture(t, func(a allocator.Allocator) allocator.Allocator {
		if by == "budget" {
			a = allocator.NewBudget(a, total)
		}
		if wrap != nil {
			a = wrap(a)
		}
		return a
	}, opts...)
}

// newFixtureHoldingOneBlock is a fixture whose allocator an injector wraps,
// with one 64-byte block held for the pool to free on an out-of-memory.
func newFixtureHoldingOneBlock(t *testing.T) (*fixture, *injector) {
	var inj *injector
	f := newFixture(t, func(a allocator.Allocator) allocator.Allocator {
		inj = &injector{Allocator: a}
		return inj
	})
	held, err := f.pool.Allocate(64)
	require.NoError(t, err)
	require.NoError(t, held.Close())
	return f, inj
}

// freeRecorder records the sizes of the buffers freed, in order.
type freeRecorder struct {
	allocator.Allocator
	mu    sync.Mutex
	freed []int64
}

func (r *freeRecorder) Free(buf *cl.Buffer) error {
	r.mu.Lock()
	r.freed = append(r.freed, buf.Size())
	r.mu.Unlock()
	return r.Allocator.Free(buf)
}

// policyOptions returns the options of a pool that is a splitting arena
// (arena) or of exact bins, the default.
func policyOptions(arena bool) []mempool.Option {
	if arena {
		return []mempool.Option{mempool.WithArena()}
	}
	return nil
}

// sanPoolTo returns a queue and a sanitized pool over Immediate on it
// whose findings go to w, with opts after. Unlike newSanFixture's, the
// pool has no cleanup: a test of a hang must call nothing of a pool that
// hung, so the test closes it.
func sanPoolTo(t *testing.T, w io.Writer, opts ...mempool.Option) (*cl.CommandQueue, *mempool.Pool) {
	t.Helper()
	q := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	p, err := mempool.New(imm, append([]mempool.Option{mempool.WithSanitizer(), mempool.WithSanitizerOutput(w)}, opts...)...)
	require.NoError(t, err)
	return q, p
}

// findingKinds counts findings by kind.
func findingKinds(fs []mempool.Finding) map[mempool.FindingKind]int {
	kinds := map[mempool.FindingKind]int{}
	for _, f := range fs {
		kinds[f.Kind]++
	}
	return kinds
}
