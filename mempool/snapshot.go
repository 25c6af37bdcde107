package mempool

import (
	"cmp"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/trace"
)

// This file is the pool's snapshot: its segments and blocks at one moment,
// as torch.cuda.memory._snapshot gives them, for `clpool viz` and for
// programs that want to see where their memory is.

// Snapshot is the pool's memory at one moment. It marshals to JSON as
// `clpool viz` reads it.
type Snapshot struct {
	Time         time.Time         `json:"time"`
	Device       string            `json:"device,omitempty"`
	Policy       string            `json:"policy"`        // "bins" or "arena"
	ManagedBytes int64             `json:"managed_bytes"` // the segments' bytes
	ActiveBytes  int64             `json:"active_bytes"`  // the bytes asked for by the active blocks
	Limit        int64             `json:"limit,omitempty"`
	Segments     []SegmentSnapshot `json:"segments"` // in the order they were allocated

	// The pool's own peaks (Stats.PeakManagedBytes and PeakActiveBytes,
	// since New or ResetPeak): what the memory reached before the
	// snapshot, which its segments do not show.
	PeakManagedBytes int64 `json:"peak_managed_bytes"`
	PeakActiveBytes  int64 `json:"peak_active_bytes"`

	// History is the last events of a registered hook that keeps them
	// (memhooks.History), oldest first; empty if none is registered. Their
	// queues are numbered as the blocks' Queue, when the hook says which
	// queue each of its numbers is (memhooks.History does).
	History []trace.Event `json:"history,omitempty"`
}

// SegmentSnapshot is one segment: a buffer from the allocator.
type SegmentSnapshot struct {
	ID     int64           `json:"id"` // 1, 2, ... in the order the pool allocated them
	Size   int64           `json:"size"`
	Small  bool            `json:"small"`  // of the small pool (torch's small_pool)
	Blocks []BlockSnapshot `json:"blocks"` // by offset; together they cover the segment
}

// The states of a block in a snapshot: handed out; held (kept for reuse)
// in a segment the pool can free whole; held in a segment that has a
// block handed out (torch's inactive split: the segment cannot be freed).
const (
	StateActive        = "active"
	StateHeld          = "held"
	StateInactiveSplit = "inactive_split"
)

// BlockSnapshot is one block of a segment.
type BlockSnapshot struct {
	Offset    int64  `json:"offset"`
	Size      int64  `json:"size"`
	Requested int64  `json:"requested,omitempty"` // active blocks: the bytes asked for
	State     string `json:"state"`               // StateActive, StateHeld or StateInactiveSplit
	Queue     int    `json:"queue,omitempty"`     // active blocks: 1 + the queue's index in Stats.Queues; 0: none
	ID        uint64 `json:"block_id,omitempty"`  // active blocks: the PooledBuffer's ID, as hooks see it
	Site      string `json:"site,omitempty"`      // active blocks: where they were allocated, when a hook knows (SiteNamer)
}

// SiteNamer is a hook that knows where blocks were allocated, such as
// memhooks.LineProfile: Snapshot asks it for each active block's site.
type SiteNamer interface {
	Site(blockID uint64) (site string, ok bool)
}

// historyKeeper is a hook that keeps the last events (memhooks.History).
type historyKeeper interface {
	History() []trace.Event
}

// historyQueues is a historyKeeper whose events number queues their own
// way: an event's queue n is Queues()[n-1] (memhooks.History). Snapshot
// renumbers them as the pool numbers its queues.
type historyQueues interface {
	Queues() []*cl.CommandQueue
}

// historyOf returns the history of the first hook that keeps one, its
// queues numbered as in queues (the pool's); nil if none does, or if the
// hook panics: a snapshot is taken under the pool's locks, which a
// hook's panic must not leave held (as callHook recovers the others).
func historyOf(hooks hookList, queues []QueueStats) (h []trace.Event) {
	if hooks == nil {
		return nil
	}
	defer func() {
		if recover() != nil {
			h = nil
		}
	}()
	for _, entry := range *hooks {
		if k, ok := entry.h.(historyKeeper); ok {
			h = k.History()
			if hq, ok := entry.h.(historyQueues); ok {
				renumberQueues(h, hq.Queues(), queues)
			}
			return h
		}
	}
	return nil
}

// Snapshot returns the pool's segments and blocks now, for either policy.
// It holds the pool's lock, and every queue's cache's, while it walks
// them: a snapshot is for looking, not for a hot path.
func (p *Pool) Snapshot() Snapshot {
	qs := p.lockCaches()
	cached := p.cachedLocked(qs)
	st := p.statsLocked()
	s := Snapshot{
		Time:         time.Now(),
		Policy:       st.Policy,
		ManagedBytes: st.ManagedBytes,
		ActiveBytes:  st.ActiveBytes,
		Limit:        p.limit,
		Segments:     make([]SegmentSnapshot, 0, len(p.l.segs)),
	}
	s.PeakManagedBytes, s.PeakActiveBytes = st.PeakManagedBytes, st.PeakActiveBytes
	for seg, id := range p.l.segs {
		ss := SegmentSnapshot{ID: id, Size: seg.Size, Small: seg.Small}
		// As Stats counts them: a held block (free, or in a queue's
		// cache) is an inactive split if its segment has a block in use,
		// else StateHeld.
		split := inUse(seg, cached)
		for b := range seg.Blocks() {
			bs := BlockSnapshot{Offset: b.Off, Size: b.Size}
			switch {
			case !b.IsFree() && !cached[b]:
				bs.State, bs.Requested, bs.Queue, bs.ID = StateActive, b.Requested, int(b.Queue), b.Owner
			case split:
				bs.State = StateInactiveSplit
			default:
				bs.State = StateHeld
			}
			ss.Blocks = append(ss.Blocks, bs)
		}
		s.Segments = append(s.Segments, ss)
	}
	// The history as of the segments' walk, under the same locks: a
	// block handed out after it is in neither (a hook's history takes its
	// own lock, never the pool's).
	hooks := p.hooks.Load()
	s.History = historyOf(hooks, st.Queues)
	p.unlockCaches(qs)

	slices.SortFunc(s.Segments, func(a, b SegmentSnapshot) int { return cmp.Compare(a.ID, b.ID) })
	if p.device != nil {
		s.Device = p.device.Name
	}
	if hooks != nil {
		for _, entry := range *hooks {
			if n, ok := entry.h.(SiteNamer); ok {
				nameSites(s.Segments, n)
			}
		}
	}
	return s
}

// renumberQueues sets each event's Queue n, the queue hq[n-1], to the
// pool's number of that queue: 1 + its index in queues; 0 if the pool
// has no such queue.
func renumberQueues(events []trace.Event, hq []*cl.CommandQueue, queues []QueueStats) {
	number := make(map[*cl.CommandQueue]int, len(queues))
	for i, q := range queues {
		number[q.Queue] = i + 1
	}
	for i := range events {
		if n := events[i].Queue; n > 0 && n <= len(hq) {
			events[i].Queue = number[hq[n-1]]
		}
	}
}

// nameSites fills in the sites n knows of active blocks that have none.
func nameSites(segs []SegmentSnapshot, n SiteNamer) {
	for i := range segs {
		for j := range segs[i].Blocks {
			b := &segs[i].Blocks[j]
			if b.State == StateActive && b.Site == "" {
				b.Site, _ = n.Site(b.ID)
			}
		}
	}
}

// noteBlock notes, on block b handed out as pb for a request of size on
// queue r, what a snapshot shows of it. p.mu must be held.
func noteBlock(b *block, size int64, r *qstate, pb *PooledBuffer) {
	b.Requested, b.Queue, b.Owner = size, r.id, uint64(uintptr(unsafe.Pointer(pb)))
}

// lockCaches locks every queue's cache, then p.mu, for a look at every
// block (Snapshot, Stats), or to bring in every cache's sums (flushAll,
// ResetPeak); it returns the queues locked (cachedLocked: their blocks).
// unlockCaches undoes it. It first tries, under p.mu, every cache's lock,
// and lets go (of the caches' locks first) and tries again while one is
// in use (at most lockTries times): so a queue's flush, under p.mu, never
// finds a cache's lock held by it, and skips none (it would bring in its
// own newer turns before that cache's). Then it waits for each cache's
// lock, and p.mu, in the lock order, marking each cache frozen while it
// holds its lock without p.mu: a queue's flush meanwhile brings such a
// cache in with the others (flushIdle). While it waits so it read-holds
// p.listMu, so that no queue is registered meanwhile (queueState takes
// it for that): else a goroutine making queues made it let go of every
// lock and begin again each time, for ever (review s46d). The one other
// change to the list is a pass that forgets queues (forgetReleased, one
// at a time, holding every cache's lock for it), which registrations set
// off: with none registered while it waits, it tries about twice more at
// most.
func (p *Pool) lockCaches() []*qstate {
	p.inspecting.Add(1)
	listHeld := false
	for try := 0; ; try++ {
		if try >= lockCachesTries && !listHeld {
			p.listMu.RLock()
			listHeld = true
		}
		list := p.caches.Load()
		qs := *list
		if try < lockCachesTries {
			p.lock()
			qs = p.cacheList() // not replaced while p.mu is held
			n := 0
			for n < len(qs) && qs[n].c.mu.TryLock() {
				n++
			}
			if n < len(qs) {
				p.releaseCaches(qs[:n])
				runtime.Gosched() // let the queue's operation end
				continue
			}
		} else {
			for _, q := range qs {
				q.c.mu.Lock()
				q.c.frozen.Store(true)
			}
			if lockCachesWaited != nil {
				lockCachesWaited()
			}
			p.lock()
			if p.caches.Load() != list {
				p.releaseCaches(qs) // a queue went meanwhile
				continue
			}
		}
		if listHeld {
			p.listMu.RUnlock() // p.mu holds the list still now
		}
		p.flushTurnsLocked(qs)
		return qs
	}
}

// cachedLocked returns the blocks in the caches qs, locked by
// lockCaches, and in the sanitizer's quarantine: held, although the
// policy sees them in use. p.mu must be held.
func (p *Pool) cachedLocked(qs []*qstate) map[*block]bool {
	cached := map[*block]bool{}
	for _, q := range qs {
		for _, cb := range q.c.blocks {
			cached[cb.block] = true
		}
	}
	if p.san != nil {
		p.san.quarantined(cached) // held, and not in the policy either
	}
	return cached
}

// lockUnder takes p.mu for a queue's operation that holds r's cache's
// lock, marking the cache waiting meanwhile: a flush that finds the lock
// taken (under p.mu, which this one waits for) then knows the holder is a
// queue's operation, not lockCaches between its Lock and its mark (see
// frozen). Every queue's operation that takes p.mu under a cache's lock
// takes it here.
func (p *Pool) lockUnder(r *qstate) {
	r.c.waiting.Store(true)
	p.lock()
	r.c.waiting.Store(false)
}

// Whose a cache's lock is, as frozen finds it.
const (
	heldByOp        = iota // a queue's operation: in use
	heldByInspector        // lockCaches, waiting for p.mu: marked frozen
	heldByCaller           // let go meanwhile: the caller holds it now
)

// frozenWait bounds frozen's wait: a backstop only, for a holder of a
// cache's lock that would take p.mu other than through lockUnder (none
// does), or a lockCaches descheduled that long between its Lock and its
// mark. Each time it ends a wait, core.frozenLate counts it.
const frozenWait = time.Second

// frozen says who holds qs's cache's lock, which was found taken: a
// cache marked frozen is held by lockCaches, waiting for p.mu, and stays
// so while p.mu is held (the mark is cleared under p.mu only). While no
// lockCaches is under way (p.inspecting), the holder is a queue's
// operation. Else frozen waits for the holder to show itself: lockCaches
// marks a cache just after it takes its lock, a queue's operation marks
// it waiting before it waits for p.mu (lockUnder), and any other let go
// of it after a few steps of its own, none of which waits for p.mu (then
// frozen takes the lock); frozenWait bounds the wait all the same. A
// holder taken for an operation while it was lockCaches between its Lock
// and its mark would let one goroutine's turns on two queues come in out
// of order (review s41g's TestHostileS41gManyStatsReaders). p.mu must be
// held: the wait holds it, and the locks of the caches the flush took.
func (p *Pool) frozen(qs *qstate) int {
	if p.inspecting.Load() == 0 {
		return heldByOp
	}
	var deadline time.Time
	for {
		switch {
		case qs.c.frozen.Load():
			return heldByInspector
		case qs.c.waiting.Load():
			return heldByOp
		case qs.c.mu.TryLock():
			return heldByCaller
		}
		if now := time.Now(); deadline.IsZero() {
			deadline = now.Add(frozenWait)
		} else if now.After(deadline) {
			p.frozenLate++
			return heldByOp
		}
		runtime.Gosched()
	}
}

// lockCachesWaited, if not nil, is called by lockCaches once it holds
// every cache's lock it waited for, before p.mu; lockCachesTries is
// lockTries. Tests set them.
var (
	lockCachesWaited func()
	lockCachesTries  = lockTries
)

func (p *Pool) unlockCaches(qs []*qstate) {
	p.releaseCaches(qs)
	p.inspecting.Add(-1)
}

// releaseCaches lets go of the locks of the caches qs, then of p.mu (see
// lockCaches). p.mu must be held.
func (p *Pool) releaseCaches(qs []*qstate) {
	for _, q := range qs {
		q.c.frozen.Store(false) // under p.mu: see flushIdle
		q.c.mu.Unlock()
	}
	p.mu.Unlock()
}
