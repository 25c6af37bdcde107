package mempool

import "github.com/clpool/clpool/mempool/internal/policy"

// SmallBlock, 1 MiB as in torch, splits the small pool from the large one
// in the torch-style statistics: a block counts as small if it is of a
// small segment: with an arena, a segment made for a request of up to
// SmallBlock (it may serve any request later); with exact bins, a block
// under SmallBlock. It is the policies'
// own split (policy.SmallRequest), of which it is the exported name.
const SmallBlock = policy.SmallRequest

// Stat is one statistic as torch.cuda.memory_stats keeps it: its value now,
// the most it has been, and the totals added to it and taken from it.
type Stat struct {
	Current   int64
	Peak      int64 // since New or ResetPeak
	Allocated int64 // total added, since New or ResetAccumulated
	Freed     int64 // total taken away, since New or ResetAccumulated
}

func (s *Stat) add(n int64) {
	s.Current += n
	s.Allocated += n
	s.Peak = max(s.Peak, s.Current)
}

func (s *Stat) sub(n int64) {
	s.Current -= n
	s.Freed += n
}

// statDelta sums additions to and subtractions from a Stat, with the
// highest its running sum reached.
type statDelta struct{ added, freed, top int64 }

// net returns the sum's change.
func (d *statDelta) net() int64 { return d.added - d.freed }

func (d *statDelta) add(n int64) {
	d.added += n
	d.top = max(d.top, d.added-d.freed)
}

func (d *statDelta) sub(n int64) { d.freed += n }

// step adds n if it is positive, takes -n away if negative (without a
// branch: the signs of a cache's moves follow no pattern).
func (d *statDelta) step(n int64) {
	d.added += max(n, 0)
	d.freed += max(-n, 0)
	d.top = max(d.top, d.added-d.freed)
}

// then adds the sums e that came after d's.
func (d *statDelta) then(e statDelta) {
	d.top = max(d.top, d.added-d.freed+e.top)
	d.added += e.added
	d.freed += e.freed
}

// trips counts a change of n (of either sign) undone and made again, k
// times: the running sum ends, and peaks, where it was.
func (d *statDelta) trips(n, k int64) {
	n = max(n, -n) * k
	d.added += n
	d.freed += n
}

// StatGroup is a Stat for all blocks, and for the small and the large
// pool apart (see SmallBlock: an arena's blocks count in the pool of their
// segment): torch's "all", "small_pool" and "large_pool".
//
// Inside the pool only Small, Large and All.Peak are kept up to date; the
// rest of All is their sum, filled in when the statistics are read
// (sumAll). That spares the hot path a third of the work.
type StatGroup struct {
	All, Small, Large Stat
}

func (g *StatGroup) add(large bool, n int64) {
	if large {
		g.Large.add(n)
	} else {
		g.Small.add(n)
	}
	g.All.Peak = max(g.All.Peak, g.Small.Current+g.Large.Current)
}

func (g *StatGroup) sub(large bool, n int64) {
	if large {
		g.Large.sub(n)
	} else {
		g.Small.sub(n)
	}
}

// apply brings in the sums d of small blocks' changes (see statDelta).
func (g *StatGroup) apply(d statDelta) {
	before := g.Small.Current + g.Large.Current
	g.Small.apply(d)
	g.All.Peak = max(g.All.Peak, before+d.top)
}

// apply brings in the sums d, its peak as if one by one.
func (s *Stat) apply(d statDelta) {
	s.Peak = max(s.Peak, s.Current+d.top)
	s.Current += d.net()
	s.Allocated += d.added
	s.Freed += d.freed
}

// set moves Small and Large to small and large at once: All's peak is
// their new sum's, never that of one new and one old.
func (g *StatGroup) set(small, large int64) {
	g.Small.moveTo(small)
	g.Large.moveTo(large)
	g.All.Peak = max(g.All.Peak, small+large)
}

// moveTo adds or takes away what brings Current to v.
func (s *Stat) moveTo(v int64) {
	switch d := v - s.Current; {
	case d > 0:
		s.add(d)
	case d < 0:
		s.sub(-d)
	}
}

// current returns All.Current, which the pool does not keep.
func (g *StatGroup) current() int64 { return g.Small.Current + g.Large.Current }

// sumAll fills in All from Small and Large.
func (g *StatGroup) sumAll() {
	g.All.Current = g.current()
	g.All.Allocated = g.Small.Allocated + g.Large.Allocated
	g.All.Freed = g.Small.Freed + g.Large.Freed
}

func (g *StatGroup) each(f func(*Stat)) { f(&g.All); f(&g.Small); f(&g.Large) }

// Stats is a copy of a pool's counters at one moment, taken under its
// lock with every queue's cache flushed into them, so the fields agree
// with each other. (Snapshot, not Stats, is the pool's snapshot.)
type Stats struct {
	// Blocks and bytes now. Active blocks are handed out; held blocks were
	// given back and are kept for reuse: the policy's free blocks (an
	// arena's split ones included) and the blocks cached in the queues'
	// caches.
	ActiveBlocks int
	HeldBlocks   int
	ActiveBytes  int64 // the sizes requested for the active blocks
	HeldBytes    int64 // the sizes of the held blocks
	ManagedBytes int64 // the sizes of all segments the pool owns (a segment being allocated counts once it is)

	// Peaks since New or ResetPeak.
	PeakActiveBytes  int64 // the most ActiveBytes has been
	PeakManagedBytes int64 // the most ManagedBytes has been

	// Fragmentation is 1 - (largest held block / held bytes): 0 when the
	// held memory is one block (or none), near 1 when it is in many small
	// pieces that a large request cannot use. With the arena, a block in a
	// queue's cache counts with its held neighbours, as one range: the
	// cache gives it back before a request that needs the range fails.
	Fragmentation float64

	// Configuration.
	Policy       string // "bins" (exact bins, the default) or "arena" (WithArena)
	LeadingBits  int
	MaxSplitSize int64 // WithMaxSplitSize; 0: no limit
	Limit        int64 // 0: no limit
	Holding      bool  // false after StopHolding or Close

	// Totals since New or ResetAccumulated.
	Hits         int64 // requests served by a held block
	Misses       int64 // requests that found no held block that fits
	DeviceAllocs int64 // buffers the allocator handed out (torch: num_device_alloc)
	DeviceFrees  int64 // buffers given back to the allocator (num_device_free)
	FreeErrors   int64 // frees the allocator reported an error for (the buffer is dropped all the same)
	Reclaimed    int64 // buffers dropped without Close and returned by the garbage collector
	OOMRetries   int64 // retries after the limit or the device refused a segment: after freeing, collecting, or trying a smaller segment (num_alloc_retries)
	OOMs         int64 // requests refused with ErrOutOfMemory (num_ooms)

	// The torch-style statistics (torch.cuda.memory_stats), by all, small
	// and large pool; MemoryStats names them as torch does. A block counts
	// in the pool of its segment: small for the arena's small segments
	// (requests up to SmallBlock), or, with exact bins, blocks under
	// SmallBlock.
	Allocation     StatGroup // blocks handed out (torch: allocation)
	AllocatedBytes StatGroup // their sizes (allocated_bytes)
	RequestedBytes StatGroup // the sizes requested for them (requested_bytes)
	// Active blocks and their bytes (torch: active, active_bytes). In torch
	// they differ from allocation while freed blocks wait for other
	// streams; a pool without queues hands a block back at once, so here
	// they equal Allocation and AllocatedBytes.
	Active           StatGroup
	ActiveBlockBytes StatGroup
	// InactiveSplit counts the held blocks of segments that have a block
	// in use (inactive_split; see Snapshot's StateInactiveSplit), as they
	// are cut: blocks that wait unmerged (in a queue's cache, or an
	// arena's short lists) count one each, where torch, which merges a
	// block given back at once, counts their run once. The bytes are
	// torch's.
	InactiveSplit      StatGroup
	InactiveSplitBytes StatGroup // their bytes (inactive_split_bytes)
	Segment            StatGroup // device allocations the pool owns (segment)
	ReservedBytes      StatGroup // their sizes, once allocated (reserved_bytes)

	// Oversize blocks and segments: those over the maximum split size,
	// never split (WithMaxSplitSize; torch: oversize_allocations,
	// oversize_segments). Without it there are none.
	OversizeAllocations Stat
	OversizeSegments    Stat

	// Queues has the figures of each queue the pool knows: those it has
	// allocated for (Pool.On, and the allocator's own queue) and those a
	// RecordQueue named (a line with no requests until it allocates, whose
	// markers and host waits count the orderings after its commands when a
	// block it used moves on), in order of first use; a queue released and
	// forgotten (see RecordQueue) keeps its line.
	Queues []QueueStats
}

// groups lists the torch groups with torch's names, in torch's order.
func (s *Stats) groups() []struct {
	name string
	g    *StatGroup
} {
	return []struct {
		name string
		g    *StatGroup
	}{
		{"allocation", &s.Allocation}, {"allocated_bytes", &s.AllocatedBytes},
		{"requested_bytes", &s.RequestedBytes},
		{"active", &s.Active}, {"active_bytes", &s.ActiveBlockBytes},
		{"inactive_split", &s.InactiveSplit}, {"inactive_split_bytes", &s.InactiveSplitBytes},
		{"segment", &s.Segment}, {"reserved_bytes", &s.ReservedBytes},
	}
}

// MemoryStats returns the pool's statistics under torch.cuda.memory_stats'
// key names ("allocated_bytes.all.current", "segment.large_pool.peak",
// "num_ooms", ...), so dashboards written for PyTorch carry over. Its
// "num_sync_all_streams" is always 0: the pool never waits for every
// queue (torch does, to free its cached blocks).
func (p *Pool) MemoryStats() map[string]int64 {
	s := p.Stats()
	m := make(map[string]int64, 128)
	for _, gr := range s.groups() {
		for _, pool := range []struct {
			name string
			st   Stat
		}{{"all", gr.g.All}, {"small_pool", gr.g.Small}, {"large_pool", gr.g.Large}} {
			prefix := gr.name + "." + pool.name + "."
			m[prefix+"current"] = pool.st.Current
			m[prefix+"peak"] = pool.st.Peak
			m[prefix+"allocated"] = pool.st.Allocated
			m[prefix+"freed"] = pool.st.Freed
		}
	}
	for _, st := range []struct {
		name string
		st   Stat
	}{{"oversize_allocations", s.OversizeAllocations}, {"oversize_segments", s.OversizeSegments}} {
		m[st.name+".current"] = st.st.Current
		m[st.name+".peak"] = st.st.Peak
		m[st.name+".allocated"] = st.st.Allocated
		m[st.name+".freed"] = st.st.Freed
	}
	m["max_split_size"] = s.MaxSplitSize
	if s.MaxSplitSize == 0 {
		m["max_split_size"] = -1 // as torch reports no limit
	}
	m["num_alloc_retries"] = s.OOMRetries
	m["num_ooms"] = s.OOMs
	m["num_device_alloc"] = s.DeviceAllocs
	m["num_device_free"] = s.DeviceFrees
	m["num_sync_all_streams"] = 0
	return m
}

// ResetPeak sets every peak to its current value, as
// torch.cuda.reset_peak_memory_stats does.
func (p *Pool) ResetPeak() {
	qs := p.lockCaches() // every cache's sums in, and none meanwhile
	defer p.unlockCaches(qs)
	p.l.resetPeak()
}

// ResetAccumulated zeroes the totals (the Allocated and Freed of every
// Stat, hits, misses, device allocations and frees, retries and refusals,
// and each queue's requests, hits, handovers, markers and waits), as
// torch.cuda.reset_accumulated_memory_stats does.
func (p *Pool) ResetAccumulated() {
	qs := p.lockCaches() // every cache's sums in, and none meanwhile
	defer p.unlockCaches(qs)
	p.l.resetAccumulated()
}

// statsLocked copies the counters into a Stats and fills in the fields
// derived from them. p.mu must be held.
func (p *Pool) statsLocked() Stats {
	s := p.l.s
	s.Queues = append([]QueueStats(nil), s.Queues...)
	s.Active, s.ActiveBlockBytes = s.Allocation, s.AllocatedBytes
	for _, gr := range s.groups() {
		gr.g.sumAll()
	}
	s.ActiveBlocks = int(s.Allocation.All.Current)
	s.ActiveBytes = s.RequestedBytes.All.Current
	s.PeakActiveBytes = s.RequestedBytes.All.Peak
	s.ManagedBytes = s.ReservedBytes.All.Current
	s.PeakManagedBytes = s.ReservedBytes.All.Peak
	if s.HeldBytes > 0 {
		s.Fragmentation = 1 - float64(p.pol.LargestFree())/float64(s.HeldBytes)
	}
	return s
}

// inUse reports whether a block of seg is handed out: active, and not in
// a queue's cache.
func inUse(seg *segment, cached map[*block]bool) bool {
	for b := range seg.Blocks() {
		if !b.IsFree() && !cached[b] {
			return true
		}
	}
	return false
}
