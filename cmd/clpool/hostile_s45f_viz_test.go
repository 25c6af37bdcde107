package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Review s45f: viz refuses ids the page's script cannot tell apart
// (past ±(2^53-1)), but not queue numbers, which the script keeps in an
// Int32Array: a trace whose queue is 2^31 is drawn as "queue
// -2147483648", and one whose queue is 2^32+1 is merged with queue 1.
// The trace reads back (trace.Read takes any positive int64 queue), so
// the page must show the queues as the trace has them, or viz must
// refuse them as it refuses ids.
func TestHostileS45fVizQueuesPastInt32(t *testing.T) {
	chrome := chromium(t)
	input := writeTemp(t, "queues.tsv", "op\tid\tsize\tt\tqueue\tsite\n"+
		"a\t1\t1000\t1000\t1\tmain.go:1:main.a\n"+
		"a\t2\t3000\t2000\t2147483648\tmain.go:2:main.b\n"+
		"a\t3\t5000\t3000\t4294967297\tmain.go:3:main.c\n")
	var stdout, stderr bytes.Buffer
	out := writeTemp(t, "mem.html", "")
	if status := run([]string{"viz", "-o", out, input}, &stdout, &stderr); status != 0 {
		assert.Contains(t, stderr.String(), "queue 2147483648", "refused, naming the queue")
		return
	}
	b := openBrowser(t, chrome, 1400, 1600)
	b.open(out)
	rendered(t, b)
	legend := b.evalString(`document.getElementById("queue-legend").textContent`)
	assert.Contains(t, legend, "queue 2147483648", "the page shows queue 2^31 as the trace has it")
	assert.NotContains(t, legend, "queue -2147483648", "the page wraps queue 2^31 to a negative number")
	assert.Contains(t, legend, "queue 4294967297", "the page keeps queue 2^32+1 apart from queue 1")
}

// Review s45f: viz checks a snapshot's segments one by one (their
// blocks tile them, ids within 2^53) but not that their ids differ. The
// page's script keys the segments by id (viz.html, stateAt and everSegs:
// a Map set by s.id), so of two segments with one id it draws the last
// only: the map of this snapshot of two 4 KiB segments says "1
// segments, 4 KiB managed". A pool numbers its segments 1, 2, ... (the
// Snapshot doc); a snapshot that repeats one is bad input, to refuse
// with a clear error as viz refuses blocks that leave a gap.
func TestHostileS45fVizSnapshotSegmentIDTwice(t *testing.T) {
	chrome := chromium(t)
	input := writeTemp(t, "snap.json", `{"policy":"arena","managed_bytes":8192,"active_bytes":100,"segments":[`+
		`{"id":1,"size":4096,"blocks":[{"offset":0,"size":4096,"state":"active","requested":100,"block_id":7}]},`+
		`{"id":1,"size":4096,"blocks":[{"offset":0,"size":4096,"state":"held"}]}]}`)
	out := filepath.Join(t.TempDir(), "mem.html")
	var stdout, stderr bytes.Buffer
	if status := run([]string{"viz", "-o", out, input}, &stdout, &stderr); status != 0 {
		assert.Contains(t, stderr.String(), "segment 1", "refused, naming the segment")
		return
	}
	b := openBrowser(t, chrome, 1400, 1600)
	b.open(out)
	caption := b.evalString(`document.getElementById("map-caption").textContent`)
	assert.Contains(t, caption, "2 segments, 8 KiB managed", "the map draws both segments of the snapshot")
	assert.Equal(t, "2", attrOf(t, b, "#segments", "data-segments"))
}

// Review s45f: viz checks a snapshot's blocks against its segments, but
// takes its managed_bytes and active_bytes as they are, and draws them
// as the pool's: a snapshot of one 4 KiB segment with managed_bytes
// -4096 writes a page whose peak of managed bytes is -4096 ("peak -4 KiB
// managed"). A pool's snapshot has ManagedBytes = the segments' sum and
// ActiveBytes = the active blocks' requested bytes; one that disagrees is
// bad input, to refuse with a clear error (as a requested size past its
// block is refused, review s35c).
func TestHostileS45fVizSnapshotFiguresUnchecked(t *testing.T) {
	for _, tc := range []struct{ name, figures string }{
		{"negative managed", `"managed_bytes":-4096,"active_bytes":100`},
		{"managed past the segments", `"managed_bytes":1099511627776,"active_bytes":100`},
		{"active past the blocks", `"managed_bytes":4096,"active_bytes":1099511627776`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			input := writeTemp(t, "snap.json", `{"policy":"arena",`+tc.figures+`,"segments":[`+
				`{"id":1,"size":4096,"blocks":[{"offset":0,"size":4096,"state":"active","requested":100,"block_id":7}]}]}`)
			out := filepath.Join(t.TempDir(), "mem.html")
			var stdout, stderr bytes.Buffer
			status := run([]string{"viz", "-o", out, input}, &stdout, &stderr)
			assert.Equal(t, 1, status, "viz draws a snapshot whose figures disagree with its segments: %s", stderr.String())
			assert.NoFileExists(t, out)
		})
	}
}

// Review s45f: a history's negative queue is refused (trace.Check: "queue
// -3 is negative"), but an active block's queue in the snapshot's
// segments is taken as it is: viz draws this snapshot's block as a band
// of "queue -3" in plot 2b. Expected: refused with a clear error, as the
// same queue in its history would be.
func TestHostileS45fVizSnapshotNegativeQueue(t *testing.T) {
	input := writeTemp(t, "snap.json", `{"policy":"arena","managed_bytes":4096,"active_bytes":100,"segments":[`+
		`{"id":1,"size":4096,"blocks":[{"offset":0,"size":4096,"state":"active","requested":100,"queue":-3,"block_id":7}]}]}`)
	out := filepath.Join(t.TempDir(), "mem.html")
	var stdout, stderr bytes.Buffer
	status := run([]string{"viz", "-o", out, input}, &stdout, &stderr)
	assert.Equal(t, 1, status, "viz draws a block of queue -3: %s", stderr.String())
	assert.NoFileExists(t, out)
}

// The checks above refuse what no pool writes: every pool's snapshot,
// with blocks active, held and cached, of buffers and of SVM, sanitized
// or not, still draws.
func TestHostileS45fVizTakesEveryPoolsSnapshot(t *testing.T) {
	q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
	for _, c := range []struct {
		name string
		svm  bool
		opts []mempool.Option
	}{
		{"bins", false, nil},
		{"arena", false, []mempool.Option{mempool.WithArena()}},
		{"arena/sanitized", false, []mempool.Option{mempool.WithArena(), mempool.WithSanitizer(), mempool.WithSanitizerOutput(nil)}},
		{"bins/svm", true, nil},
		{"arena/svm", true, []mempool.Option{mempool.WithArena()}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var pool *mempool.Pool
			if c.svm {
				a, err := allocator.NewSVM(q.Context(), false)
				require.NoError(t, err)
				pool, err = mempool.NewSVM(a, c.opts...)
				require.NoError(t, err)
			} else {
				pool = pooltest.New(t, q, c.opts...)
			}
			defer pool.Close()
			var keep []*mempool.PooledBuffer
			for i := range 40 {
				b, err := pool.On(q).Allocate(int64(100 + 7919*i))
				require.NoError(t, err)
				if i%3 == 0 {
					keep = append(keep, b)
				} else {
					require.NoError(t, b.Close())
				}
			}
			raw, err := json.Marshal(pool.Snapshot())
			require.NoError(t, err)
			_, err = loadPage(writeTemp(t, "snap.json", string(raw)), "arena", newProgress(&bytes.Buffer{}))
			assert.NoError(t, err)
			for _, b := range keep {
				require.NoError(t, b.Close())
			}
		})
	}
}
