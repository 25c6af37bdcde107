package memhooks_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/clpool/clpool/trace"
	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDebugPrintWritesJSONLines(t *testing.T) {
	p := pooltest.New(t, nil)
	var out bytes.Buffer
	d := memhooks.NewDebugPrint(&out)
	p.AddHook(d)
	b, err := p.Allocate(4000)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	require.NoError(t, d.Err())

	var lines []map[string]any
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), sc.Text())
		lines = append(lines, m)
	}
	require.Len(t, lines, 6)
	var names []string
	var lastT float64
	for _, m := range lines {
		names = append(names, m["event"].(string))
		assert.Equal(t, p.Device().Name, m["device"])
		assert.Equal(t, float64(4095), m["alloc_size"])
		// t: integer nanoseconds since the DebugPrint was made, never going down.
		tm, ok := m["t"].(float64)
		require.True(t, ok, "every line has a time: %v", m)
		assert.Equal(t, float64(int64(tm)), tm, "an integer")
		assert.Positive(t, tm)
		assert.GreaterOrEqual(t, tm, lastT)
		lastT = tm
	}
	assert.Equal(t, []string{"malloc_before", "alloc_before", "alloc_after", "malloc_after", "free_before", "free_after"}, names)
	assert.Equal(t, float64(4000), lines[0]["size"])
	assert.NotContains(t, lines[0], "buffer", "no buffer before the allocation")
	assert.Regexp(t, `^0x[0-9a-f]+$`, lines[3]["buffer"])
	assert.Equal(t, lines[3]["block"], lines[4]["block"], "malloc and free name the same block")
}

// An SVM pool's events name the SVM by address, where a buffer pool's name
// the buffer.
func TestDebugPrintNamesAnSVMPoolsMemory(t *testing.T) {
	q := cltest.SVMQueue(t, cl.SVMCoarseGrainBuffer)
	a, err := allocator.NewImmediateSVM(q, false)
	require.NoError(t, err)
	p, err := mempool.NewSVM(a)
	require.NoError(t, err)
	defer p.Close()
	var out bytes.Buffer
	d := memhooks.NewDebugPrint(&out)
	p.AddHook(d)
	b, err := p.Allocate(4000)
	require.NoError(t, err)
	want := fmt.Sprintf("%#x", b.SVM().Pointer())
	require.NoError(t, b.Close())
	require.NoError(t, d.Err())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 6)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[3]), &m))
	assert.Equal(t, "malloc_after", m["event"])
	assert.Equal(t, want, m["svm"])
	assert.NotContains(t, m, "buffer")
}

// askSmall and askLarge are two call sites for the profile to tell apart.
func askSmall(t *testing.T, p *mempool.Pool) *mempool.PooledBuffer {
	b, err := p.Allocate(4096)
	require.NoError(t, err)
	return b
}

func askLarge(t *testing.T, p *mempool.Pool) *mempool.PooledBuffer {
	b, err := p.Allocate(1 << 20)
	require.NoError(t, err)
	return b
}

// TestLineProfilePrintCountsDepthAsCuPy pins Print's maxDepth to CuPy's
// max_depth, which counts _root as level 1.
func TestLineProfilePrintCountsDepthAsCuPy(t *testing.T) {
	p := pooltest.New(t, nil)
	lp := memhooks.NewLineProfile()
	p.AddHook(lp)
	small := askSmall(t, p)
	defer small.Close()
	large := askLarge(t, p)
	defer large.Close()

	// The whole tree has three levels: _root, the two lines of this test
	// that call askSmall and askLarge, and the lines in them that allocate.
	root := `^_root `
	caller := `^  memhooks_test.go:\d+:memhooks_test.TestLineProfilePrintCountsDepthAsCuPy `
	asker := `^    memhooks_test.go:\d+:memhooks_test.ask(Small|Large) `
	all := []string{root, caller, asker, caller, asker}
	for _, tc := range []struct {
		maxDepth int
		want     []string // a pattern per line
	}{
		{0, all},
		{-1, all},
		{1, []string{root}},
		{2, []string{root, caller, caller}},
		{3, all},
		{4, all},
	} {
		t.Run(fmt.Sprint("maxDepth=", tc.maxDepth), func(t *testing.T) {
			var out bytes.Buffer
			require.NoError(t, lp.Print(&out, tc.maxDepth, memhooks.InUse))
			lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
			require.Len(t, lines, len(tc.want), out.String())
			for i, pattern := range tc.want {
				assert.Regexp(t, pattern, lines[i])
			}
		})
	}
}

func TestLineProfile(t *testing.T) {
	p := pooltest.New(t, nil)
	lp := memhooks.NewLineProfile()
	p.AddHook(lp)
	small := mempool.AllocSize(mempool.BinNumber(4096, 4), 4)
	large := mempool.AllocSize(mempool.BinNumber(1<<20, 4), 4)

	var s2 *mempool.PooledBuffer
	for i := range 2 { // one call site: the second call is a hit, used but not acquired
		b := askSmall(t, p)
		if i == 0 {
			require.NoError(t, b.Close())
		} else {
			s2 = b
		}
	}
	l := askLarge(t, p)

	var tree bytes.Buffer
	require.NoError(t, lp.Print(&tree, 0, memhooks.InUse))
	text := tree.String()
	t.Log("\n" + text)
	lines := strings.Split(strings.TrimSpace(text), "\n")
	assert.Equal(t, "_root (1.07MB, 1.07MB)", lines[0])
	assert.Regexp(t, `^  memhooks_test.go:\d+:memhooks_test.TestLineProfile \(4.25KB, 4.25KB\)$`, lines[1], "the tree starts at the test, a node per calling line, first seen first")
	assert.Regexp(t, `^  memhooks_test.go:\d+:memhooks_test.TestLineProfile \(1.06MB, 1.06MB\)$`, lines[3], "askLarge's line, seen second")
	assert.Contains(t, text, "memhooks_test.askSmall (4.25KB, 4.25KB)")
	assert.Contains(t, text, "memhooks_test.askLarge (1.06MB, 1.06MB)")
	assert.NotContains(t, text, "mempool.", "clpool's own frames are left out")
	assert.NotContains(t, text, "runtime.")

	var total bytes.Buffer
	require.NoError(t, lp.Print(&total, 0, memhooks.Allocated))
	assert.Contains(t, total.String(), "memhooks_test.askSmall (8.50KB, 4.25KB)", "both uses, one acquisition")

	// Frees come off the in-use view.
	require.NoError(t, l.Close())
	tree.Reset()
	require.NoError(t, lp.Print(&tree, 0, memhooks.InUse))
	assert.Contains(t, tree.String(), "memhooks_test.askLarge (0.00B, 1.06MB)")

	// The pprof profile, parsed back.
	path := filepath.Join(t.TempDir(), "mem.pprof")
	f, err := os.Create(path)
	require.NoError(t, err)
	require.NoError(t, lp.WriteProfile(f))
	require.NoError(t, f.Close())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	prof, err := profile.ParseData(raw)
	require.NoError(t, err)
	require.NoError(t, prof.CheckValid())
	var types []string
	for _, st := range prof.SampleType {
		types = append(types, st.Type+"/"+st.Unit)
	}
	assert.Equal(t, []string{"alloc_objects/count", "alloc_space/bytes", "inuse_objects/count", "inuse_space/bytes", "acquired_objects/count", "acquired_space/bytes"}, types)
	assert.Equal(t, "inuse_space", prof.DefaultSampleType)
	found := map[string][]int64{}
	for _, s := range prof.Sample {
		found[s.Location[0].Line[0].Function.Name] = s.Value
	}
	assert.Equal(t, []int64{2, 2 * small, 1, small, 1, small}, found["github.com/clpool/clpool/mempool/memhooks_test.askSmall"])
	assert.Equal(t, []int64{1, large, 0, 0, 1, large}, found["github.com/clpool/clpool/mempool/memhooks_test.askLarge"])

	// go tool pprof reads it and shows device memory by function.
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("reading the profile back needs the go command (go tool pprof), which is not installed here")
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", "-sample_index=alloc_space", path).CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "askLarge")
	assert.Contains(t, string(out), "askSmall")
	require.NoError(t, s2.Close())
}

func TestRecordedTraceReplaysToTheSameCounters(t *testing.T) {
	p := pooltest.New(t, nil)
	var out bytes.Buffer
	rec := memhooks.NewTraceRecorder(&out)
	p.AddHook(rec)

	// A workload: a sliding window over sizes that share and miss bins.
	churn(t, p.Allocate, 400)
	require.NoError(t, rec.Flush())
	want := p.Stats()

	assert.True(t, strings.HasPrefix(out.String(), "op\tid\tsize\tt\n"), "a timed trace")
	events, err := trace.Read(&out)
	require.NoError(t, err)
	withoutTimes(t, events) // every event has a time, in order
	sum := trace.Summarize(events)
	assert.Equal(t, 400, sum.Allocs)
	assert.Equal(t, 400, sum.Frees)

	q2 := cltest.Queue(t)
	imm, err := allocator.NewImmediate(q2, cl.MemReadWrite)
	require.NoError(t, err)
	p2, err := mempool.New(imm)
	require.NoError(t, err)
	defer p2.Close()
	require.NoError(t, trace.Replay(events, p2.Allocate, (*mempool.PooledBuffer).Close))
	got := p2.Stats()
	assert.Equal(t, want.Hits, got.Hits)
	assert.Equal(t, want.Misses, got.Misses)
	assert.Equal(t, want.DeviceAllocs, got.DeviceAllocs)
	assert.Equal(t, want.PeakManagedBytes, got.PeakManagedBytes)
	assert.Equal(t, want.PeakActiveBytes, got.PeakActiveBytes)
	assert.Equal(t, want.HeldBlocks, got.HeldBlocks)
	assert.Equal(t, want.Allocation, got.Allocation)
	assert.Equal(t, want.Segment, got.Segment)
}

// A LineProfile names the call sites of a snapshot's active blocks.
func TestLineProfileNamesSnapshotSites(t *testing.T) {
	p := pooltest.New(t, nil)
	lp := memhooks.NewLineProfile()
	remove := p.AddHook(lp)
	defer remove()
	b, err := p.Allocate(1000) // the site the snapshot must name
	require.NoError(t, err)
	defer b.Close()

	site, ok := lp.Site(b.ID())
	require.True(t, ok)
	assert.Regexp(t, `^memhooks_test\.go:\d+:memhooks_test\.TestLineProfileNamesSnapshotSites$`, site)
	var sites []string
	for _, seg := range p.Snapshot().Segments {
		for _, blk := range seg.Blocks {
			if blk.State == mempool.StateActive {
				sites = append(sites, blk.Site)
			}
		}
	}
	assert.Equal(t, []string{site}, sites)
	_, ok = lp.Site(12345)
	assert.False(t, ok, "no such block")
}

// A History hook's events come with the pool's snapshots.
func TestSnapshotCarriesTheHistory(t *testing.T) {
	p := pooltest.New(t, nil)
	h := memhooks.NewHistory(8)
	remove := p.AddHook(h)
	defer remove()
	b, err := p.Allocate(1000)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	s := p.Snapshot()
	blocks := trace.Blocks(s.History)
	require.Len(t, blocks, 2, "the block's allocation and free, besides its segment's")
	assert.Equal(t, h.Events(), s.History)
	assert.Equal(t, int64(1000), blocks[0].Size)
}
