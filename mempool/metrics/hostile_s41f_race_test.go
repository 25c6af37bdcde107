package metrics_test

// Hostile review s41f: the collector scraped through promhttp while its
// pools churn.

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// s41fScrape is one scrape in the text format: each sample by series
// (`name{labels}` as written), and each family's TYPE.
type s41fScrape struct {
	samples map[string]float64
	types   map[string]string
}

// s41fGet scrapes url; it returns an error rather than failing, for use
// off the test's goroutine.
func s41fGet(url string) (s41fScrape, error) {
	sc := s41fScrape{samples: map[string]float64{}, types: map[string]string{}}
	resp, err := http.Get(url)
	if err != nil {
		return sc, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var b strings.Builder
		lines := bufio.NewScanner(resp.Body)
		for lines.Scan() {
			b.WriteString(lines.Text() + "\n")
		}
		return sc, fmt.Errorf("status %d: %s", resp.StatusCode, b.String())
	}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 1<<20), 1<<20)
	for lines.Scan() {
		line := lines.Text()
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			name, typ, _ := strings.Cut(f, " ")
			sc.types[name] = typ
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i <= 0 {
			return sc, fmt.Errorf("not a sample: %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return sc, fmt.Errorf("the value of %q: %w", line, err)
		}
		if _, dup := sc.samples[line[:i]]; dup {
			return sc, fmt.Errorf("series twice: %q", line[:i])
		}
		sc.samples[line[:i]] = v
	}
	return sc, lines.Err()
}

// s41fFamily returns the family name of a series.
func s41fFamily(series string) string {
	name, _, _ := strings.Cut(series, "{")
	return name
}

// s41fWithSize returns series with its size label's value replaced.
func s41fWithSize(series, size string) string {
	for _, s := range []string{`size="all"`, `size="small"`, `size="large"`} {
		if strings.Contains(series, s) {
			return strings.Replace(series, s, `size="`+size+`"`, 1)
		}
	}
	return ""
}

// s41fCheck checks what one scrape must hold on its own: size="all" is
// small plus large (peaks apart), every peak at least its current value,
// all's peak between the larger of small's and large's peaks and their
// sum, fragmentation in [0, 1].
func s41fCheck(t *testing.T, sc s41fScrape) {
	t.Helper()
	cached := map[string]float64{} // the queues' cached blocks, by pool
	for series, v := range sc.samples {
		fam := s41fFamily(series)
		assert.GreaterOrEqual(t, v, float64(0), "%s below zero", series)
		if fam == "clpool_queue_cached_blocks" {
			_, rest, _ := strings.Cut(series, `pool="`)
			pool, _, _ := strings.Cut(rest, `"`)
			cached[pool] += v
		}
		if fam == "clpool_fragmentation_ratio" {
			assert.True(t, v >= 0 && v <= 1, "%s = %v", series, v)
		}
		if !strings.Contains(series, `size="all"`) {
			if strings.HasSuffix(fam, "_peak") {
				cur := strings.Replace(series, "_peak{", "{", 1)
				assert.GreaterOrEqual(t, v, sc.samples[cur], "%s below the current value", series)
			}
			continue
		}
		small, large := sc.samples[s41fWithSize(series, "small")], sc.samples[s41fWithSize(series, "large")]
		if strings.HasSuffix(fam, "_peak") {
			assert.GreaterOrEqual(t, v, max(small, large), "%s: all's peak below a size's", series)
			assert.LessOrEqual(t, v, small+large, "%s: all's peak over the sum of the sizes'", series)
			for _, sz := range []string{"all", "small", "large"} {
				s := s41fWithSize(series, sz)
				cur := strings.Replace(s, "_peak{", "{", 1)
				assert.GreaterOrEqual(t, sc.samples[s], sc.samples[cur], "%s below the current value", s)
			}
			continue
		}
		assert.Equal(t, small+large, v, "%s: all != small + large", series)
	}
	for series, v := range sc.samples {
		if s41fFamily(series) == "clpool_held_blocks" {
			_, rest, _ := strings.Cut(series, `pool="`)
			pool, _, _ := strings.Cut(rest, `"`)
			assert.LessOrEqual(t, cached[pool], v, "%s: the queues cache more blocks than the pool holds", series)
		}
	}
}

// s41fEpoch counts calls of a reset that began and that ended.
type s41fEpoch struct{ began, ended atomic.Int64 }

func (e *s41fEpoch) do(f func()) {
	e.began.Add(1)
	f()
	e.ended.Add(1)
}

// PASSES (guard): scrapes through a real promhttp handler (pedantic registry: every
// metric checked against Describe, no series twice) race two pools over
// budgets (OOMs), one with queue caches on: goroutines on long-lived
// queues named alike and oddly, task queues named alike that are made and
// released, FreeHeld, ResetPeak, ResetAccumulated, Remove and Add of a
// pool, then Close of one pool. Each scrape must succeed and agree with
// itself; between two scrapes, every counter may only go down across a
// ResetAccumulated, and every peak only across a ResetPeak. At rest, every
// series equals the Stats taken with it.
func TestHostileS41fScrapesRaceChurn(t *testing.T) {
	cltest.Watchdog(t, 150*time.Second)
	q := cltest.Queue(t)
	longQ := []*cl.CommandQueue{cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, 0), cltest.SecondQueue(t, q, cl.QueueOutOfOrder)}
	names := []string{"copy", "copy", "we\"ird\n\\ {label}=\"x\""}

	var pools []*mempool.Pool
	for _, opts := range [][]mempool.Option{
		{mempool.WithDropSafety(false)},
		{mempool.WithArena(), mempool.WithMaxSplitSize(1 << 20)},
	} {
		imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
		require.NoError(t, err)
		p, err := mempool.New(allocator.NewBudget(imm, 3<<20), opts...)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, p.Close()) })
		pools = append(pools, p)
	}
	c := metrics.NewCollector("bins", pools[0])
	require.NoError(t, c.Add("arena", pools[1]))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	url := serve(t, reg)

	var accEpoch, peakEpoch s41fEpoch
	stop := make(chan struct{})
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	var wg sync.WaitGroup
	var taskQueues atomic.Int64
	for pi, p := range pools {
		for qi, lq := range longQ {
			wg.Go(func() {
				a := p.On(lq, mempool.QueueName(names[qi]))
				var kept []*mempool.PooledBuffer
				for i := 0; !stopped(); i++ {
					size := int64(1 + (i*7919+qi*104729+pi)%(700<<10))
					if i%5 == 0 {
						size = 4000 // a cache's size
					}
					b, err := a.Allocate(size)
					if err != nil {
						if !errors.Is(err, mempool.ErrPoolClosed) {
							assert.ErrorIs(t, err, mempool.ErrOutOfMemory)
						}
					} else {
						kept = append(kept, b)
					}
					if len(kept) > 2 || (err != nil && len(kept) > 0) {
						assert.NoError(t, kept[0].Close())
						kept = kept[1:]
					}
				}
				for _, b := range kept {
					assert.NoError(t, b.Close())
				}
			})
		}
		wg.Go(func() { // a queue per task, all named "task"
			for n := 0; n < 150 && !stopped(); n++ {
				tq, err := cl.NewCommandQueue(q.Context(), q.Device(), 0)
				if !assert.NoError(t, err) {
					return
				}
				taskQueues.Add(1)
				a := p.On(tq, mempool.QueueName("task"))
				closed := false
				for range 3 {
					b, err := a.Allocate(5000)
					if err == nil {
						assert.NoError(t, b.Close())
					}
					closed = closed || errors.Is(err, mempool.ErrPoolClosed)
				}
				assert.NoError(t, tq.Release())
				if closed {
					return
				}
			}
		})
	}
	resets := make(chan int, 64) // the main goroutine asks, at a few scrapes, for resets that race the next
	wg.Go(func() {
		for i := 0; !stopped(); i++ {
			select {
			case r := <-resets:
				if r%2 == 0 {
					peakEpoch.do(pools[r/2%2].ResetPeak)
				} else {
					accEpoch.do(pools[r/2%2].ResetAccumulated)
				}
			default:
			}
			if i%3 == 0 {
				_ = pools[i%2].FreeHeld()
			}
			for range 100 {
				runtime.Gosched()
			}
		}
	})

	type mark struct {
		sc                s41fScrape
		accEnded, pkEnded int64 // resets ended before the scrape
	}
	var prev *mark
	compared := 0
	const scrapes = 40
	for i := range scrapes {
		if i == scrapes/2 {
			assert.True(t, c.Remove("arena"))
			require.NoError(t, c.Add("arena", pools[1]))
		}
		if i == 3*scrapes/4 {
			require.NoError(t, pools[0].Close()) // its goroutines get ErrPoolClosed from here on
		}
		if i%6 == 5 {
			resets <- i / 6
		}
		cur := mark{accEnded: accEpoch.ended.Load(), pkEnded: peakEpoch.ended.Load()}
		sc, err := s41fGet(url)
		require.NoError(t, err, "scrape %d", i)
		cur.sc = sc
		s41fCheck(t, sc)
		accBegan, pkBegan := accEpoch.began.Load(), peakEpoch.began.Load()
		if prev != nil {
			noAccReset := accBegan == prev.accEnded
			noPeakReset := pkBegan == prev.pkEnded
			for series, v := range sc.samples {
				before, ok := prev.sc.samples[series]
				if !ok {
					continue
				}
				fam := s41fFamily(series)
				switch {
				case sc.types[fam] == "counter" && noAccReset:
					compared++
					assert.GreaterOrEqual(t, v, before, "scrape %d: counter %s went down with no ResetAccumulated", i, series)
				case strings.HasSuffix(fam, "_peak") && noPeakReset:
					assert.GreaterOrEqual(t, v, before, "scrape %d: peak %s went down with no ResetPeak", i, series)
				}
			}
		}
		prev = &cur
	}
	close(stop)
	wg.Wait()
	assert.Positive(t, compared, "counters compared across scrapes")
	t.Logf("%d counter comparisons, %d task queues, %d accumulated resets, %d peak resets, ooms %v", compared, taskQueues.Load(), accEpoch.ended.Load(), peakEpoch.ended.Load(), pools[1].Stats().OOMs)

	// At rest: every series equals Stats.
	sc, err := s41fGet(url)
	require.NoError(t, err)
	s41fCheck(t, sc)
	for name, p := range map[string]*mempool.Pool{"bins": pools[0], "arena": pools[1]} {
		s := p.Stats()
		s41fCompare(t, sc, name, p, s)
	}
}

// s41fCompare checks that every series of pool name in sc is the field of s
// it names.
func s41fCompare(t *testing.T, sc s41fScrape, name string, p *mempool.Pool, s mempool.Stats) {
	t.Helper()
	labels := fmt.Sprintf(`device=%q,pool=%q`, metrics.DeviceLabel(p.Device()), name)
	groups := map[string]mempool.StatGroup{
		"allocation": s.Allocation, "allocated_bytes": s.AllocatedBytes, "requested_bytes": s.RequestedBytes,
		"active": s.Active, "active_bytes": s.ActiveBlockBytes, "inactive_split": s.InactiveSplit,
		"inactive_split_bytes": s.InactiveSplitBytes, "segment": s.Segment, "reserved_bytes": s.ReservedBytes,
	}
	stat := func(prefix, lbl string, st mempool.Stat) {
		for suffix, v := range map[string]int64{"": st.Current, "_peak": st.Peak, "_allocated_total": st.Allocated, "_freed_total": st.Freed} {
			series := prefix + suffix + "{" + lbl + "}"
			got, ok := sc.samples[series]
			if assert.True(t, ok, "no series %s", series) {
				assert.Equal(t, float64(v), got, series)
			}
		}
	}
	for g, sg := range groups {
		stat("clpool_"+g, labels+`,size="all"`, sg.All)
		stat("clpool_"+g, labels+`,size="large"`, sg.Large)
		stat("clpool_"+g, labels+`,size="small"`, sg.Small)
	}
	stat("clpool_oversize_allocations", labels, s.OversizeAllocations)
	stat("clpool_oversize_segments", labels, s.OversizeSegments)
	for series, v := range map[string]float64{
		"clpool_hits_total": float64(s.Hits), "clpool_misses_total": float64(s.Misses),
		"clpool_device_allocs_total": float64(s.DeviceAllocs), "clpool_device_frees_total": float64(s.DeviceFrees),
		"clpool_free_errors_total": float64(s.FreeErrors), "clpool_reclaimed_total": float64(s.Reclaimed),
		"clpool_alloc_retries_total": float64(s.OOMRetries), "clpool_ooms_total": float64(s.OOMs),
		"clpool_held_blocks": float64(s.HeldBlocks), "clpool_held_bytes": float64(s.HeldBytes),
		"clpool_fragmentation_ratio": s.Fragmentation, "clpool_limit_bytes": float64(s.Limit),
		"clpool_max_split_size_bytes": float64(s.MaxSplitSize),
	} {
		got, ok := sc.samples[series+"{"+labels+"}"]
		if assert.True(t, ok, "no series %s", series) {
			assert.False(t, math.IsNaN(got))
			assert.Equal(t, v, got, series)
		}
	}
}
