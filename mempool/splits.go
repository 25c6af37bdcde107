package mempool

import (
	"slices"

	"github.com/clpool/clpool/mempool/internal/policy"
)

// This file is the ledger's count of inactive splits (torch's
// inactive_split): the held blocks of segments that have a block in use,
// which keeps the segment from being released. The policy counts its own
// free blocks of segments that have an active block. But a block waiting
// in a queue's cache (qcache.go) or in the sanitizer's quarantine is held
// to the pool and active to the policy, so the ledger adds the held split
// blocks, and takes out the idle segments: those whose only blocks not
// free are held. An idle segment is releasable (the out-of-memory ladder
// drains the caches), so none of its blocks is an inactive split; the
// policy and the held blocks counted all of them.
//
// To know the idle segments, the ledger keeps, for each segment, its
// split blocks out (handed out and not held) and held, as it has seen
// them: the pool's own hand-outs and returns at once, under p.mu, and a
// queue cache's moves when the cache is flushed, in the queue's order.
// Each block's moves reach the ledger in order (a cache is flushed before
// the pool takes back one of its blocks), so the counts are always those
// of a state the pool could be in. Only split blocks count: a segment of
// one block has no inactive split, and every block handed out from a
// segment of more is a split (block.Split).
//
// An idle segment's blocks are taken out by count: the arena's own
// (Segment.BlockCount), so that the ledger need not walk them at each
// change of the policy. A hit or a put of a queue's cache stays off
// p.mu: the cache lists its split blocks' moves under its own lock
// (splitMoves), and the ledger replays them when it flushes the cache
// (flushSplits), turn by turn in the order they were made, as its other
// sums (see qflush.go).

// moveOut counts n split blocks like b handed out (n < 0: given back, to
// the policy or the quarantine). Other blocks are not counted, nor those
// of a segment none of whose blocks is ever held (heldLarge).
func (l *ledger) moveOut(b *block, n int32) {
	if b.Split && (b.Seg.Small || l.heldLarge) {
		b.Seg.Out += n
		l.markIdle(b.Seg)
	}
}

// moveHeld counts n split blocks like b held outside the policy: in the
// quarantine or a queue's cache (n < 0: out of it).
func (l *ledger) moveHeld(b *block, n int32) {
	if b.Split && (b.Seg.Small || l.heldLarge) {
		b.Seg.Held += n
		l.markIdle(b.Seg)
	}
}

// markIdle puts seg on the list of idle segments or takes it off, as its
// counts say.
func (l *ledger) markIdle(seg *segment) {
	if idle := seg.Out == 0 && seg.Held > 0; idle != seg.Idle {
		l.setIdle(seg, idle)
	}
}

// setIdle puts seg on the list of idle segments, or takes it off.
func (l *ledger) setIdle(seg *segment, idle bool) {
	seg.Idle = idle
	if idle {
		l.idle = append(l.idle, seg)
		return
	}
	j := slices.Index(l.idle, seg)
	l.idle = slices.Delete(l.idle, j, j+1)
}

// splits returns the inactive splits now, small and large, in blocks and
// bytes: the policy's (c), and the held split blocks, less every block of
// the idle segments (the policy's free ones and the held ones counted
// them all).
func (l *ledger) splits(c *policy.Counts) (small, large, smallBytes, largeBytes int64) {
	small = int64(c.SplitBlocks[0] + l.cachedSplit + l.quar.split[0]) // the caches hold small blocks only
	large = int64(c.SplitBlocks[1] + l.quar.split[1])
	smallBytes = c.SplitBytes[0] + l.cachedSplitBytes + l.quar.splitBytes[0]
	largeBytes = c.SplitBytes[1] + l.quar.splitBytes[1]
	for _, seg := range l.idle {
		if seg.Small {
			small -= int64(seg.BlockCount())
			smallBytes -= seg.Size
		} else {
			large -= int64(seg.BlockCount())
			largeBytes -= seg.Size
		}
	}
	return small, large, smallBytes, largeBytes
}

// splitMoves lists the split blocks a queue's cache moved, in order, for
// the ledger (ledger.flushSplits): their sizes, positive into the cache
// and negative out of it, in runs of one segment each. A move takes 8
// bytes, next to the one before, and a run's segment is stored once: the
// hot path touches few cache lines, and seldom writes a pointer (a
// pointer written while the garbage collector runs costs a write
// barrier). A move that undoes the last one listed, and the move that
// makes it again, are counted as a round trip of that one: a queue that
// takes a block and gives it back, over and over, lists it once.
//
// The cache lists a move with trip, and if trip says no, with list:
// trip is small enough to be inlined, so that the hot path makes no call.
type splitMoves struct {
	n    int      // moves listed: moves[:n]
	runs int      // runs: segs[:runs]
	seg  *segment // the last run's segment
	next int32    // the size of the move that is the next half of a round trip; 0: none
	half uint16   // halves of round trips of moves[n-1] counted since it was listed (odd: it is undone, and not made again yet)

	moves [flushOps]splitMove
	segs  [flushOps]*segment // each run's segment
}

// splitMove is a move listed.
type splitMove struct {
	size  int32  // positive into the cache, negative out of it (a cached block is at most cacheMaxBlock)
	trips uint16 // its round trips after it
	first bool   // it starts a run: of the next segment in segs
}

// trip counts a move of a split block of seg, of size bytes, into the
// cache (size > 0) or out of it (size < 0), as half of a round trip of
// the last move listed, and reports whether it is one. The halves are
// only counted here: settle adds the round trips to the move.
func (m *splitMoves) trip(seg *segment, size int64) bool {
	if int32(size) != m.next || seg != m.seg { // a size is never 0: next is not 0 once a move is listed
		return false
	}
	m.half++ // at most flushOps: the cache is flushed at flushOps operations
	m.next = -int32(size)
	return true
}

// settle adds the round trips counted since the last move was listed to
// it, and lists the undoing move held back, if any.
func (m *splitMoves) settle() {
	if m.half == 0 {
		return
	}
	m.moves[m.n-1].trips += m.half / 2
	if m.half%2 != 0 {
		m.add(m.seg, -m.moves[m.n-1].size)
	}
	m.half = 0
}

// list lists a move that trip did not count: the undoing move held back
// first, if any. Fewer than flushOps moves are listed: the cache is
// flushed at flushOps operations.
func (m *splitMoves) list(seg *segment, size int64) {
	m.settle()
	m.add(seg, int32(size))
	m.next = -int32(size)
}

// add lists a move, in seg's run.
func (m *splitMoves) add(seg *segment, size int32) {
	first := seg != m.seg || m.runs == 0
	if first {
		m.seg, m.segs[m.runs] = seg, seg
		m.runs++
	}
	m.moves[m.n] = splitMove{size: size, first: first}
	m.n++
}

// cut ends the moves of a turn (qturn): the undoing move held back is
// listed, and the next move begins a run, so that no round trip spans two
// turns.
func (m *splitMoves) cut() {
	m.settle()
	m.seg, m.next = nil, 0
}

// reset empties m, once the ledger has it.
func (m *splitMoves) reset() {
	clear(m.segs[:m.runs])
	m.n, m.runs, m.seg, m.next, m.half = 0, 0, nil, 0, 0
}

// segMoves replays moves of a segment's split blocks into and out of a
// cache.
type segMoves struct {
	seg *segment
	out int32 // its split blocks out
}

// move replays a move of size bytes (into the cache if positive) and
// returns the change of the inactive splits, in blocks and bytes. Into
// the cache, a block becomes an inactive split, unless it was its
// segment's last block out: the segment is idle then, and its other
// blocks are inactive splits no more. Out of the cache, a block is one no
// more, and if its segment was idle, its other blocks become ones.
func (s *segMoves) move(size int64) (blocks, bytes int64) {
	if size > 0 {
		if s.out--; s.out > 0 {
			return 1, size
		}
		return -s.others(), size - s.seg.Size
	}
	if s.out++; s.out > 1 {
		return -1, size
	}
	return s.others(), s.seg.Size + size
}

// others returns the segment's blocks but one.
func (s *segMoves) others() int64 { return int64(s.seg.BlockCount() - 1) }

// flushSplits brings in the split blocks a queue's cache moved in one
// turn, m's moves from k to end (the first of them begins run r), in
// their order, with the highest the running counts reached, as if one by
// one. m must be cut (a turn's moves are whole runs). Most moves change the inactive splits by their block alone; only
// where a segment goes idle or busy does a move change them by the
// segment's other blocks, and then its run of moves is replayed one by
// one (segMoves.move). A segment's blocks are counted as they are now:
// only the pool changes them, under p.mu, and the queue's own operations
// that take p.mu flush its cache first. So the counts come out as sync
// would make them: the policy has not changed since the last sync.
func (l *ledger) flushSplits(m *splitMoves, r, k, end int) {
	var blocks, bytes statDelta
	var moved int64 // bytes into the cache, less out of it
	for ; k < end; r++ {
		seg := m.segs[r]
		i := seg
		var rb, rby statDelta // the run's
		out, low, from := i.Out, i.Out, k
		for ; k < end && (k == from || !m.moves[k].first); k++ {
			mv := m.moves[k]
			size, trips := int64(mv.size), int64(mv.trips)
			one := 1 | size>>63 // 1 into the cache, -1 out of it
			out -= int32(one)
			low = min(low, out)
			rb.step(one)
			rby.step(size)
			rb.trips(one, trips)
			rby.trips(size, trips)
			moved += size
		}
		if low <= 0 { // seg went idle or busy
			rb, rby = replay(seg, i.Out, m.moves[from:k])
		}
		blocks.then(rb)
		bytes.then(rby)
		l.cachedSplit += int(i.Out - out) // into the cache, less out of it
		i.Held += i.Out - out
		i.Out = out
		l.markIdle(seg)
	}
	l.cachedSplitBytes += moved
	l.s.InactiveSplit.apply(blocks)
	l.s.InactiveSplitBytes.apply(bytes)
}

// replay replays a run of moves of seg's split blocks one by one, from
// out of them out, and returns the changes of the inactive splits, in
// blocks and bytes.
func replay(seg *segment, out int32, moves []splitMove) (blocks, bytes statDelta) {
	s := segMoves{seg: seg, out: out}
	for _, mv := range moves {
		nb, nby := s.move(int64(mv.size))
		blocks.step(nb)
		bytes.step(nby)
		blocks.trips(nb, int64(mv.trips))
		bytes.trips(nby, int64(mv.trips))
	}
	return blocks, bytes
}
