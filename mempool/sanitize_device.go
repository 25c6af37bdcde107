package mempool

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool/internal/callsite"
)

// This file is the sanitizer's device work: its queues and buffers per
// context, the fill and the check kernel, and reading the checks back.

// queueOf returns the queue sb's fills and checks go on: its own, or the
// sanitizer's for a block of no queue or of a queue released (which
// finished its commands: s36a, a check on the released queue failed). The
// caller holds sb's queue (cl's Hold) while it calls on it, so that its
// owner's Release on another goroutine waits for those calls (s36b:
// checks failed on a queue released under them, and writes past blocks
// went unreported), one queue at a time, waiting for nothing meanwhile
// (see Pool.order). It waits for a Release under way: call it without
// s.mu.
func (s *sanitizer) queueOf(sb *sanBlock, res *sanRes) *qstate {
	if sb.q.q != nil && !sb.q.q.Finished() {
		return sb.q
	}
	return res.own
}

// tryQueueOf is queueOf for calls under s.mu, holding the queue it
// returns if held (s36b: an Allocate on another queue waited on s.mu for
// a task's Release): ok false, holding nothing, while a Release of sb's
// queue is under way.
func (s *sanitizer) tryQueueOf(sb *sanBlock, res *sanRes) (cq *qstate, held, ok bool) {
	switch {
	case sb.q.q == nil:
		return res.own, false, true
	case sb.q.q.TryHold():
		return sb.q, true, true
	case sb.q.q.FinishedNoWait():
		return res.own, false, true
	}
	return nil, false, false
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
		s.print("clpool sanitizer: checks off: %v\n", s.resErr)
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
	defer s.flushQueued() // after harvestMu is let go: the writer may call the pool (sanitize_output.go)
	defer s.harvestMu.Unlock()
	s.mu.Lock()
	s.due.Store(false)
	if all && s.cur != nil && len(s.cur.checks) > 0 {
		s.full = append(s.full, s.cur)
		s.cur = nil
	}
	full, res := s.full, s.res
	s.unlockQueued()
	if len(full) == 0 || res == nil {
		return
	}
	// Checks are waited for, or polled, only once their queues are sent
	// to the device.
	flushed := map[*cl.CommandQueue]bool{}
	for _, b := range full {
		for _, c := range b.checks {
			if !flushed[c.q] && c.q.TryHold() { // not held: released or being released, which flushes it
				flushed[c.q] = true
				_ = c.q.Flush()
				c.q.Unhold()
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
	defer s.unlockQueued()
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
