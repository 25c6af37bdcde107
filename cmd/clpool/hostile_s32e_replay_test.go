package main

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// replay's header printed a peak that trace.Summarize saturated at
// math.MaxInt64 as if it were exact (hostile review s32e).
func TestReplayHeaderSaysASaturatedPeakIsAtLeast(t *testing.T) {
	assert.Equal(t, "9223372036854775807 or more", atLeast(math.MaxInt64))
	assert.Equal(t, "4096", atLeast(4096))
}
