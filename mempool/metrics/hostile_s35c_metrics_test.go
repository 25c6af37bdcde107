package metrics_test

// Hostile review s35c: the collector against its package doc.

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// PASSES (exploration): every metric the collector describes is one the
// package doc names (clpool_X with its four suffixes for each torch
// statistic X it lists, the oversize ones, the pool's and the queues'),
// and every name the doc gives is described.
func TestHostileS35cDocNamesEveryMetric(t *testing.T) {
	ch := make(chan *prometheus.Desc, 256)
	metrics.NewCollector("x", nil).Describe(ch)
	close(ch)
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	var described []string
	for d := range ch {
		described = append(described, fq.FindStringSubmatch(d.String())[1])
	}

	doc, err := os.ReadFile("doc.go")
	require.NoError(t, err)
	text := string(doc)
	var named []string
	torch := regexp.MustCompile(`\(allocation, allocated_bytes[^)]*\)`).FindString(text)
	require.NotEmpty(t, torch)
	for _, x := range strings.Split(strings.Trim(torch, "()"), ",") {
		x = strings.TrimSpace(strings.Join(strings.Fields(strings.ReplaceAll(x, "//", "")), ""))
		for _, suffix := range []string{"", "_peak", "_allocated_total", "_freed_total"} {
			named = append(named, "clpool_"+x+suffix)
		}
	}
	for _, x := range []string{"clpool_oversize_allocations", "clpool_oversize_segments"} {
		require.Contains(t, text, x)
		for _, suffix := range []string{"", "_peak", "_allocated_total", "_freed_total"} {
			named = append(named, x+suffix)
		}
	}
	for _, m := range regexp.MustCompile(`clpool_[a-z_]+`).FindAllString(text, -1) {
		if m == "clpool_X" || m == "clpool_X_" || strings.HasPrefix(m, "clpool_oversize") {
			continue
		}
		named = append(named, strings.TrimSuffix(m, "_"))
	}
	slices.Sort(named)
	named = slices.Compact(named)
	slices.Sort(described)
	assert.Equal(t, named, described)
}

// PASSES (exploration): a pool closed under the collector, and one pool
// under two names, scrape without error in a pedantic registry; a name
// taken is refused.
func TestHostileS35cClosedPoolAndNames(t *testing.T) {
	q := cltest.Queue(t)
	p := pooltest.New(t, q)
	b, err := p.Allocate(1000)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	c := metrics.NewCollector("main", p)
	require.ErrorIs(t, c.Add("main", p), metrics.ErrNameTaken)
	require.NoError(t, c.Add("again", p))
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	require.NoError(t, p.Close())
	mfs, err := reg.Gather()
	require.NoError(t, err)
	pools := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pool" {
					pools[l.GetValue()] = true
				}
			}
		}
	}
	assert.Equal(t, map[string]bool{"main": true, "again": true}, pools)
}
