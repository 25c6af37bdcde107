package mempool

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool/internal/policy"
)

// This file is the pool's memory sanitizer (WithSanitizer, or
// CLPOOL_SANITIZE=1): it finds writes past a block's end, writes through a
// buffer kept after Close, blocks dropped without Close and blocks still
// open at the pool's Close, each with the line that allocated the block.
//
// Its state lives here, outside the PooledBuffer the hot path carves, and
// the pool's files call it only where p.san is not nil: with the
// sanitizer off, it costs a nil check at a few places off the queue
// caches' path. With it on, the pool has no queue caches and the arena no
// quick lists, so that every block goes through the places it watches:
//
//   - Allocate (track): the request asks the policy for guard bytes more
//     (guardFor), so that every block has at least SanitizerGuard bytes
//     past its request inside the same cl_mem (a bin's rounding, where it
//     is that large, holds them already), and the sanitizer fills the
//     block's bytes past the request with guardByte, on the block's queue.
//   - Close (giveBackSanitized): ordered after every command that may
//     still use the block, as a handover orders a new user (its queue's
//     commands and RecordQueue's, through the markers and one barrier of
//     queue.go), a check kernel looks for a guard byte that changed
//     (OutOfBounds), then the whole block is filled with poisonByte and
//     put in a first-in first-out quarantine instead of the policy.
//   - A block leaves the quarantine (leaveQuarantine) when newer ones push
//     it out (more than SanitizerQuarantineBlocks blocks or
//     SanitizerQuarantineBytes bytes), when the pool drains what it sets
//     aside (FreeHeld, a SetLimit below what it manages, the out-of-memory
//     ladder, Close; a queue's FreeHeld, that queue's blocks), or at once if it
//     is closed while a request is on the out-of-memory ladder (the
//     quarantine yields to memory pressure, so that a sanitized program
//     still runs near its limit, though an arena's blocks cut while
//     others wait in quarantine spread further; a write after such a
//     Close goes unseen, and may land in the next user): a check kernel
//     looks for a poison byte that changed (WriteAfterClose) on the same
//     queue, and the block goes to the policy recording that queue, so
//     that the next user waits for the check. Findings checks the poison
//     of the blocks still in quarantine too.
//   - A check kernel writes the first bad offset into a slot of a small
//     result buffer and keeps its event; the sanitizer reads the results
//     (harvest) when Findings is called, at the pool's Close, and, without
//     waiting on the device, once batches of them have completed.
//   - A PooledBuffer collected without Close is a Dropped finding (the
//     pool sets the finalizer whatever WithDropSafety says); one still
//     open at Pool.Close is a LeakedAtClose finding.
//
// Blocks of an allocator without a queue are filled and checked on a queue
// of the sanitizer's own; the pool cannot order those checks after the
// commands of a queue it does not know, so such blocks must be closed
// once their commands have completed (as an SVM pool over a plain
// allocator.SVM already asks). The host waits for the sanitizer's own
// commands on such blocks (the guard's fill, the poison, the check as the
// block leaves quarantine), since no queue of the user's is ordered after
// them. A block whose queue was released is checked on the sanitizer's
// queue too (the released queue finished its commands); the sanitizer
// holds a block's queue (cl's Hold) while it calls on it, so that its
// owner's Release waits for those calls, one queue at a time, and under
// s.mu only tries the hold (TryHold).
//
// Lock order: a queue cache's lock, then p.mu, then s.mu. The sanitizer
// never takes p.mu (nor calls the pool) while it holds s.mu; it makes
// OpenCL calls under s.mu (its own), never under p.mu. harvestMu is taken
// before s.mu.

// SanitizeEnv is the environment variable that turns the sanitizer on for
// pools made without WithSanitizer (but those over pinned host memory):
// "1" (or "true") turns it on, "0", "false" or empty leaves it off; any
// other value makes New fail.
const SanitizeEnv = "CLPOOL_SANITIZE"

// The sanitizer's sizes.
const (
	// SanitizerGuard is the least number of guard bytes after every block
	// of a sanitized pool, inside the same cl_mem (fewer only where the
	// device's largest buffer leaves no room).
	SanitizerGuard = 256
	// SanitizerQuarantineBlocks and SanitizerQuarantineBytes bound the
	// quarantine: after a block enters it, the oldest leave while more
	// blocks or more bytes (of their blocks) wait. A block larger than
	// SanitizerQuarantineBytes leaves at once, pushing no other out: its
	// poison is checked then, after the commands enqueued before.
	SanitizerQuarantineBlocks = 256
	SanitizerQuarantineBytes  = 64 << 20
)

// The bytes the sanitizer fills memory with: a block's bytes past its
// request, and a closed block. A write of exactly these bytes goes
// unseen.
const (
	guardByte  = 0xFB
	poisonByte = 0xFD
)

// Batches of check results.
const (
	sanSlots    = 1024 // checks per result buffer
	sanKeepFull = 4    // full batches left to complete before a Close waits for the oldest
	sanDepth    = 32   // frames kept of an allocation's and a Close's stack
)

// WithSanitizer turns the pool's memory sanitizer on: it finds writes past
// the bytes a block was allocated for (OutOfBounds), writes to a block
// after its Close (WriteAfterClose), PooledBuffers the garbage collector
// reclaimed without Close (Dropped) and blocks still open at Pool.Close
// (LeakedAtClose), each with the line that allocated the block. Findings
// returns them; each is also printed to standard error as it is found
// (see WithSanitizerOutput). The environment variable CLPOOL_SANITIZE=1
// turns it on for pools made without this option (or WithoutSanitizer).
//
// A sanitized pool is slower and holds more memory: every block has
// SanitizerGuard bytes more, filled at Allocate; a Close enqueues a check
// kernel and a fill of the block; closed blocks wait in a quarantine
// (SanitizerQuarantineBlocks, SanitizerQuarantineBytes) before they are
// reused, but for memory pressure: the out-of-memory ladder takes them
// back, and a block closed while a request is on the ladder passes
// through at once (a write after its Close goes unseen); queue caches and the arena's quick lists are off; drop safety is
// on whatever WithDropSafety says; every Allocate takes its caller's stack.
// It serves pools of buffers and of SVM alike, and arrays over either
// work unchanged; not pools over pinned host memory (New fails: its
// commands on a mapped buffer are undefined), which SanitizeEnv leaves
// alone. See the package doc's Sanitizer section.
func WithSanitizer() Option { return func(c *config) { c.san.on, c.san.off = true, false } }

// WithoutSanitizer keeps the pool's memory sanitizer off whatever
// SanitizeEnv says, for a pool that is no part of the program the
// variable is meant for (a tool's replay of a trace, say). It replaces a
// WithSanitizer given before it, and the other way round.
func WithoutSanitizer() Option { return func(c *config) { c.san.on, c.san.off = false, true } }

// WithSanitizerOutput sets where the sanitizer prints each finding as it
// finds it, one line each: standard error by default, nowhere for a nil
// w. It does not turn the sanitizer on. A w that panics is called no more
// (the panic does not reach the pool's caller); Findings still has every
// finding. w is called with none of the pool's locks (or the
// sanitizer's) held, one call at a time across every pool made with this
// option (a Set's), each goroutine's lines in the order it printed them:
// it may call the pool, Close included. Lines printed while w runs, on
// any goroutine, are written by the call to w under way, once it
// returns.
func WithSanitizerOutput(w io.Writer) Option {
	out := newSanOutput(w) // one for every pool made with this option (a Set's)
	return func(c *config) { c.san.out, c.san.outSet = out, true }
}

// sanConfig is what WithSanitizer, WithoutSanitizer and
// WithSanitizerOutput say.
type sanConfig struct {
	on     bool
	off    bool       // WithoutSanitizer: SanitizeEnv is not read
	out    *sanOutput // nil: nowhere
	outSet bool
}

// resolveSanitizer reports whether the pool is sanitized (the options, or
// else SanitizeEnv), for the constructor called call, and if so sets what
// the sanitizer needs of the rest of the config: no queue caches, and drop
// safety.
func (c *config) resolveSanitizer(call string) (bool, error) {
	on := c.san.on
	if !on && !c.san.off {
		var err error
		if on, err = sanitizeEnv(call); err != nil {
			return false, err
		}
	}
	if on {
		c.noCaches, c.dropSafety = true, true
	}
	return on, nil
}

// sanitizeEnv reports whether SanitizeEnv asks for the sanitizer, or an
// error naming call for a value it does not know.
func sanitizeEnv(call string) (bool, error) {
	switch v := strings.TrimSpace(os.Getenv(SanitizeEnv)); v {
	case "1", "true":
		return true, nil
	case "", "0", "false":
		return false, nil
	default:
		return false, fmt.Errorf("mempool: %s: %s=%q: want 1 (or true) to sanitize, 0 (or false) or empty not to", call, SanitizeEnv, v)
	}
}

// FindingKind says what the sanitizer found.
type FindingKind uint8

// The kinds of findings.
const (
	// OutOfBounds is a write at or past the bytes requested, found in the
	// guard bytes after the block (Offset at least Size).
	OutOfBounds FindingKind = iota + 1
	// WriteAfterClose is a write to a block after its Close (through a
	// *cl.Buffer, a sub-buffer or SVM kept past it), found in its poison.
	WriteAfterClose
	// Dropped is a PooledBuffer the garbage collector reclaimed without
	// Close.
	Dropped
	// LeakedAtClose is a block still open when its pool was closed.
	LeakedAtClose
)

var findingNames = [...]string{"unknown", "out-of-bounds", "write-after-close", "dropped", "leaked-at-close"}

// String returns the kind's name, such as "out-of-bounds".
func (k FindingKind) String() string {
	if int(k) < len(findingNames) {
		return findingNames[k]
	}
	return findingNames[0]
}

// Finding is one memory bug the sanitizer found.
type Finding struct {
	Kind    FindingKind
	BlockID uint64 // the PooledBuffer's ID
	Size    int64  // the bytes requested
	// Offset is the first bad byte, from the block's start: at least Size
	// for OutOfBounds; 0 for Dropped and LeakedAtClose.
	Offset int64
	// AllocSite and CloseSite are where the block was allocated and
	// closed: the innermost frame outside clpool, as file:line:function
	// (memhooks.LineProfile's form). CloseSite is empty for Dropped and
	// LeakedAtClose, and for a dropped block's other findings.
	AllocSite, CloseSite string
}

// String is the line the sanitizer prints for f.
func (f Finding) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "clpool sanitizer: %s: block %#x of %d bytes", f.Kind, f.BlockID, f.Size)
	if f.Kind == OutOfBounds || f.Kind == WriteAfterClose {
		fmt.Fprintf(&b, ", written at offset %d", f.Offset)
	}
	if f.AllocSite != "" {
		fmt.Fprintf(&b, ", allocated at %s", f.AllocSite)
	}
	if f.CloseSite != "" {
		fmt.Fprintf(&b, ", closed at %s", f.CloseSite)
	}
	return b.String()
}

// Findings completes the checks of every block closed so far, waiting for
// the commands that may still use them, checks the poison of the blocks
// still in quarantine, and returns every finding, in the order they were
// found. It returns nil for a pool without the sanitizer. It may be
// called after Close.
func (p *Pool) Findings() []Finding {
	s := p.san
	if s == nil {
		return nil
	}
	// The blocks on their way out of the quarantine (a FreeHeld or Close
	// under way) have their checks enqueued as they go: waited for, as
	// checkQuarantine passes them over (s45e: a Findings racing a FreeHeld
	// missed them). Every block marked leaving goes through
	// leaveQuarantine, which takes no lock Findings holds.
	s.mu.Lock()
	for s.unchecked > 0 {
		s.allChecked.Wait()
	}
	s.mu.Unlock() // nothing printed
	// A block whose queue's Release is under way is checked once the
	// Release returns (s36c: Findings skipped it), waited for outside
	// s.mu; a second pass checks those blocks only (one whose Release
	// failed to finish its queue's commands stays unchecked).
	if waiting := s.checkQuarantine(nil); len(waiting) > 0 {
		only := map[*sanBlock]bool{}
		for _, sb := range waiting {
			if sb.q.q.Hold() { // waits for a Release under way, or waiting for holds (s36d)
				sb.q.q.Unhold()
			}
			only[sb] = true
		}
		s.checkQuarantine(only)
	}
	s.harvest(true)
	s.mu.Lock()
	defer s.unlock()
	return slices.Clone(s.findings)
}

// sanitizer is a pool's memory sanitizer.
type sanitizer struct {
	p   *Pool
	out *sanOutput // where findings are printed; nil: nowhere
	due atomic.Bool

	harvestMu sync.Mutex // serializes harvests, so that findings come in the order their checks were enqueued

	mu       sync.Mutex           // protects the fields below and the mutable fields of their sanBlocks
	live     map[uint64]*sanBlock // the active blocks, by ID
	seq      uint64               // blocks tracked so far
	quar     []*sanBlock          // the quarantine, oldest first; leaving ones too, until they are in the policy
	quarN    int                  // blocks in quar not leaving
	quarSize int64                // and their bytes
	// unchecked counts the blocks marked leaving whose check
	// leaveQuarantine has not yet enqueued; Findings waits on allChecked
	// (of mu) for it to be 0.
	unchecked  int
	allChecked *sync.Cond
	cur        *sanBatch    // the batch checks go into
	full       []*sanBatch  // full batches, oldest first, not yet harvested
	spare      []*cl.Buffer // result buffers of harvested batches, for new ones
	findings   []Finding
	closed     bool // the pool's Close has begun
	stopped    bool // the pool no longer holds (StopHolding): no block waits in quarantine
	inflight   int  // Closes of tracked blocks under way
	res        *sanRes
	resErr     error    // why res could not be made, or that it was released
	warned     bool     // a failure to check was printed
	lines      []string // printed in this hold of mu, written once it is let go (sanitize_output.go)
	queued     []string // printed under harvestMu or a queue's hold, written once they are let go
}

// sanRes is what the sanitizer's checks need: its program's kernel (set
// and enqueued under s.mu), a queue of its own, and the work-group size.
type sanRes struct {
	ctx   *cl.Context
	k     *cl.Kernel
	own   *qstate // the sanitizer's queue, for blocks of no queue; not one of p.queues
	group int
}

// sanBlock is what the sanitizer knows of one block, from its Allocate to
// its leaving the quarantine.
type sanBlock struct {
	id, seq uint64
	blk     *block
	size    int64
	q       *qstate   // the block's queue; p.host: none
	alloc   []uintptr // the stack of its Allocate
	close   []uintptr // and of its Close; nil if dropped

	guarded  bool      // its bytes past the request hold guardByte: check them at Close
	poison   *cl.Event // the fill of its poison, nil if none
	leaving  bool      // out of the quarantine's bounds, on its way to the policy
	reported bool      // a write after Close was found
	dropped  bool
}

// sanBatch is up to sanSlots checks whose results are in one buffer.
type sanBatch struct {
	buf    *cl.Buffer
	checks []sanCheck
}

// sanCheck is one check kernel: its slot is its index in the batch.
type sanCheck struct {
	sb   *sanBlock
	kind FindingKind
	q    *cl.CommandQueue // where it was enqueued
	ev   *cl.Event
}

func newSanitizer(p *Pool, c sanConfig) *sanitizer {
	s := &sanitizer{p: p, out: stderrOutput, live: map[uint64]*sanBlock{}}
	s.allChecked = sync.NewCond(&s.mu)
	if c.outSet {
		s.out = c.out
	}
	if a, ok := p.pol.(*policy.Arenas[mem]); ok {
		a.SetQuickMax(0) // no block waits unmerged: each goes through the quarantine
	}
	return s
}
