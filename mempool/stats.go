package mempool

// SmallBlock is the size under which a block counts as small in the
// torch-style statistics (torch's small pool holds blocks up to 1 MiB).
const SmallBlock = 1 << 20

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

// StatGroup is a Stat for all blocks, and for small (under SmallBlock) and
// large blocks apart: torch's "all", "small_pool" and "large_pool".
//
// Inside the pool only Small, Large and All.Peak are kept up to date; the
// rest of All is their sum, filled in by the snapshot (sumAll). That spares
// the hot path a third of the work.
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

// current returns All.Current, which the pool does not keep.
func (g *StatGroup) current() int64 { return g.Small.Current + g.Large.Current }

// sumAll fills in All from Small and Large.
func (g *StatGroup) sumAll() {
	g.All.Current = g.current()
	g.All.Allocated = g.Small.Allocated + g.Large.Allocated
	g.All.Freed = g.Small.Freed + g.Large.Freed
}

func (g *StatGroup) each(f func(*Stat)) { f(&g.All); f(&g.Small); f(&g.Large) }

// Stats is a snapshot of a pool's counters, taken under its lock, so the
// fields agree with each other.
type Stats struct {
	// Blocks and bytes now. Active blocks are handed out; held blocks were
	// given back and wait for reuse.
	ActiveBlocks int
	HeldBlocks   int
	ActiveBytes  int64 // the sizes requested for the active blocks
	HeldBytes    int64 // the alloc sizes of the held blocks
	ManagedBytes int64 // the alloc sizes of all blocks the pool owns, active or held, plus allocations in flight

	// Peaks since New or ResetPeak.
	PeakActiveBytes  int64 // the most ActiveBytes has been
	PeakManagedBytes int64 // the most ManagedBytes has been

	// Configuration.
	LeadingBits int
	Limit       int64 // 0: no limit
	Holding     bool  // false after StopHolding or Close

	// Totals since New or ResetAccumulated.
	Hits         int64 // requests served by a held block
	Misses       int64 // requests that found no held block of their bin
	DeviceAllocs int64 // buffers the allocator handed out (torch: num_device_alloc)
	DeviceFrees  int64 // buffers given back to the allocator (num_device_free)
	FreeErrors   int64 // frees the allocator reported an error for (the buffer is dropped all the same)
	Reclaimed    int64 // buffers dropped without Close and returned by the garbage collector
	OOMRetries   int64 // device allocations that failed for lack of memory and were retried after freeing (num_alloc_retries)
	OOMs         int64 // requests refused with ErrOutOfMemory (num_ooms)

	// The torch-style statistics (torch.cuda.memory_stats), by all, small
	// and large blocks; MemoryStats names them as torch does. A block's
	// size class is that of its alloc size. The pool has no streams, so
	// torch's "active" equals "allocation" here.
	Allocation     StatGroup // blocks handed out (torch: allocation, active)
	AllocatedBytes StatGroup // their alloc sizes (allocated_bytes, active_bytes)
	Segment        StatGroup // device allocations the pool owns, active or held (segment)
	ReservedBytes  StatGroup // their alloc sizes, plus allocations in flight (reserved_bytes)
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
		{"active", &s.Allocation}, {"active_bytes", &s.AllocatedBytes},
		{"segment", &s.Segment}, {"reserved_bytes", &s.ReservedBytes},
	}
}

// MemoryStats returns the pool's statistics under torch.cuda.memory_stats'
// key names ("allocated_bytes.all.current", "segment.large_pool.peak",
// "num_ooms", ...), so dashboards written for PyTorch carry over.
func (p *Pool) MemoryStats() map[string]int64 {
	s := p.Stats()
	m := make(map[string]int64, 90)
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
	m["num_alloc_retries"] = s.OOMRetries
	m["num_ooms"] = s.OOMs
	m["num_device_alloc"] = s.DeviceAllocs
	m["num_device_free"] = s.DeviceFrees
	return m
}

// ResetPeak sets every peak to its current value, as
// torch.cuda.reset_peak_memory_stats does.
func (p *Pool) ResetPeak() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, gr := range p.s.groups() {
		gr.g.sumAll()
		gr.g.each(func(s *Stat) { s.Peak = s.Current })
	}
	p.s.PeakActiveBytes = p.s.ActiveBytes
}

// ResetAccumulated zeroes the totals (the Allocated and Freed of every
// Stat, hits, misses, device allocations and frees, retries and refusals),
// as torch.cuda.reset_accumulated_memory_stats does.
func (p *Pool) ResetAccumulated() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, gr := range p.s.groups() {
		gr.g.each(func(s *Stat) { s.Allocated, s.Freed = 0, 0 })
	}
	s := &p.s
	s.Hits, s.Misses, s.DeviceAllocs, s.DeviceFrees = 0, 0, 0, 0
	s.FreeErrors, s.Reclaimed, s.OOMRetries, s.OOMs = 0, 0, 0, 0
}

// snapshot fills in the fields derived from the torch groups. p.mu must be
// held.
func (p *Pool) snapshot() Stats {
	s := p.s
	for _, gr := range s.groups() {
		gr.g.sumAll()
	}
	s.ActiveBlocks = int(s.Allocation.All.Current)
	s.ManagedBytes = s.ReservedBytes.All.Current
	s.PeakManagedBytes = s.ReservedBytes.All.Peak
	return s
}
