package mempool

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Expected (held if it passes): parseLimit after 7f2ddc2 reads whole
// numbers exactly, refuses what is not a size or is outside 1 byte to
// math.MaxInt64, and reads fractions and exponents as before.
func TestHostileS44bParseLimitEdges(t *testing.T) {
	const total = 8 << 30
	good := map[string]int64{
		"1e3":                  1000,
		"+5":                   5,
		" 5 ":                  5,
		"5 MiB":                5 << 20,
		"5MiB ":                5 << 20,
		"9223372036854775807":  math.MaxInt64,
		"9223372036854775807B": math.MaxInt64,
		"9007199254740993":     1<<53 + 1,
		"8388607TiB":           8388607 << 40,
		"9223372TB":            9223372 * 1e12,
		"1.5GiB":               3 << 29,
		"0.5K":                 512,
		"1":                    1,
		"0005":                 5,
	}
	for in, want := range good {
		got, err := parseLimit(in, total)
		if assert.NoError(t, err, "%q", in) {
			assert.Equal(t, want, got, "%q", in)
		}
	}
	for _, bad := range []string{
		"0", "-0", "-5", "+0", "0x10", "9000000TiB", "8388608TiB", "9223373TB",
		"9223372036854775808", "99999999999999999999", "-9223372036854775808",
		"8EiB", "5 b", "KiB", "", " ", "NaN", "Inf", "+Inf", "1e19", "0.4", "0.4B",
		"5 5", "5MiBB", "MiB5",
	} {
		got, err := parseLimit(bad, total)
		assert.Error(t, err, "%q gave %d", bad, got)
	}
}

// Expected: parseLimit reads a whole number of bytes exactly, past 2^53,
// whatever way of writing it parseLimit accepts (7f2ddc2: "LimitEnv's
// whole bytes exact past 2^53"): it accepts digits separated by
// underscores ("1_000" is 1000, through strconv.ParseFloat), so
// "9_007_199_254_740_993" is either refused or 2^53+1, as
// "9007199254740993" is.
//
// Found on 7f2ddc2 (review s44b), fixed: the whole-number path (strconv.ParseInt, base 10)
// refuses underscores, and the float path reads the number: 2^53, one
// byte off; "9_223_372_036_854_775_807" (math.MaxInt64, accepted without
// the underscores) is refused as outside 1 byte to 8 EiB.
func TestHostileS44bParseLimitUnderscoredWholeExact(t *testing.T) {
	for in, want := range map[string]int64{
		"9_007_199_254_740_993":     1<<53 + 1,
		"9_223_372_036_854_775_807": math.MaxInt64,
	} {
		got, err := parseLimit(in, 0)
		if err == nil {
			assert.Equal(t, want, got, "%q read through float64", in)
			continue
		}
		plain, perr := parseLimit(strings.ReplaceAll(in, "_", ""), 0)
		assert.NoError(t, perr)
		t.Errorf("%q refused (%v) while %d, the same number without underscores, is accepted as %d; and \"1_000\" is accepted", in, err, want, plain)
	}
}
