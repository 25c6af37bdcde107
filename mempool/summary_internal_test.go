package mempool

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// A count cell is 10 characters for every count, in torch's units: plain
// below 750,000, then K, M and on, truncated.
func TestCountCellFitsEveryCount(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "      0   "},
		{749_999, " 749999   "},
		{750_000, "    750 K "},
		{10_000_000, "  10000 K "},
		{750_000_000, "    750 M "},
		{math.MaxInt64, "   9223 P "},
	} {
		got := countCell(c.n, countUnit(c.n))
		assert.Equal(t, c.want, got, "%d", c.n)
		assert.Len(t, got, 10, "%d", c.n)
	}
	assert.Equal(t, "     12 K ", countCell(12_345, countUnit(1_000_000)), "a cell takes its column's unit, from the count of all blocks")
}
