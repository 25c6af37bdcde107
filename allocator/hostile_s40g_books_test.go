package allocator_test

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s40gFlaky fails every third Free transiently (buffer kept), panics on
// every fifth, and frees otherwise.
type s40gFlaky struct {
	allocator.Allocator
	n atomic.Int64
}

var errS40gFlaky = errors.New("flaky free")

func (a *s40gFlaky) Free(buf *cl.Buffer) error {
	switch n := a.n.Add(1); {
	case n%5 == 0:
		panic("s40g flaky panic")
	case n%3 == 0:
		return errS40gFlaky
	}
	return a.Allocator.Free(buf)
}

// TestS40gManyGoroutinesFreeSameAndOtherBuffers: 8 goroutines race Frees
// of 32 buffers (each freed by every goroutine, in turn order shuffled),
// with a wrapped Free that fails or panics now and then. Every buffer is
// freed exactly once, no Free hangs, and the counts
// (Counting: Frees, Live, LiveBytes; Budget: Live) end at what was freed.
// BadFrees is every Free that found the buffer freed; one refused while
// another was under way (ErrBeingFreed) is tried again.
func TestS40gManyGoroutinesFreeSameAndOtherBuffers(t *testing.T) {
	d, wrappers := bookkeepers(t)
	for name, wrap := range wrappers {
		t.Run(name, func(t *testing.T) {
			inner := &s40gFlaky{Allocator: d}
			w := wrap(inner)
			const nbuf, ngo = 32, 8
			bufs := make([]*cl.Buffer, nbuf)
			for i := range bufs {
				var err error
				bufs[i], err = w.Allocate(64)
				require.NoError(t, err)
			}
			var ok, bad, being atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < ngo; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range bufs {
						b := bufs[(i*7+g*5)%nbuf]
						for {
							err := func() (err error) {
								defer func() {
									if recover() != nil {
										err = errS40gFlaky
									}
								}()
								return w.Free(b)
							}()
							if errors.Is(err, allocator.ErrBeingFreed) {
								being.Add(1)
							}
							if errors.Is(err, errS40gFlaky) || errors.Is(err, allocator.ErrBeingFreed) {
								runtime.Gosched()
								continue // retry, as the docs provide for (another Free's outcome first)
							}
							if err == nil {
								ok.Add(1)
							} else if errors.Is(err, allocator.ErrFreed) {
								bad.Add(1)
							} else {
								t.Errorf("Free: %v", err)
							}
							break
						}
					}
				}()
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				t.Fatal("racing Frees hung")
			}
			assert.Equal(t, int64(nbuf), ok.Load(), "each buffer freed exactly once")
			assert.Equal(t, int64(nbuf*(ngo-1)), bad.Load())
			for _, b := range bufs {
				assert.True(t, b.Released())
			}
			switch w := w.(type) {
			case *allocator.Counting:
				s := w.Stats()
				assert.Equal(t, int64(nbuf), s.Frees)
				// Each Free that found the buffer freed, and each refused
				// while a Free that then freed it was under way.
				assert.GreaterOrEqual(t, s.BadFrees, int64(nbuf*(ngo-1)))
				assert.LessOrEqual(t, s.BadFrees, int64(nbuf*(ngo-1))+being.Load())
				assert.Zero(t, s.Live)
				assert.Zero(t, s.LiveBytes)
			case *allocator.Budget:
				assert.Zero(t, w.Live())
			}
		})
	}
}
