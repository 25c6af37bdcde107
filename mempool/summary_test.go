package mempool_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/internal/policy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// noLimit keeps a summary's limit "none", whatever CLPOOL_MEMORY_LIMIT
// says.
var noLimit = mempool.WithLimit(0)

// summaryOf returns the pool's summary.
func summaryOf(t *testing.T, p *mempool.Pool) string {
	t.Helper()
	var b strings.Builder
	require.NoError(t, p.WriteSummary(&b))
	return b.String()
}

// summaryAllocate allocates size bytes from p.
func summaryAllocate(t *testing.T, p *mempool.Pool, size int64) *mempool.PooledBuffer {
	t.Helper()
	b, err := p.Allocate(size)
	require.NoError(t, err)
	return b
}

// A known sequence on exact bins: blocks of 4000 and 1000 bytes (the small
// pool: bins of 4095 and 1023 bytes) and one of 4 MiB (the large pool: a
// bin of 4456447 bytes); the 1000-byte block is given back and taken again,
// the 4 MiB one given back. Every figure below is worked out by hand from
// those sizes.
func TestWriteSummaryShowsTheStatistics(t *testing.T) {
	p := pooltest.New(t, nil, noLimit)
	a := summaryAllocate(t, p, 4000)
	b := summaryAllocate(t, p, 1000)
	c := summaryAllocate(t, p, 4<<20)
	require.NoError(t, b.Close())
	b = summaryAllocate(t, p, 1000) // a hit
	require.NoError(t, c.Close())
	defer a.Close()
	defer b.Close()

	got := summaryOf(t, p)
	for _, want := range []string{
		"|              hits: 1               |              misses: 3               |",
		"|          device allocs: 3          |           device frees: 0            |",
		"|              OOMs: 0               |            OOM retries: 0            |",
		"|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |",

		// Now 4095 + 1023 = 5118 bytes, all small; at the peak 5118 +
		// 4456447 = 4461565 (4357 KiB, rounded); allocated 4095 + 1023 +
		// 4456447 + 1023; freed 1023 + 4456447.
		"| Allocated memory      |   5118 B   |   4357 KiB |   4358 KiB |   4353 KiB |\n" +
			"|       from large pool |      0 B   |   4352 KiB |   4352 KiB |   4352 KiB |\n" +
			"|       from small pool |   5118 B   |      5 KiB |      6 KiB |      1 KiB |\n",
		// Active memory is allocated memory: no block waits for a queue.
		"| Active memory         |   5118 B   |   4357 KiB |   4358 KiB |   4353 KiB |\n",
		// What was asked: 4000 + 1000 now; 4000 + 1000 + 4 MiB at the
		// peak; 4000 + 1000 + 1000 in all from the small pool.
		"| Requested memory      |   5000 B   |   4101 KiB |   4102 KiB |   4097 KiB |\n" +
			"|       from large pool |      0 B   |   4096 KiB |   4096 KiB |   4096 KiB |\n" +
			"|       from small pool |   5000 B   |      5 KiB |      6 KiB |      1 KiB |\n",
		// Three segments, all held: nothing went back to the device.
		"| Reserved memory       |   4357 KiB |   4357 KiB |   4357 KiB |      0 B   |\n" +
			"|       from large pool |   4352 KiB |   4352 KiB |   4352 KiB |      0 B   |\n" +
			"|       from small pool |      5 KiB |      5 KiB |      5 KiB |      0 B   |\n",
		// Exact bins never split a segment.
		"| Non-releasable memory |      0 B   |      0 B   |      0 B   |      0 B   |\n",
		"| Allocations           |       2    |       3    |       4    |       2    |\n" +
			"|       from large pool |       0    |       1    |       1    |       1    |\n" +
			"|       from small pool |       2    |       2    |       3    |       1    |\n",
		"| Active allocs         |       2    |       3    |       4    |       2    |\n",
		"| Reserved segments     |       3    |       3    |       3    |       0    |\n" +
			"|       from large pool |       1    |       1    |       1    |       0    |\n" +
			"|       from small pool |       2    |       2    |       2    |       0    |\n",
		"| Non-releasable allocs |       0    |       0    |       0    |       0    |\n",
		"| Oversize allocations  |       0    |       0    |       0    |       0    |\n",
		"| Oversize segments     |       0    |       0    |       0    |       0    |\n",
	} {
		assert.Contains(t, got, want)
	}
	if t.Failed() {
		t.Log("the summary:\n" + got)
	}
}

// An arena splits segments: two 1000-byte requests take 1024-byte blocks
// (the arena's 512-byte alignment) from one segment, the arena's first
// (policy.FirstSegment, 512 KiB: the figures below are worked out for
// it), and the first is given back. Its block and the rest of the segment
// are free but cannot go back to the device (non-releasable) while the
// second block holds the segment. A request over the maximum split size
// gets an oversize segment of its own.
func TestWriteSummaryArena(t *testing.T) {
	p := pooltest.New(t, nil, noLimit, mempool.WithArena(), mempool.WithMaxSplitSize(1<<20))
	a := summaryAllocate(t, p, 1000)
	b := summaryAllocate(t, p, 1000)
	big := summaryAllocate(t, p, 3<<20)
	defer b.Close()
	defer big.Close()
	require.NoError(t, a.Close())
	s := p.Stats()
	require.Equal(t, int64(1), s.Segment.Small.Current, "both small blocks from one segment")
	require.Equal(t, int64(policy.FirstSegment), s.ReservedBytes.Small.Current, "the first segment, which the figures below assume")

	got := summaryOf(t, p)
	for _, want := range []string{
		"|           policy: arena            |           leading bits: 4            |",
		"|       max split size: 1 MiB        |             limit: none              |",
		// The oversize block is its whole 3 MiB segment (the request's
		// own size); the small blocks are 1024 bytes each.
		"| Allocated memory      |   3073 KiB |   3074 KiB |   3074 KiB |   1024 B   |\n" +
			"|       from large pool |   3072 KiB |   3072 KiB |   3072 KiB |      0 B   |\n" +
			"|       from small pool |      1 KiB |      2 KiB |      2 KiB |   1024 B   |\n",
		"| Reserved memory       |   3584 KiB |   3584 KiB |   3584 KiB |      0 B   |\n" +
			"|       from large pool |   3072 KiB |   3072 KiB |   3072 KiB |      0 B   |\n" +
			"|       from small pool |    512 KiB |    512 KiB |    512 KiB |      0 B   |\n",
		// 512 KiB less the 1024-byte block in use: 523264 bytes (under
		// 768 KiB, so in bytes). The rest of the segment was cut twice
		// (freed: 1024 bytes), then a's block came back beside it.
		"| Non-releasable memory | 523264 B   | 523264 B   | 524288 B   |   1024 B   |\n" +
			"|       from large pool |      0 B   |      0 B   |      0 B   |      0 B   |\n" +
			"|       from small pool | 523264 B   | 523264 B   | 524288 B   |   1024 B   |\n",
		"| Reserved segments     |       2    |       2    |       2    |       0    |\n" +
			"|       from large pool |       1    |       1    |       1    |       0    |\n" +
			"|       from small pool |       1    |       1    |       1    |       0    |\n",
		"| Non-releasable allocs |       2    |       2    |       2    |       0    |\n" +
			"|       from large pool |       0    |       0    |       0    |       0    |\n" +
			"|       from small pool |       2    |       2    |       2    |       0    |\n",
		"| Oversize allocations  |       1    |       1    |       1    |       0    |\n",
		"| Oversize segments     |       1    |       1    |       1    |       0    |\n",
	} {
		assert.Contains(t, got, want)
	}
	if t.Failed() {
		t.Log("the summary:\n" + got)
	}
}

// The header names the device and the limit; every line of the table is
// as wide as the others, the device's name included. The device is named
// as the metrics' device label names it, "name (vendor)", without the
// platform's ordinal that cl.Device.String starts with ("1:0 pthread..."),
// which changes with the .icd files installed.
func TestWriteSummaryHeader(t *testing.T) {
	q := cltest.Queue(t)
	alloc, err := allocator.NewImmediate(q, cl.MemReadWrite)
	require.NoError(t, err)
	p, err := mempool.New(alloc, mempool.WithLimit(3<<29))
	require.NoError(t, err)
	defer p.Close()

	got := summaryOf(t, p)
	d := q.Device()
	device := "device " + d.Name + " (" + d.Vendor + ")"
	if len(device) > 75 {
		device = device[:72] + "..." // cut short to fit
	}
	assert.Contains(t, got, device)
	assert.NotContains(t, got, fmt.Sprintf("device %d:%d ", d.Platform.Index, d.Index), "no ICD ordinal")
	assert.Contains(t, got, "|            policy: bins            |           leading bits: 4            |\n")
	assert.Contains(t, got, "limit: 1.5 GiB")
	for i, line := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		assert.Equal(t, 77, utf8.RuneCountInString(line), "line %d: %q", i+1, line)
	}

	// Without a device: an allocator that does not say which it uses.
	hidden, err := mempool.New(struct{ allocator.Allocator }{alloc}, mempool.WithLimit(0))
	require.NoError(t, err)
	defer hidden.Close()
	assert.Contains(t, summaryOf(t, hidden), "|                              device unknown                               |\n")
}

// errWriter fails every write.
type errWriter struct{ err error }

func (w errWriter) Write([]byte) (int, error) { return 0, w.err }

func TestWriteSummaryReturnsTheWritersError(t *testing.T) {
	p := pooltest.New(t, nil, noLimit)
	full := errors.New("disk full")
	err := p.WriteSummary(errWriter{full})
	require.ErrorIs(t, err, full)
	assert.Equal(t, "mempool: WriteSummary: disk full", err.Error())
}
