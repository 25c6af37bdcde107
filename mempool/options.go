package mempool

import (
	"fmt"
	"os"
	"strings"
)

// This file is the pool's options. Each Option sets a field of a config;
// New validates the config once (validate) and resolves it into the
// Pool's fields, which keep resolved values only.

// Option configures a Pool.
type Option func(*config)

// config is what the options say, before New validates and resolves it.
type config struct {
	leadingBits int
	arena       bool
	maxSplit    int64
	limit       int64   // WithLimit's, or resolved from the fraction or LimitEnv
	limitFrac   float64 // WithLimitFraction's, if byFrac
	byFrac      bool    // the last limit option was WithLimitFraction
	limitSet    bool    // WithLimit or WithLimitFraction was given
	dropSafety  bool
	noCaches    bool      // queues cache no blocks (tests compare pools with and without)
	san         sanConfig // WithSanitizer and WithSanitizerOutput (sanitize.go)
}

// defaultConfig is a config before any option.
func defaultConfig() config { return config{leadingBits: 4, dropSafety: true} }

// WithLeadingBits sets leading_bits_in_bin_id, the bits of a size after its
// leading one that name its bin (with WithArena, its size class): more bits
// waste less memory per block and make more bins. The default is 4 (a block
// wastes at most 1/16 of its size). New accepts 0 to MaxLeadingBits.
func WithLeadingBits(n int) Option { return func(c *config) { c.leadingBits = n } }

// WithLimit caps the pool's managed bytes (active plus held, as CuPy counts
// them), and with them the pool's device memory: segments being given back
// count against the cap until they are, so that goroutines racing a
// FreeHeld never hold more on the device at once. A request that would
// pass the cap goes down the out-of-memory ladder (see the package doc):
// it frees held memory and tries a segment of the request's own block
// size (with exact bins, its bin's); if nothing serves it, it fails with
// ErrOutOfMemory. A request whose own block could not fit even in an
// empty pool fails at once, keeping what the pool holds. 0 means no limit.
// Without WithLimit or WithLimitFraction, the limit comes from the
// environment (LimitEnv); SetLimit changes it later.
func WithLimit(bytes int64) Option {
	return func(c *config) { c.limit, c.byFrac, c.limitSet = bytes, false, true }
}

// WithLimitFraction caps the pool's managed bytes at a fraction of the
// device's global memory (CL_DEVICE_GLOBAL_MEM_SIZE), as torch's
// set_per_process_memory_fraction does. The fraction is in (0, 1]; New
// fails if the allocator does not say its device. It replaces a WithLimit
// given before it, and the other way round.
func WithLimitFraction(f float64) Option {
	return func(c *config) { c.limitFrac, c.byFrac, c.limit, c.limitSet = f, true, 0, true }
}

// WithArena makes the pool a splitting arena instead of exact bins: it
// allocates segments sized to the pool (512 KiB first, each later one a
// twelfth of what the pool holds, or a request's own size) and cuts them
// into blocks, merging blocks given back with
// their free neighbours. It holds close to the live peak where exact bins
// can hold many times it; see the package doc.
func WithArena() Option { return func(c *config) { c.arena = true } }

// WithMaxSplitSize makes requests over n bytes oversize, as torch's
// max_split_size_mb does: each gets a segment of its own that is never
// split, and only oversize requests reuse it, so that large blocks are not
// cut into pieces that no large request can use again: no small array
// outliving a large temporary pins its segment. The price is device
// allocations: a wholly free oversize segment is freed when the pool needs
// room, and a large request that finds none free of its size (less than
// 20 MiB more) makes one (see BENCHMARKS.md, session 45). It needs
// WithArena.
func WithMaxSplitSize(n int64) Option { return func(c *config) { c.maxSplit = n } }

// WithDropSafety sets whether a PooledBuffer dropped without Close goes back
// to the pool after garbage collection (the default, as in PyOpenCL). Each
// allocation then carries a finalizer, which costs more than the rest of a
// pool hit together. A program that Closes every buffer can turn it off:
// a hit then costs a fraction as much and allocates nothing (the pool
// hands out PooledBuffers from slabs). The price: a buffer dropped without
// Close is never given back, and its device memory leaks until the program
// exits, as an unreleased cl.Buffer's would.
func WithDropSafety(on bool) Option { return func(c *config) { c.dropSafety = on } }

// validate checks the options, for the constructor called call.
func (c *config) validate(call string) error {
	switch {
	case c.leadingBits < 0 || c.leadingBits > MaxLeadingBits:
		return fmt.Errorf("mempool: %s: leading bits %d outside 0..%d", call, c.leadingBits, MaxLeadingBits)
	case c.limit < 0:
		return fmt.Errorf("mempool: %s: negative limit %d", call, c.limit)
	case c.maxSplit < 0:
		return fmt.Errorf("mempool: %s: negative max split size %d", call, c.maxSplit)
	case c.maxSplit > 0 && !c.arena:
		return fmt.Errorf("mempool: %s: WithMaxSplitSize needs WithArena: exact bins never split", call)
	case c.byFrac && !(c.limitFrac > 0 && c.limitFrac <= 1):
		return fmt.Errorf("mempool: %s: limit fraction %v outside (0, 1]", call, c.limitFrac)
	}
	return nil
}

// resolveLimit returns the limit the config sets, given the device's
// global memory (0: unknown): WithLimit's, WithLimitFraction's share of
// total or, when no option set one, LimitEnv's.
func (c *config) resolveLimit(call string, total int64) (int64, error) {
	switch {
	case !c.limitSet:
		v, ok := os.LookupEnv(LimitEnv)
		if !ok || strings.TrimSpace(v) == "" {
			return 0, nil
		}
		n, err := parseLimit(v, total)
		if err != nil {
			return 0, fmt.Errorf("mempool: %s: %s=%q: %w", call, LimitEnv, v, err)
		}
		return n, nil
	case !c.byFrac:
		return c.limit, nil
	case total == 0:
		return 0, fmt.Errorf("mempool: %s: a limit fraction needs the device's memory size, and the allocator does not say its device", call)
	}
	return max(int64(c.limitFrac*float64(total)), 1), nil
}
