package mempool

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// parseLimit needs no OpenCL: its table runs anywhere.
func TestParseLimit(t *testing.T) {
	const total = 8 << 30
	for _, tc := range []struct {
		in   string
		want int64
	}{
		{"1073741824", 1 << 30},
		{"2GiB", 2 << 30},
		{"2G", 2 << 30},
		{"1.5 GiB", 3 << 29},
		{"512MB", 512e6},
		{"4KiB", 4096},
		{"100B", 100},
		{"50%", 4 << 30},
		{"12.5 %", 1 << 30},
		{"100%", total},
	} {
		got, err := parseLimit(tc.in, total)
		require.NoError(t, err, "%q", tc.in)
		assert.Equal(t, tc.want, got, "%q", tc.in)
	}
	for _, bad := range []string{"", "x", "-5", "0", "0.1", "0%", "101%", "NaN", "Inf", "1e19", "2 GiBs", "%"} {
		_, err := parseLimit(bad, total)
		assert.Error(t, err, "%q", bad)
	}
	_, err := parseLimit("50%", 0)
	assert.ErrorContains(t, err, "device's memory size")
}
