package mempool_test

import (
	"bufio"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/clpool/clpool/mempool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readBins reads rows of `leading_bits size bin alloc_size` written by PyOpenCL.
func readBins(t *testing.T, path string) [][4]int64 {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	var rows [][4]int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 4 || fields[0] == "leading_bits" || strings.HasPrefix(fields[0], "#") {
			continue
		}
		var row [4]int64
		for i, s := range fields {
			row[i], err = strconv.ParseInt(s, 10, 64)
			require.NoError(t, err)
		}
		rows = append(rows, row)
	}
	require.NoError(t, sc.Err())
	return rows
}

func TestBinsAreExactlyPyOpenCLs(t *testing.T) {
	for _, file := range []string{"pyopencl_bins.tsv", "pyopencl_bins_big.tsv"} {
		rows := readBins(t, "../testdata/"+file)
		require.NotEmpty(t, rows)
		for _, r := range rows {
			lb, size, bin, alloc := int(r[0]), r[1], uint32(r[2]), r[3]
			require.Equal(t, bin, mempool.BinNumber(size, lb), "%s: BinNumber(%d, %d)", file, size, lb)
			require.Equal(t, alloc, mempool.AllocSize(bin, lb), "%s: AllocSize(%d, %d)", file, bin, lb)
		}
		t.Logf("%s: %d rows agree", file, len(rows))
	}
}

// referenceBin computes a bin from the binary digits of size, the way the
// definition reads: the position of the leading one, then the next lb digits
// (padded with zeros for short sizes).
func referenceBin(size int64, lb int) (bin uint32, alloc int64) {
	if size <= 1 {
		return 0, 1
	}
	digits := strconv.FormatInt(size, 2)
	l := len(digits) - 1
	mant := digits[1:] + strings.Repeat("0", lb)
	m, _ := strconv.ParseUint("0"+mant[:lb], 2, 64)
	bin = uint32(l)<<lb | uint32(m)
	// The largest number with the same leading digits: keep the 1+lb
	// leading digits (of the padded size) and set every digit after them.
	head := "1" + mant[:lb]
	if l >= lb {
		a, _ := strconv.ParseInt(head+strings.Repeat("1", l-lb), 2, 64)
		return bin, a
	}
	a, _ := strconv.ParseInt(head[:l+1], 2, 64)
	return bin, a
}

func TestBinsAgainstTheDefinition(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(size int64, lb int) {
		wantBin, wantAlloc := referenceBin(size, lb)
		bin := mempool.BinNumber(size, lb)
		if bin != wantBin || mempool.AllocSize(bin, lb) != wantAlloc {
			t.Fatalf("lb %d size %d: bin %d alloc %d, want %d %d", lb, size, bin, mempool.AllocSize(bin, lb), wantBin, wantAlloc)
		}
	}
	for lb := 0; lb <= 10; lb++ {
		for size := int64(0); size <= 1<<12; size++ {
			check(size, lb)
		}
		for e := 1; e <= 40; e++ {
			for k := int64(-8); k <= 8; k++ {
				check(1<<e+k, lb)
			}
		}
		for range 20000 {
			check(rng.Int64N(1<<(1+rng.IntN(40))), lb)
		}
	}
}

// Ported from PyOpenCL's test_mempool_2, with its waste bound made exact.
func TestBinRoundTripAndWaste(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	sizes := []int64{1 << 30}
	for range 2000 {
		sizes = append(sizes, rng.Int64N(1<<31)>>rng.IntN(32))
	}
	for lb := 0; lb <= mempool.MaxLeadingBits; lb++ {
		for _, s := range sizes {
			bin := mempool.BinNumber(s, lb)
			alloc := mempool.AllocSize(bin, lb)
			require.GreaterOrEqual(t, alloc, s, "lb %d size %d", lb, s)
			require.Equal(t, bin, mempool.BinNumber(alloc, lb), "lb %d: BinNumber(AllocSize(%d))", lb, bin)
			waste := float64(s)*(1+1/float64(int64(1)<<lb)) + 1
			require.LessOrEqual(t, float64(alloc), waste, "lb %d size %d alloc %d", lb, s, alloc)
		}
	}
}

func TestBinEdgeCases(t *testing.T) {
	for lb := 0; lb <= mempool.MaxLeadingBits; lb++ {
		assert.Equal(t, uint32(0), mempool.BinNumber(0, lb))
		assert.Equal(t, uint32(0), mempool.BinNumber(1, lb))
		assert.Equal(t, int64(1), mempool.AllocSize(0, lb))
		// The largest size there is fits its bin without overflow.
		const maxSize = int64(^uint64(0) >> 1)
		assert.Equal(t, maxSize, mempool.AllocSize(mempool.BinNumber(maxSize, lb), lb))
	}
}
