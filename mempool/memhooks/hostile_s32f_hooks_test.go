package memhooks_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/clpool/clpool/trace"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type s32fPanicWriter struct{}

func (s32fPanicWriter) Write([]byte) (int, error) { panic("writer panics") }

// FAILED on f94f95c: a TraceRecorder's writer that panics kills the process
// when the recorder's own timer flushes (tick runs on a time.AfterFunc
// goroutine with no recover). mempool.Hook promises "A hook that panics
// makes the pool's method return a *PanicError"; the recorder moves the
// writer's calls off the pool's goroutine, out of that recovery.
func TestHostileS32fTraceRecorderPanickingWriterKillsProcess(t *testing.T) {
	if os.Getenv(cltest.ChildEnv) == "s32f-panic-writer" {
		p := pooltest.New(t, nil)
		rec := memhooks.NewTraceRecorder(s32fPanicWriter{}, memhooks.WithFlushEvery(time.Millisecond))
		p.AddHook(rec)
		b, err := p.Allocate(4000)
		require.NoError(t, err)
		time.Sleep(200 * time.Millisecond) // the tick writes
		require.NoError(t, b.Close())
		rec.Close()
		return
	} else if os.Getenv(cltest.ChildEnv) != "" {
		t.Skip("a child of reexec for another test")
	}
	cltest.Watchdog(t, 60*time.Second)
	out, err := cltest.Reexec(t, "^TestHostileS32fTraceRecorderPanickingWriterKillsProcess$", cltest.ChildEnv+"=s32f-panic-writer")
	if i := strings.Index(out, "goroutine "); i > 0 {
		out = out[:i]
	}
	assert.NoError(t, err, "a panicking writer crashed the process from the recorder's timer:\n%s", out)
}

type s32fFailWriter struct{ n int }

func (w *s32fFailWriter) Write(p []byte) (int, error) {
	w.n++
	return 0, errors.New("disk full")
}

// PASSES: a failing writer's error is kept and returned by Flush/Close;
// DebugPrint's writer panicking is a *PanicError from the pool, and the
// printer keeps working.
func TestHostileS32fFailingAndPanickingWriters(t *testing.T) {
	p := pooltest.New(t, nil)
	w := &s32fFailWriter{}
	rec := memhooks.NewTraceRecorder(w, memhooks.WithFlushEvery(0))
	remove := p.AddHook(rec)
	b, err := p.Allocate(4000)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	assert.ErrorContains(t, rec.Flush(), "disk full")
	assert.ErrorContains(t, rec.Close(), "disk full")
	assert.ErrorContains(t, rec.Close(), "disk full")
	remove()

	var calls int
	dp := memhooks.NewDebugPrint(writerFunc(func(p []byte) (int, error) {
		calls++
		if calls == 1 {
			panic("debug writer panics")
		}
		return len(p), nil
	}))
	remove = p.AddHook(dp)
	defer remove()
	_, err = p.Allocate(100)
	assert.ErrorIs(t, err, mempool.ErrPanicked)
	b, err = p.Allocate(100)
	require.NoError(t, err, "the printer works after its writer panicked once")
	require.NoError(t, b.Close())
	assert.NoError(t, dp.Err())
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// PASSES (run with -race): many goroutines allocate and free while the
// three hooks are added and removed; the trace read back has exactly the
// allocations and frees made while the recorder was registered and every
// block freed; the pprof profile is read by `go tool pprof -raw`.
func TestHostileS32fConcurrentHooksRoundTrip(t *testing.T) {
	cltest.Watchdog(t, 120*time.Second)
	p := pooltest.New(t, nil)
	var tw writes
	rec := memhooks.NewTraceRecorder(&tw, memhooks.WithSites(), memhooks.WithFlushEvery(time.Millisecond))
	lp := memhooks.NewLineProfile()
	var dw writes
	dp := memhooks.NewDebugPrint(&dw)
	removeRec := p.AddHook(rec)
	removeLP := p.AddHook(lp)
	const G, N = 4, 300
	var wg sync.WaitGroup
	stopFlip := make(chan struct{})
	go func() { // DebugPrint added and removed while events fire
		for {
			select {
			case <-stopFlip:
				return
			default:
			}
			r := p.AddHook(dp)
			time.Sleep(100 * time.Microsecond)
			r()
		}
	}()
	for g := range G {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range N {
				b, err := p.Allocate(int64(64 + (g*131+i*17)%9000))
				if !assert.NoError(t, err) {
					return
				}
				assert.NoError(t, b.Close())
			}
		}()
	}
	wg.Wait()
	close(stopFlip)
	removeRec()
	removeLP()
	require.NoError(t, rec.Close())
	require.NoError(t, dp.Err())

	tr, err := trace.ReadComplete(strings.NewReader(tw.String()))
	require.NoError(t, err)
	var a, f int
	for _, ev := range tr {
		switch byte(ev.Op) {
		case 'a':
			a++
		case 'f':
			f++
		}
	}
	assert.Equal(t, G*N, a, "allocations in the trace")
	assert.Equal(t, G*N, f, "frees in the trace")

	for _, line := range strings.Split(strings.TrimSpace(dw.String()), "\n") {
		if line != "" {
			require.True(t, strings.HasPrefix(line, "{") && strings.HasSuffix(line, "}"), "a JSON line: %q", line)
		}
	}

	path := filepath.Join(t.TempDir(), "mem.pprof")
	var buf bytes.Buffer
	require.NoError(t, lp.WriteProfile(&buf))
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	out, err := exec.Command("go", "tool", "pprof", "-raw", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "alloc_objects/count")
	assert.Contains(t, string(out), "hostile_s32f_hooks_test.go")
}

// PASSES: an empty LineProfile still writes a profile pprof reads.
func TestHostileS32fEmptyProfileReadable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "empty.pprof")
	var buf bytes.Buffer
	require.NoError(t, memhooks.NewLineProfile().WriteProfile(&buf))
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
	out, err := exec.Command("go", "tool", "pprof", "-raw", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
}
