package mempool

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// This file is the pool's limit: the environment variable, parsing, and
// SetLimit. WithLimit and WithLimitFraction (options.go) set it; the core
// enforces it when it reserves a segment (core.go).

// LimitEnv is the environment variable that sets the limit of a pool made
// without WithLimit or WithLimitFraction, as CUPY_GPU_MEMORY_LIMIT does
// for CuPy: a number of bytes ("1073741824"), with a unit ("2GiB",
// "512MB"), or a percentage of the device's global memory ("50%"). New
// fails on a value it cannot parse.
const LimitEnv = "CLPOOL_MEMORY_LIMIT"

// Limit returns the pool's limit in bytes; 0 if none.
func (p *Pool) Limit() int64 {
	p.lock()
	defer p.mu.Unlock()
	return p.limit
}

// SetLimit changes the pool's limit at run time, as CuPy's
// MemoryPool.set_limit: 0 removes it; a negative limit is an error and
// changes nothing. A limit below the bytes the pool manages makes it free
// held segments, largest first, until it is within the limit or nothing
// held is left; memory in use stays, and later requests fail until enough
// of it is given back. It returns the allocator's errors from freeing.
func (p *Pool) SetLimit(bytes int64) error {
	if bytes < 0 {
		return fmt.Errorf("mempool: SetLimit(%d): negative limit", bytes)
	}
	p.lock()
	p.limit = bytes
	p.l.s.Limit = bytes
	over := p.l.reserved() > bytes
	p.mu.Unlock()
	p.freed.Broadcast() // room for a request that waits (awaitInFlight)
	if bytes == 0 || !over {
		return nil // nothing to free: no drain either (s45e: it emptied the quarantine)
	}
	return p.freeHeldWhile(func() bool { return p.l.reserved() > bytes }) // under p.mu
}

// units are the suffixes parseLimit knows, longest first within a prefix.
var units = []struct {
	suffix string
	scale  int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40},
	{"B", 1},
}

// parseLimit parses a limit as LimitEnv gives it: bytes, bytes with a
// unit (binary KiB..TiB and the bare K, M, G, T as CuPy and torch read
// them; decimal KB..TB), or a percentage of total, the device's memory (0:
// unknown). The result is positive: "0" and "0%" are refused, as a limit
// of nothing would refuse every request (unset the variable instead).
func parseLimit(s string, total int64) (int64, error) {
	s = strings.TrimSpace(s)
	if pct, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(strings.TrimSpace(pct), 64)
		if err != nil || !(f > 0 && f <= 100) {
			return 0, fmt.Errorf("percentage %q not in (0, 100]", pct)
		}
		if total == 0 {
			return 0, fmt.Errorf("a percentage needs the device's memory size, and the allocator does not say its device")
		}
		return max(int64(f/100*float64(total)), 1), nil
	}
	num, scale := s, int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, scale = strings.TrimSpace(n), u.scale
			break
		}
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) {
		return 0, fmt.Errorf("%q is not a size: want bytes (1073741824), a size with a unit (2GiB, 512MB) or a percentage (50%%)", s)
	}
	// A whole number (its underscores placed as ParseFloat allows) is
	// exact, past float64's 2^53.
	if n, err := strconv.ParseInt(strings.ReplaceAll(num, "_", ""), 10, 64); err == nil {
		if n < 1 || n > math.MaxInt64/scale {
			return 0, fmt.Errorf("size %q outside 1 byte to 8 EiB", s)
		}
		return n * scale, nil
	}
	bytes := f * float64(scale)
	if !(bytes >= 1) || bytes >= math.MaxInt64 {
		return 0, fmt.Errorf("size %q outside 1 byte to 8 EiB", s)
	}
	return int64(bytes), nil
}
