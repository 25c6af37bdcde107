package mempool

import "sync/atomic"

// This file brings the queue caches' sums into the ledger (see
// qcache.go), in the order the operations were made.
//
// A cache sums its operations in turns: a turn is the operations it made
// with no other cache's in between. The pool's clock (Pool.clock) numbers
// the turns: a cache that finds the clock where its own last turn left it
// goes on with that turn; else it begins a new one, and moves the clock
// on. So the turns of one goroutine's operations on several queues are
// numbered in the order it made them, and the ledger, bringing in every
// cache not in use at once (flushCaches), applies them by their numbers:
// the same counts, peaks included, as the operations one by one. On one
// queue the clock is only read.
//
// A cache's sums come in every flushOps operations, before any operation
// of its queue that takes p.mu, and before Stats; those of every other
// cache not in use come in with them, and after maxTurns turns, those of
// every cache, under p.mu. When a cache begins a turn and finds another
// cache's lock taken by a queue's operation, goroutines run on several
// queues at once, whose operations have no order: the cache joins its
// turns, numbered after the clock's last turn without moving it, until a
// turn or a flush finds no other queue's operation in progress. So
// goroutines on queues of their own do not take, at every operation, the
// cache line of the clock (moving it at every operation made them 1.7x
// slower). Only while goroutines run on several queues at once, and for
// the sums of a cache in use by another goroutine at a flush, can a peak
// across queues be off, by what one cache moved since its last flush.

// qdelta is a queue cache's operations not yet in the ledger, in turns.
// The cache's blocks are all small (cacheMaxBlock), so only the small
// halves of the statistics change. The split blocks that moved are listed
// (moves): whether each one changes the inactive splits by itself or with
// its segment's other blocks, only the ledger can tell.
type qdelta struct {
	// The turns: turns[:nt], oldest first, then cur, the turn the
	// operations go to, if open (a cache's first operation after a flush
	// begins one). cur is apart so that the hot path adds to it in
	// place.
	turns [maxTurns - 1]qturn
	nt    int
	cur   qturn
	open  bool
	mark  uint64 // the clock when the last turn began: its number
	n     int64  // the operations summed
	// joined is set while the cache's turns do not move the clock:
	// another queue's operation ran at once (see beginTurn).
	joined bool
	// cursor is the next turn flushTurnsLocked brings in.
	cursor int
	moves  *splitMoves // nil where no block is a split (exact bins)
}

// qturn sums the operations of one turn of a cache. Every hit adds one
// allocation and every put frees one, so the counts of hits, of
// operations and of blocks into and out of the cache all follow from
// allocation's sums, and the bytes into and out of it from allocated's:
// the hot path adds only what it must.
type qturn struct {
	allocation, allocated, requested statDelta // the active blocks, their bytes, the bytes asked for
	stamp                            uint64    // its number on the pool's clock, times 2, plus 1 if joined
	runs, moves                      int       // the split moves listed before it began (splitMoves' runs and n)
}

// ops returns how many operations d sums.
func (d *qdelta) ops() int64 { return d.n }

// due reports whether the cache's next operation begins a turn: it has
// none, or another cache began one since its last (the clock moved).
// Small enough to be inlined: on one queue, it reads the clock.
func (d *qdelta) due(clock *atomic.Uint64) bool {
	return !d.open || clock.Load() != d.mark
}

// leave ends the joined mode: the cache's next turn moves the clock
// (mark 0), as another cache may have gone on with the turn whose number
// the clock held.
func (d *qdelta) leave() { d.joined, d.mark = false, 0 }

// beginTurn begins a turn of r's cache, when one is due (see due). Its
// number moves the clock on, unless no other cache began a turn since
// this one's last (then the cache's turns were flushed, and the number is
// still its own; 0 is none's). First, but at the cache's first turn, it
// tries the other caches' locks (othersBusy): if one is taken by a
// queue's operation (not by Stats or Snapshot), goroutines run on several
// queues at once, and the cache joins its turns: they are numbered after
// the clock's last turn without moving it, and it begins one only when
// another cache moved the clock. It leaves the mode at a turn, or a
// flush, that finds no other queue's operation in progress; its next turn
// then moves the clock. After maxTurns turns, it brings in every cache's
// sums under p.mu. A round trip of a split block (splitMoves.trip) does
// not span two turns. r.c.mu must be held.
func (p *Pool) beginTurn(r *qstate) {
	d := &r.c.d
	if d.mark != 0 || d.joined { // not the cache's first turn
		switch busy := p.othersBusy(r); {
		case d.joined && !busy:
			d.leave()
		case !d.joined && busy:
			d.joined = true
		}
	}
	if d.open && d.nt == len(d.turns) {
		p.lockUnder(r)
		d.joined = !p.flushCaches(r) // d is empty now
		p.mu.Unlock()
	}
	var t qturn
	switch now := p.clock.Load(); {
	case d.joined:
		// After the turn whose number the clock holds: the cache begins
		// another when the clock moves again (see due).
		t.stamp, d.mark = now<<1|1, now
	case d.mark == 0 || now != d.mark:
		d.mark = p.clock.Add(1)
		t.stamp = d.mark << 1
	default:
		t.stamp = d.mark << 1
	}
	if m := d.moves; m != nil {
		m.cut()
		t.runs, t.moves = m.runs, m.n
	}
	if d.open {
		d.turns[d.nt] = d.cur
		d.nt++
	}
	d.cur, d.open = t, true
}

// count returns how many turns d has.
func (d *qdelta) count() int {
	if d.open {
		return d.nt + 1
	}
	return d.nt
}

// turn returns d's turn i (i < count()).
func (d *qdelta) turn(i int) *qturn {
	if i < d.nt {
		return &d.turns[i]
	}
	return &d.cur
}

// othersBusy reports whether a queue's operation is in progress on a
// cache other than r's: its lock taken, and not by Stats or Snapshot. It
// only tries the locks.
func (p *Pool) othersBusy(r *qstate) bool {
	for _, qs := range p.cacheList() {
		if qs == r || !qs.c.ever.Load() {
			continue
		}
		if !qs.c.mu.TryLock() {
			if p.inspecting.Load() == 0 {
				return true
			}
			continue // maybe Stats's or Snapshot's: the others may tell
		}
		qs.c.mu.Unlock()
	}
	return false
}

// hit sums a request of size served by cached block b, in the current
// turn. Its caller begins a turn first if one is due, and lists b's move
// if b is a split (splitMoves), so that hit and put are small enough to
// be inlined.
func (d *qdelta) hit(b *block, size int64) {
	d.n++
	d.cur.allocation.add(1)
	d.cur.allocated.add(b.Size)
	d.cur.requested.add(size)
}

// put sums block b, of a request of size, given back into the cache, in
// the current turn. Its caller begins a turn first if one is due, and
// lists b's move if b is a split.
func (d *qdelta) put(b *block, size int64) {
	d.n++
	d.cur.allocation.sub(1)
	d.cur.allocated.sub(b.Size)
	d.cur.requested.sub(size)
}

// reset empties d, once the ledger has it.
func (d *qdelta) reset() {
	d.nt, d.n, d.cursor, d.open = 0, 0, 0, false
	if d.moves != nil {
		d.moves.reset()
	}
}

// flushTurn brings in turn i of queue r's cache (d): the same counts,
// peaks included, as its operations would have made one by one. The
// policy has not changed since the last sync (the pool syncs before it
// lets go of p.mu), so flushTurn brings the held blocks and the inactive
// splits up to date itself, as sync would. The moves of d must be cut
// (splitMoves.cut).
func (l *ledger) flushTurn(d *qdelta, i int, r *qstate) {
	t := d.turn(i)
	hits := t.allocation.added
	cached := t.allocation.freed - hits // blocks into the cache, less those out
	l.s.Hits += hits
	if r.id != 0 {
		q := &l.s.Queues[r.id-1]
		q.Requests += hits
		q.Hits += hits
		q.Cached += cached
	}
	l.s.Allocation.apply(t.allocation)
	l.s.AllocatedBytes.apply(t.allocated)
	l.s.RequestedBytes.apply(t.requested)
	l.cached += int(cached)
	l.cachedBytes -= t.allocated.net()
	l.s.HeldBlocks += int(cached)
	l.s.HeldBytes -= t.allocated.net()
	if m := d.moves; m != nil {
		end := m.n
		if i+1 < d.count() {
			end = d.turn(i + 1).moves
		}
		l.flushSplits(m, t.runs, t.moves, end)
	}
}

// flushIfDue brings r's cache's sums into the ledger once they cover
// flushOps operations. r.c.mu must be held. It is small enough to be
// inlined, so that the hot path pays a comparison, not a call.
func (p *Pool) flushIfDue(r *qstate) {
	if r.c.d.ops() >= flushOps {
		p.flushCache(r)
	}
}

// flushCache takes p.mu for flushCaches(r). r.c.mu must be held.
func (p *Pool) flushCache(r *qstate) {
	p.lockUnder(r)
	p.flushCaches(r)
	p.mu.Unlock()
}

// flushCaches brings into the ledger the sums of r's cache (nil: none),
// whose lock the caller holds, and of every other cache whose lock is
// free: their operations came before the one p.mu is taken for (a cache
// whose lock is held is in the middle of one, which runs concurrently
// with it). It reports whether it brought in every cache: false if a
// queue's operation may be in progress on another goroutine (a cache
// held by lockCaches comes in with the others). p.mu must be held. It
// waits for no lock: it tries the other caches' locks, and while a
// lockCaches is under way waits for a taken lock's holder to show itself
// (frozen), which needs nothing the caller holds: the lock order (c.mu,
// then p.mu) cannot deadlock.
func (p *Pool) flushCaches(r *qstate) (all bool) {
	all = !p.flushIdle(r)
	if r != nil && all && r.c.d.joined {
		r.c.d.leave() // no other queue's operation in progress
	}
	return all
}

// flushIdle is flushCaches's work: it reports whether it found a
// cache's lock held by a queue's operation (frozen's heldByOp).
func (p *Pool) flushIdle(r *qstate) (busy bool) {
	if p.cacheState.Load() == cachesGone {
		return false
	}
	var buf [8]*qstate
	cs := buf[:0]
	if r != nil && r.c.d.ops() > 0 {
		cs = append(cs, r)
	}
	for _, qs := range p.cacheList() {
		if qs == r || !qs.c.ever.Load() {
			continue
		}
		held := heldByCaller
		if !qs.c.mu.TryLock() {
			held = p.frozen(qs)
		}
		switch {
		case held == heldByOp:
			busy = true // in use: it may have sums
			continue
		case held == heldByInspector:
			// Held by lockCaches, which waits for p.mu to bring it in:
			// nothing changes it meanwhile, and it comes in here, in
			// turn with the others (leaving it would bring their newer
			// turns in before its older ones: review s41e).
		case qs.c.d.ops() == 0:
			qs.c.mu.Unlock()
			continue
		}
		cs = append(cs, qs)
	}
	p.flushTurnsLocked(cs)
	for _, qs := range cs {
		if qs != r && !qs.c.frozen.Load() {
			qs.c.mu.Unlock()
		}
	}
	return busy
}

// flushTurnsLocked brings into the ledger the sums of the caches cs,
// whose locks are held, turn by turn in the order of their numbers.
// p.mu must be held.
func (p *Pool) flushTurnsLocked(cs []*qstate) {
	for _, qs := range cs {
		if m := qs.c.d.moves; m != nil {
			m.cut()
		}
	}
	for { // each pass brings in one turn: at most as many passes as turns
		var pick *qdelta
		var from *qstate
		for _, qs := range cs {
			d := &qs.c.d
			if d.cursor < d.count() && (pick == nil || d.turn(d.cursor).stamp < pick.turn(pick.cursor).stamp) {
				pick, from = d, qs
			}
		}
		if pick == nil {
			break
		}
		p.l.flushTurn(pick, pick.cursor, from)
		pick.cursor++
	}
	for _, qs := range cs {
		qs.c.d.reset()
	}
}

// lockFlushed takes p.mu for an operation on queue r (p.host: none),
// with the caches' sums in the ledger first (flushCaches), so that the
// ledger sees the operations in order, and lets go of r's cache's lock.
// If locked, the caller holds that lock already (allocateCached's miss);
// else lockFlushed takes it. Once caching is off, the caches were
// drained (see StopHolding) and there is nothing to bring in (a cache's
// lock held keeps caching from going off: StopHolding drains that cache
// first). If giveBack (see givesBack), it then gives r's stale cached
// blocks back to the policy (giveBackStaleLocked), and returns the
// segments the policy gave up (none today: see uncacheLocked), out of the
// pool's accounts, for the caller to free once it lets go of p.mu.
func (p *Pool) lockFlushed(r *qstate, locked, giveBack bool) (gone []*segment) {
	if !locked {
		if p.cacheState.Load() == cachesGone {
			p.lock()
			return nil
		}
		r.c.mu.Lock()
	}
	p.lockUnder(r)
	p.flushCaches(r)
	if giveBack {
		gone = p.giveBackStaleLocked(r)
	}
	r.c.mu.Unlock()
	return gone
}

// givesBack reports whether req, which its queue's cache missed with the
// cache's lock held (req.cacheMu), is to give that cache's stale blocks
// back to the policy before the pool decides (lockFlushed): in an arena
// that manages under smallArena bytes, for a request that is not tiny (a
// tiny one never cuts a wholly free segment, which the blocks given back
// could make, and would take a segment of its own).
func (p *Pool) givesBack(req *request) bool {
	return req.cacheMu && p.arena && p.l.cacheCap.Load() < smallArena/cacheShare && !p.arenas.Tiny(req.size)
}

// cacheList returns every queue cache: p.host's and each queue's. It
// takes no lock: the list is replaced, never changed.
func (p *Pool) cacheList() []*qstate { return *p.caches.Load() }

// anyCached reports whether a queue's cache may hold a block or sums:
// one has held a block once (qcache.ever). It takes no lock: a cache's
// lock taken without p.mu by what is no queue's operation would make a
// queue's flush skip that cache (see lockCaches).
func (p *Pool) anyCached() bool {
	for _, qs := range p.cacheList() {
		if qs.c.ever.Load() {
			return true
		}
	}
	return false
}

// flushAll brings every queue's cache's sums into the ledger, with every
// cache's lock held (lockCaches): a cache in use keeps its turns until
// its operation ends, and no newer turn of another cache comes in before
// them (bringing in the caches not in use, as a queue's flush does, would
// split one goroutine's turns on two queues: review s41c).
func (p *Pool) flushAll() {
	qs := p.lockCaches()
	p.unlockCaches(qs)
}
