package mempool

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool/internal/callsite"
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
//     aside (FreeHeld, the out-of-memory ladder, Close): a check kernel
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
// them.
//
// Lock order: a queue cache's lock, then p.mu, then s.mu. The sanitizer
// never takes p.mu (nor calls the pool) while it holds s.mu; it makes
// OpenCL calls under s.mu (its own), never under p.mu. harvestMu is taken
// before s.mu.

// SanitizeEnv is the environment variable that turns the sanitizer on for
// pools made without WithSanitizer: "1" (or "true") turns it on, "0",
// "false" or empty leaves it off; any other value makes New fail.
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
	// SanitizerQuarantineBytes leaves at once: its poison is checked
	// then, after the commands enqueued before.
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
// turns it on for pools made without this option.
//
// A sanitized pool is slower and holds more memory: every block has
// SanitizerGuard bytes more, filled at Allocate; a Close enqueues a check
// kernel and a fill of the block; closed blocks wait in a quarantine
// (SanitizerQuarantineBlocks, SanitizerQuarantineBytes) before they are
// reused; queue caches and the arena's quick lists are off; drop safety is
// on whatever WithDropSafety says; every Allocate takes its caller's stack.
// It serves pools of buffers and of SVM alike, and arrays over either
// work unchanged. See the package doc's Sanitizer section.
func WithSanitizer() Option { return func(c *config) { c.san.on = true } }

// WithSanitizerOutput sets where the sanitizer prints each finding as it
// finds it, one line each: standard error by default, nowhere for a nil
// w. It does not turn the sanitizer on.
func WithSanitizerOutput(w io.Writer) Option {
	return func(c *config) { c.san.out, c.san.outSet = w, true }
}

// sanConfig is what WithSanitizer and WithSanitizerOutput say.
type sanConfig struct {
	on     bool
	out    io.Writer
	outSet bool
}

// resolveSanitizer reports whether the pool is sanitized (the option, or
// else SanitizeEnv), for the constructor called call, and if so sets what
// the sanitizer needs of the rest of the config: no queue caches, and drop
// safety.
func (c *config) resolveSanitizer(call string) (bool, error) {
	on := c.san.on
	if !on {
		if v := strings.TrimSpace(os.Getenv(SanitizeEnv)); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return false, fmt.Errorf("mempool: %s: %s=%q: want 1 or 0", call, SanitizeEnv, v)
			}
			on = b
		}
	}
	if on {
		c.noCaches, c.dropSafety = true, true
	}
	return on, nil
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
	s.checkQuarantine()
	s.harvest(true)
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.findings)
}

// sanitizer is a pool's memory sanitizer.
type sanitizer struct {
	p   *Pool
	out io.Writer // where findings are printed; nil: nowhere
	due atomic.Bool

	harvestMu sync.Mutex // serializes harvests, so that findings come in the order their checks were enqueued

	mu       sync.Mutex           // protects the fields below and the mutable fields of their sanBlocks
	live     map[uint64]*sanBlock // the active blocks, by ID
	seq      uint64               // blocks tracked so far
	quar     []*sanBlock          // the quarantine, oldest first; leaving ones too, until they are in the policy
	quarN    int                  // blocks in quar not leaving
	quarSize int64                // and their bytes
	cur      *sanBatch            // the batch checks go into
	full     []*sanBatch          // full batches, oldest first, not yet harvested
	spare    []*cl.Buffer         // result buffers of harvested batches, for new ones
	findings []Finding
	closed   bool // the pool's Close has begun
	inflight int  // Closes of tracked blocks under way
	res      *sanRes
	resErr   error // why res could not be made, or that it was released
	warned   bool  // a failure to check was printed
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
	s := &sanitizer{p: p, out: os.Stderr, live: map[uint64]*sanBlock{}}
	if c.outSet {
		s.out = c.out
	}
	if a, ok := p.pol.(*policy.Arenas[mem]); ok {
		a.SetQuickMax(0) // no block waits unmerged: each goes through the quarantine
	}
	return s
}

// guardFor returns the guard bytes a request of size asks the policy for
// past it: SanitizerGuard, or what the device's largest buffer leaves.
func (s *sanitizer) guardFor(size int64) int64 {
	g := int64(SanitizerGuard)
	if m := s.p.maxAlloc; m > 0 && size+g > m {
		g = max(m-size, 0)
	}
	return g
}

// track notes pb, just handed out, with its caller's stack, and fills its
// bytes past the request with guardByte on its queue.
func (s *sanitizer) track(pb *PooledBuffer) {
	var pcs [sanDepth]uintptr
	n := runtime.Callers(3, pcs[:]) // from allocate's caller
	sb := &sanBlock{id: pb.ID(), blk: pb.blk, size: pb.size, q: pb.q, alloc: slices.Clone(pcs[:n])}
	s.mu.Lock()
	s.seq++
	sb.seq = s.seq
	s.live[sb.id] = sb
	own := s.guard(sb)
	s.mu.Unlock()
	if own != nil {
		// The pool cannot order the user's queue after the fill: the
		// host waits for it.
		_ = own.Finish()
	}
}

// guard fills sb's bytes past its request with guardByte and notes it
// guarded; it returns the sanitizer's queue if the fill is there. s.mu
// must be held.
func (s *sanitizer) guard(sb *sanBlock) (own *cl.CommandQueue) {
	if sb.blk.Size <= sb.size {
		return nil // no room for a guard
	}
	res, err := s.resources(sb.blk)
	if err != nil {
		return nil
	}
	cq := s.queueOf(sb, res)
	ev, err := fill(cq, sb.blk, sb.size, sb.blk.Size, guardByte)
	if err != nil {
		s.warn(sb, err)
		return nil
	}
	if cq.ooo { // the user's commands come after the fill
		err = cq.q.EnqueueBarrier(ev)
	}
	_ = ev.Release()
	sb.guarded = err == nil
	if cq == res.own {
		return cq.q
	}
	return nil
}

// closing returns the sanitizer's record of pb, which a Close (or the
// finalizer) is giving back, and takes it out of the active blocks; nil if
// the sanitizer does not track pb (a block that was never handed out).
func (s *sanitizer) closing(pb *PooledBuffer) *sanBlock {
	var pcs [sanDepth]uintptr
	n := runtime.Callers(3, pcs[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.live[pb.ID()]
	if sb == nil {
		return nil
	}
	delete(s.live, sb.id)
	s.inflight++
	if !sb.dropped {
		sb.close = slices.Clone(pcs[:n])
	}
	return sb
}

// dropped notes that pb, which the garbage collector found unreachable,
// was never closed: the finalizer's giving it back reports it
// (giveBackSanitized), once the block is out of the active ones.
func (s *sanitizer) dropped(pb *PooledBuffer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.live[pb.ID()]; sb != nil {
		sb.dropped = true
	}
}

// giveBackSanitized is giveBack for a block the sanitizer tracks: it tells
// the hooks, checks the block's guard after the commands that may still
// use it, poisons it, and puts it in quarantine (counted held) instead of
// the policy; the blocks it pushes out of the quarantine go to the policy.
func (p *Pool) giveBackSanitized(pb *PooledBuffer, sb *sanBlock, size int64, hooks hookList) error {
	s, b := p.san, pb.blk
	var hookErr error
	var after Event
	if hooks != nil {
		hookErr = p.emit(hooks, pb.event(FreeBefore, b))
		after = pb.event(FreeAfter, b)
	}
	// The commands that may still use b: its queue's, and those of the
	// queues RecordQueue added, as a handover would wait for them.
	p.lock()
	p.recordUses(b, pb.q)
	uses := slices.Clone(b.Uses)
	b.Uses = b.Uses[:0]
	p.mu.Unlock()
	p.checkAtClose(sb, uses)
	p.lock()
	if p.dropSafety {
		runtime.SetFinalizer(pb, nil) // under p.mu: see core.handOut
	}
	p.l.deactivate(b, size)
	p.l.quar.add(b, 1)
	leaving := s.enter(sb)
	p.l.sync(p.pol.Counts())
	p.mu.Unlock()
	err := p.leaveQuarantine(leaving)
	if sb.dropped {
		s.mu.Lock()
		s.report(Finding{Kind: Dropped, BlockID: sb.id, Size: sb.size, AllocSite: callsite.First(sb.alloc)})
		s.mu.Unlock()
	}
	s.done()
	if hooks != nil {
		after.Err = err
		if herr := p.emit(hooks, after); hookErr == nil {
			hookErr = herr
		}
	}
	return errors.Join(err, hookErr)
}

// checkAtClose orders sb's queue (the sanitizer's own for none) after the
// commands of uses, then enqueues there the check of sb's guard and the
// fill of its poison (none once the pool is closed: the block is freed).
func (p *Pool) checkAtClose(sb *sanBlock, uses []policy.Use) {
	s := p.san
	s.mu.Lock()
	res, err := s.resources(sb.blk)
	s.mu.Unlock()
	if err != nil {
		return
	}
	cq := s.queueOf(sb, res)
	if len(uses) > 0 {
		fs, err := p.order(uses, cq)
		p.lock()
		p.l.marked(fs)
		if err != nil {
			// Unchecked: a check could see the user's own writes. The
			// block keeps its uses, for the next user to wait for.
			sb.blk.Uses = append(sb.blk.Uses[:0], uses...)
		}
		p.mu.Unlock()
		if err != nil {
			s.mu.Lock()
			s.warn(sb, err)
			s.mu.Unlock()
			return
		}
	}
	s.mu.Lock()
	s.poison(sb, cq)
	s.mu.Unlock()
	// A write after Close on another queue is seen only once the poison
	// is there: the poison is sent at once, and the host waits for it
	// where the block has no queue of its own.
	if cq == res.own {
		_ = cq.q.Finish()
	} else {
		_ = cq.q.Flush()
	}
}

// poison enqueues on cq the check of sb's guard, then the fill of its
// poison (none once the pool is closed: the block is freed). s.mu must be
// held.
func (s *sanitizer) poison(sb *sanBlock, cq *qstate) {
	var checked *cl.Event
	if sb.guarded {
		checked = s.check(sb, OutOfBounds, cq, sb.size, sb.blk.Size, guardByte, nil)
	}
	if s.closed {
		return
	}
	var wait []*cl.Event
	if checked != nil {
		wait = append(wait, checked) // the poison waits for the check to read the guard
	}
	ev, err := fill(cq, sb.blk, 0, sb.blk.Size, poisonByte, wait...)
	if err != nil {
		s.warn(sb, err)
		return
	}
	sb.poison = ev
}

// enter puts sb, closed and poisoned, in quarantine, and returns the
// blocks that leave it to make room, oldest first, marked leaving; once
// the pool is closed, sb itself leaves at once. p.mu must be held.
func (s *sanitizer) enter(sb *sanBlock) []*sanBlock {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.quar = append(s.quar, sb)
	if s.closed {
		sb.leaving = true
		return []*sanBlock{sb}
	}
	s.quarN++
	s.quarSize += sb.blk.Size
	var out []*sanBlock
	for _, o := range s.quar {
		if s.quarN <= SanitizerQuarantineBlocks && s.quarSize <= SanitizerQuarantineBytes {
			break
		}
		if !o.leaving {
			o.leaving = true
			s.quarN--
			s.quarSize -= o.blk.Size
			out = append(out, o)
		}
	}
	return out
}

// drain marks every block in quarantine leaving, and returns them, for
// leaveQuarantine.
func (s *sanitizer) drain() []*sanBlock {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*sanBlock
	for _, o := range s.quar {
		if !o.leaving {
			o.leaving = true
			out = append(out, o)
		}
	}
	s.quarN, s.quarSize = 0, 0
	return out
}

// leaveQuarantine checks the poison of the blocks bs, marked leaving, on
// their queues and gives them to the policy, each recording that its
// queue may still use it (the check); blocks of no queue wait for their
// check on the host instead. It frees what the policy gives up, and
// returns the allocator's errors.
func (p *Pool) leaveQuarantine(bs []*sanBlock) error {
	if len(bs) == 0 {
		return nil
	}
	s := p.san
	var own *cl.CommandQueue
	s.mu.Lock()
	for _, sb := range bs {
		if sb.poison == nil {
			continue
		}
		if !sb.reported && s.res != nil {
			cq := s.queueOf(sb, s.res)
			s.check(sb, WriteAfterClose, cq, 0, sb.blk.Size, poisonByte, sb.poison)
			if cq == s.res.own {
				own = cq.q
			}
		}
		_ = sb.poison.Release()
		sb.poison = nil
	}
	s.mu.Unlock()
	if own != nil {
		_ = own.Finish() // the next user, on any queue, comes after the checks
	}
	p.lock()
	var gone []*segment
	for _, sb := range bs {
		p.l.quar.add(sb.blk, -1)
		gone = p.putFree(gone, sb.blk, sb.q, true)
	}
	s.mu.Lock()
	s.quar = slices.DeleteFunc(s.quar, func(o *sanBlock) bool { return slices.Contains(bs, o) })
	s.mu.Unlock()
	stale := p.forget()
	p.mu.Unlock()
	return p.freeSegments(gone, stale)
}

// done ends a Close of a tracked block: it reads the results of full
// batches, every result once the pool is closed (and then releases what
// the sanitizer holds if no block is left).
func (s *sanitizer) done() {
	s.mu.Lock()
	s.inflight--
	closed := s.closed
	s.mu.Unlock()
	switch {
	case closed:
		s.harvest(true)
		s.releaseIfIdle()
	case s.due.Load():
		s.harvest(false)
	}
}

// checkQuarantine enqueues the check of the poison of every block in
// quarantine, for Findings.
func (s *sanitizer) checkQuarantine() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sb := range s.quar {
		if !sb.leaving && sb.poison != nil && !sb.reported && s.res != nil {
			s.check(sb, WriteAfterClose, s.queueOf(sb, s.res), 0, sb.blk.Size, poisonByte, sb.poison)
		}
	}
}

// quarantined adds the blocks in quarantine to cached, the blocks that
// are held although the policy sees them in use (see lockCaches). p.mu
// must be held.
func (s *sanitizer) quarantined(cached map[*block]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sb := range s.quar {
		cached[sb.blk] = true
	}
}

// poolClosing is the start of the pool's Close: it records a
// LeakedAtClose finding for each block still open, gives the quarantine's
// blocks to the policy (checked) for Close to free, and reads every
// result. A second call does nothing.
func (s *sanitizer) poolClosing() {
	s.harvest(true) // the findings of blocks closed before come first
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	open := make([]*sanBlock, 0, len(s.live))
	for _, sb := range s.live {
		open = append(open, sb)
	}
	slices.SortFunc(open, func(a, b *sanBlock) int { return cmp.Compare(a.seq, b.seq) })
	for _, sb := range open {
		s.report(Finding{Kind: LeakedAtClose, BlockID: sb.id, Size: sb.size, AllocSite: callsite.First(sb.alloc)})
	}
	s.mu.Unlock()
	_ = s.p.leaveQuarantine(s.drain())
	s.harvest(true)
}

// releaseIfIdle releases the sanitizer's kernel, queue and result buffers
// once the pool is closed and no block it tracks is open or closing. A
// block closed later is checked without them: never, as none is left.
func (s *sanitizer) releaseIfIdle() {
	s.harvestMu.Lock()
	defer s.harvestMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed || len(s.live) > 0 || s.inflight > 0 || s.res == nil || len(s.full) > 0 || s.cur != nil && len(s.cur.checks) > 0 {
		return
	}
	res := s.res
	s.res, s.resErr = nil, errors.New("mempool: the sanitizer's resources are released")
	_ = res.own.q.Finish()
	for _, b := range s.spare {
		_ = b.Release()
	}
	if s.cur != nil {
		_ = s.cur.buf.Release()
	}
	s.spare, s.cur = nil, nil
	_ = res.k.Release()
	_ = res.own.q.Release()
	releaseSanProgram(res.ctx)
}

// report records f and prints it. s.mu must be held.
func (s *sanitizer) report(f Finding) {
	s.findings = append(s.findings, f)
	if s.out != nil {
		fmt.Fprintln(s.out, f.String())
	}
}

// warn prints, once per pool, that a block could not be checked. s.mu
// must be held.
func (s *sanitizer) warn(sb *sanBlock, err error) {
	if !s.warned && s.out != nil {
		fmt.Fprintf(s.out, "clpool sanitizer: cannot check block %#x allocated at %s (further failures are not printed): %v\n",
			sb.id, callsite.First(sb.alloc), err)
	}
	s.warned = true
}

// queueOf returns the queue sb's fills and checks go on: its own, or the
// sanitizer's for a block of no queue.
func (s *sanitizer) queueOf(sb *sanBlock, res *sanRes) *qstate {
	if sb.q.q != nil {
		return sb.q
	}
	return res.own
}

// resources returns what the checks need, made at the first call (the
// context is the allocator's, or else blk's memory's). s.mu must be held.
func (s *sanitizer) resources(blk *block) (*sanRes, error) {
	if s.res != nil || s.resErr != nil {
		return s.res, s.resErr
	}
	ctx := s.p.context()
	if ctx == nil {
		if m := blk.Seg.Data; m.buf != nil {
			ctx = m.buf.Context()
		} else {
			ctx = m.svm.Context()
		}
	}
	s.res, s.resErr = newSanRes(ctx)
	if s.resErr != nil {
		s.resErr = fmt.Errorf("mempool: the sanitizer's kernel: %w", s.resErr)
		if s.out != nil {
			fmt.Fprintf(s.out, "clpool sanitizer: checks off: %v\n", s.resErr)
		}
	}
	return s.res, s.resErr
}

func newSanRes(ctx *cl.Context) (*sanRes, error) {
	devs := ctx.Devices()
	if len(devs) == 0 {
		return nil, errors.New("the context has no device")
	}
	prog, err := acquireSanProgram(ctx)
	if err != nil {
		return nil, err
	}
	k, err := prog.Kernel("clpool_sanitize_check")
	if err != nil {
		releaseSanProgram(ctx)
		return nil, err
	}
	q, err := cl.NewCommandQueue(ctx, devs[0], 0)
	if err != nil {
		_ = k.Release()
		releaseSanProgram(ctx)
		return nil, err
	}
	group := 64
	for _, d := range devs {
		for d.MaxWorkGroupSize > 0 && group > d.MaxWorkGroupSize {
			group /= 2
		}
	}
	return &sanRes{ctx: ctx, k: k, own: &qstate{q: q}, group: group}, nil
}

// check enqueues on cq, after wait, the check that bytes [from, to) of
// sb's block hold want, and returns its event (the batch's: do not
// release it), nil if it could not be enqueued. Its result, read at a
// harvest, is a finding of kind. s.mu must be held, and s.res made.
func (s *sanitizer) check(sb *sanBlock, kind FindingKind, cq *qstate, from, to int64, want byte, wait *cl.Event) *cl.Event {
	if to <= from {
		return nil
	}
	if s.cur == nil || len(s.cur.checks) == sanSlots {
		if s.cur != nil {
			s.full = append(s.full, s.cur)
			s.cur = nil
			s.due.Store(true)
		}
		var buf *cl.Buffer
		if n := len(s.spare); n > 0 {
			buf, s.spare = s.spare[n-1], s.spare[:n-1]
		} else {
			var err error
			if buf, err = s.res.ctx.CreateBuffer(cl.MemReadWrite, 8*sanSlots); err != nil {
				s.warn(sb, err)
				return nil
			}
		}
		s.cur = &sanBatch{buf: buf}
	}
	blk, res := sb.blk, s.res
	var m any = blk.Seg.Data.buf
	if blk.Seg.Data.svm != nil {
		m = blk.Seg.Data.svm
	}
	err := res.k.SetArgs(m, uint64(blk.Off+from), uint64(blk.Off+to), uint8(want),
		s.cur.buf, uint32(len(s.cur.checks)), uint64(blk.Off), cl.LocalMem(8*res.group))
	var ev *cl.Event
	if err == nil {
		var waits []*cl.Event
		if wait != nil {
			waits = append(waits, wait)
		}
		ev, err = cq.q.EnqueueNDRangeKernel(res.k, nil, []int{res.group}, []int{res.group}, waits...)
	}
	if err != nil {
		s.warn(sb, err)
		return nil
	}
	s.cur.checks = append(s.cur.checks, sanCheck{sb: sb, kind: kind, q: cq.q, ev: ev})
	return ev
}

// fill enqueues on cq, after wait, the fill of bytes [from, to) of blk
// with b, and returns its event, for the caller to release.
func fill(cq *qstate, blk *block, from, to int64, b byte, wait ...*cl.Event) (*cl.Event, error) {
	pat := []byte{b}
	if m := blk.Seg.Data; m.svm != nil {
		return cq.q.EnqueueSVMMemFill(m.svm, pat, blk.Off+from, to-from, wait...)
	}
	return cq.q.EnqueueFillBuffer(blk.Seg.Data.buf, pat, blk.Off+from, to-from, wait...)
}

// harvest reads the results of checks and records their findings, in the
// order the checks were enqueued. With all, it reads every check enqueued
// so far, waiting for them; otherwise only full batches that have
// completed, waiting only for those past the sanKeepFull newest.
func (s *sanitizer) harvest(all bool) {
	s.harvestMu.Lock()
	defer s.harvestMu.Unlock()
	s.mu.Lock()
	s.due.Store(false)
	if all && s.cur != nil && len(s.cur.checks) > 0 {
		s.full = append(s.full, s.cur)
		s.cur = nil
	}
	full, res := s.full, s.res
	s.mu.Unlock()
	if len(full) == 0 || res == nil {
		return
	}
	// Checks are waited for, or polled, only once their queues are sent
	// to the device.
	flushed := map[*cl.CommandQueue]bool{}
	for _, b := range full {
		for _, c := range b.checks {
			if !flushed[c.q] {
				flushed[c.q] = true
				_ = c.q.Flush()
			}
		}
	}
	n := len(full)
	if !all {
		n = max(len(full)-sanKeepFull, 0)
		for n < len(full) && completed(full[n]) {
			n++
		}
	}
	results := make([][]byte, n)
	failed := make([][]bool, n)
	for i, b := range full[:n] {
		failed[i] = make([]bool, len(b.checks))
		for j, c := range b.checks {
			failed[i][j] = c.ev.Wait() != nil
			_ = c.ev.Release()
		}
		results[i] = make([]byte, 8*len(b.checks))
		if err := res.own.q.ReadBuffer(b.buf, 0, results[i]); err != nil {
			for j := range failed[i] {
				failed[i][j] = true
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, b := range full[:n] {
		for j, c := range b.checks {
			off := binary.NativeEndian.Uint64(results[i][8*j:])
			if failed[i][j] || off == ^uint64(0) {
				continue
			}
			if c.kind == WriteAfterClose {
				if c.sb.reported {
					continue
				}
				c.sb.reported = true
			}
			s.report(Finding{Kind: c.kind, BlockID: c.sb.id, Size: c.sb.size, Offset: int64(off),
				AllocSite: callsite.First(c.sb.alloc), CloseSite: callsite.First(c.sb.close)})
		}
		s.spare = append(s.spare, b.buf)
	}
	s.full = s.full[n:]
}

// completed reports whether every check of b has completed, without
// waiting.
func completed(b *sanBatch) bool {
	for _, c := range b.checks {
		if done, err := c.ev.Done(); !done && err == nil {
			return false
		}
	}
	return true
}

// marked counts the markers the fences fs enqueued, for the sanitizer's
// ordering of a Close (handedOver counts a handover's).
func (l *ledger) marked(fs []fenced) {
	for _, f := range fs {
		l.s.Queues[f.from.id-1].Markers += f.marked
	}
}

// quarCounts are the blocks in the sanitizer's quarantine, for the
// ledger: held blocks the policy does not see (as a queue cache's), and
// those of them that are inactive splits, small ([0]) and large ([1]).
type quarCounts struct {
	blocks     int
	bytes      int64
	split      [2]int
	splitBytes [2]int64
}

// add counts n blocks like b into the quarantine (n < 0: out of it).
func (q *quarCounts) add(b *block, n int) {
	q.blocks += n
	q.bytes += int64(n) * b.Size
	if b.Split {
		i := 0
		if !b.Seg.Small {
			i = 1
		}
		q.split[i] += n
		q.splitBytes[i] += int64(n) * b.Size
	}
}

// sanSource is the sanitizer's check kernel. Its work-group (one)
// strides over bytes [from, to) of p, 8 at a time where they are aligned,
// each work-item finding the first of its bytes that is not want; the
// least of those, less base (the block's offset in p), goes to
// res[slot], or ~0 if every byte holds want.
const sanSource = `
kernel void clpool_sanitize_check(global const uchar *p, ulong from, ulong to, uchar want,
		global ulong *res, uint slot, ulong base, local ulong *m) {
	size_t lid = get_local_id(0), n = get_local_size(0);
	ulong none = ~(ulong)0, first = none;
	ulong a = min((from + 7) & ~(ulong)7, to), e = max(to & ~(ulong)7, a);
	for (ulong i = from + lid; i < a; i += n)
		if (p[i] != want) { first = i; break; }
	ulong w = (ulong)want * 0x0101010101010101UL;
	global const ulong *words = (global const ulong *)p;
	if (first == none)
		for (ulong i = a / 8 + lid; i < e / 8; i += n)
			if (words[i] != w) {
				for (ulong j = 8 * i; j < 8 * i + 8; j++)
					if (p[j] != want) { first = j; break; }
				break;
			}
	if (first == none)
		for (ulong i = e + lid; i < to; i += n)
			if (p[i] != want) { first = i; break; }
	m[lid] = first;
	barrier(CLK_LOCAL_MEM_FENCE);
	for (size_t k = n / 2; k > 0; k /= 2) {
		if (lid < k) m[lid] = min(m[lid], m[lid + k]);
		barrier(CLK_LOCAL_MEM_FENCE);
	}
	if (lid == 0) res[slot] = m[0] == none ? none : m[0] - base;
}
`

// sanPrograms are the check kernel's programs, one per context, shared by
// the sanitized pools of the context and released with the last of them.
var sanPrograms = struct {
	mu sync.Mutex // protects m; held while a program is built, so that each is built once
	m  map[*cl.Context]*sanProgram
}{m: map[*cl.Context]*sanProgram{}}

type sanProgram struct {
	prog *cl.Program
	refs int
}

// acquireSanProgram returns the check program of ctx, building it at the
// first call; releaseSanProgram gives each back.
func acquireSanProgram(ctx *cl.Context) (*cl.Program, error) {
	sanPrograms.mu.Lock()
	defer sanPrograms.mu.Unlock()
	sp := sanPrograms.m[ctx]
	if sp == nil {
		prog, err := ctx.BuildProgram(sanSource, "")
		if err != nil {
			return nil, err
		}
		sp = &sanProgram{prog: prog}
		sanPrograms.m[ctx] = sp
	}
	sp.refs++
	return sp.prog, nil
}

func releaseSanProgram(ctx *cl.Context) {
	sanPrograms.mu.Lock()
	defer sanPrograms.mu.Unlock()
	if sp := sanPrograms.m[ctx]; sp != nil {
		if sp.refs--; sp.refs == 0 {
			_ = sp.prog.Release()
			delete(sanPrograms.m, ctx)
		}
	}
}
