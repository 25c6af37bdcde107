package mempool_test

// Hostile review s39g: the sanitizer's output under several goroutines
// that find things at once, with a writer that calls the pool, and a
// writer that closes the pool from the finalizer's goroutine.

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
)

// (Coverage: four goroutines, each on a queue of its own (On),
// write past their blocks, close them, drop some and call Findings, while
// the writer reads the pool's Stats and Findings and allocates at every
// line; then the pool's Close): no hang, one call at a time, and the
// lines written are the findings, each once, none left unwritten once
// every goroutine has returned.
func TestHostileS39gOutputUnderConcurrentFindings(t *testing.T) {
	cltest.Watchdog(t, 10*time.Minute)
	var calls atomic.Int64
	w := &s39gCaller{act: func(p *mempool.Pool) {
		switch calls.Add(1) % 3 {
		case 0:
			_ = p.Stats()
		case 1:
			_ = p.Findings()
		case 2:
			if b, err := p.Allocate(300); err == nil {
				_ = b.Close()
			}
		}
	}}
	q, p := sanPoolTo(t, w)
	w.p.Store(p)

	const workers, rounds = 4, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers*rounds*4)
	for i := range workers {
		cq := cltest.SecondQueue(t, q, 0)
		wg.Go(func() {
			for r := range rounds {
				b, err := p.On(cq).Allocate(int64(100 + 10*i + r))
				if err != nil {
					errs <- err
					return
				}
				if r%3 == 0 {
					ev, err := cq.EnqueueWriteBuffer(b.Base(), true, b.Offset()+b.Size(), []byte{7})
					if err != nil {
						errs <- err
						return
					}
					_ = ev.Release()
				}
				if r%7 == 0 {
					func() { d, _ := p.On(cq).Allocate(64); _ = d }() // dropped
					runtime.GC()
				}
				if err := b.Close(); err != nil {
					errs <- err
				}
				if r%10 == 0 {
					_ = p.Findings()
				}
			}
		})
	}
	if !withinWork(t, "the workers", wg.Wait) {
		return
	}
	close(errs)
	for err := range errs {
		assert.NoError(t, err)
	}
	for range 20 {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	if !within(t, "the pool's Close", func() { assert.NoError(t, p.Close()) }) {
		return
	}
	// A call of w under way on the finalizer's goroutine (a dropped
	// block's line; w calls Findings) writes the lines printed meanwhile
	// once it returns, and blocks leaked at Close may still be dropped:
	// wait (bounded) for the lines and the findings to settle.
	fs, want, got, ok := s39gSettle(t, p, w)
	if !ok {
		return
	}
	kinds := findingKinds(fs)
	assert.Equal(t, want, got, "each finding's line written once")
	assert.Equal(t, int64(1), w.most.Load(), "one call at a time")
	assert.Equal(t, workers*((rounds+2)/3), kinds[mempool.OutOfBounds])
	t.Logf("findings: %v", kinds)
}

// s39gSettle waits (at most a minute) until w has as many lines as the
// pool has findings, and returns the findings, their lines and w's
// lines, sorted; ok false if Findings hung.
func s39gSettle(t *testing.T, p *mempool.Pool, w *s39gCaller) (fs []mempool.Finding, want, got []string, ok bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		if !within(t, "Findings", func() { fs = p.Findings() }) {
			return nil, nil, nil, false
		}
		want = want[:0]
		for _, f := range fs {
			want = append(want, f.String()+"\n")
		}
		got = w.got()
		if len(got) == len(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	slices.Sort(want)
	slices.Sort(got)
	return fs, want, got, true
}

// s39gDropCloser is a sanitizer output that closes the pool at its first
// dropped line (on the finalizer's goroutine).
type s39gDropCloser struct {
	s39gCaller
	closed chan struct{}
	once   sync.Once
}

// (Coverage: a writer that closes the pool from the finalizer's
// goroutine, at a Dropped finding, while another goroutine allocates and
// closes blocks written out of bounds): no hang, and the lines are the
// findings.
func TestHostileS39gOutputClosesThePoolOnTheFinalizer(t *testing.T) {
	cltest.Watchdog(t, 5*time.Minute)
	w := &s39gDropCloser{closed: make(chan struct{})}
	w.act = func(p *mempool.Pool) {} // w.p stays nil: the closing is s39gFinalCloser's
	var pool atomic.Pointer[mempool.Pool]
	wr := &s39gFinalCloser{w: w, pool: &pool}
	q, p := sanPoolTo(t, wr)
	pool.Store(p)
	stop := make(chan struct{})
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		for {
			select {
			case <-stop:
				return
			default:
			}
			b, err := p.Allocate(500)
			if err != nil {
				return // closed
			}
			ev, err := q.EnqueueWriteBuffer(b.Base(), true, b.Offset()+500, []byte{7})
			if err == nil {
				_ = ev.Release()
			}
			_ = b.Close()
		}
	}()
	func() { d, _ := p.Allocate(64); _ = d }()
	for i := 0; i < 400; i++ {
		select {
		case <-w.closed:
			i = 400
			continue
		default:
		}
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	select {
	case <-w.closed:
	case <-time.After(workLimit):
		t.Fatal("the writer never closed the pool at the dropped line")
	}
	select {
	case <-churned:
	case <-time.After(workLimit):
		t.Fatal("the churn did not stop")
	}
	_, want, got, ok := s39gSettle(t, p, &w.s39gCaller)
	if !ok {
		return
	}
	assert.Equal(t, want, got, "each finding's line written once")
	assert.Equal(t, int64(1), w.most.Load(), "one call at a time")
}

// s39gFinalCloser closes the pool at the first dropped line.
type s39gFinalCloser struct {
	w    *s39gDropCloser
	pool *atomic.Pointer[mempool.Pool]
}

func (f *s39gFinalCloser) Write(b []byte) (int, error) {
	n, err := f.w.Write(b)
	if kindOfLine(string(b)) == "dropped" {
		f.w.once.Do(func() {
			if p := f.pool.Load(); p != nil {
				_ = p.Close()
			}
			close(f.w.closed)
		})
	}
	return n, err
}
