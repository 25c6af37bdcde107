package mempool_test

import (
	"math"
	"strconv"
	"testing"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
)

// Review s44a: CLPOOL_MEMORY_LIMIT given as a number of bytes was parsed as a
// float64, so a byte count past 2^53 was not the limit the pool got (it
// was rounded to a neighbour), and math.MaxInt64 bytes, a limit WithLimit
// and SetLimit take, was refused as "outside 1 byte to 8 EiB" (it rounded
// up to 2^63).
//
// limit.go, LimitEnv: "a number of bytes ("1073741824"), with a unit
// ("2GiB", "512MB"), or a percentage of the device's global memory
// ("50%"). New fails on a value it cannot parse." A plain integer of
// bytes is a value it can parse; the pool must get exactly it, as
// WithLimit(n) gives exactly n.
func TestHostileS44aLimitEnvBytesAreExact(t *testing.T) {
	q := cltest.Queue(t)
	for _, n := range []int64{1<<53 + 1, 1<<62 + 1, math.MaxInt64} {
		t.Run(strconv.FormatInt(n, 10), func(t *testing.T) {
			t.Setenv(mempool.LimitEnv, strconv.FormatInt(n, 10))
			imm, err := allocator.NewImmediate(q, cl.MemReadWrite)
			if !assert.NoError(t, err) {
				return
			}
			p, err := mempool.New(imm)
			if !assert.NoError(t, err, "%s=%d is a number of bytes", mempool.LimitEnv, n) {
				return
			}
			defer p.Close()
			assert.Equal(t, n, p.Limit(), "%s=%d: the limit is not the bytes given", mempool.LimitEnv, n)
		})
	}
}
