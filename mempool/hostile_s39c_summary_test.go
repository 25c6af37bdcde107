package mempool_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/clpool/clpool/internal/pooltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Fixed this session (it failed before): a count of ten million or more breaks the summary's table.
//
// Contract: WriteSummary writes "the table of torch.cuda.memory_summary"
// (summary.go: "The table is 77 characters wide"; TestWriteSummaryHeader
// pins every line at 77 runes). torch keeps its count cells the width of
// the table past a million by printing them in K and M (_format_count);
// countCell prints "%7d   ", so a count of 10,000,000 (a long-running
// program's Tot Alloc of allocations, a few seconds of Allocate+Close at
// the pool's speed) takes 11 characters of a 10-character cell, and the
// rows of allocation counts are one character wider than the rest.
func TestHostileS39cSummaryCountsPastTenMillionKeepTheTable(t *testing.T) {
	if testing.Short() {
		t.Skip("ten million Allocate+Close")
	}
	p := pooltest.New(t, nil, noLimit, mempool.WithDropSafety(false))
	const n = 10_000_000
	for range n {
		b, err := p.Allocate(64)
		if err != nil {
			require.NoError(t, err)
		}
		if err := b.Close(); err != nil {
			require.NoError(t, err)
		}
	}
	st := p.Stats()
	require.GreaterOrEqual(t, st.Allocation.All.Allocated, int64(n))
	got := summaryOf(t, p)
	for i, line := range strings.Split(strings.TrimSuffix(got, "\n"), "\n") {
		assert.Equal(t, 77, utf8.RuneCountInString(line), "line %d: %q", i+1, line)
	}
}
