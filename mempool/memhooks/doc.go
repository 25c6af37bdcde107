// Package memhooks holds ready-made mempool hooks, as CuPy's
// cupy.cuda.memory_hooks does, and one as PyTorch's memory history:
//
//   - DebugPrint writes every event as a JSON line, with its time, t, in
//     nanoseconds since the DebugPrint was made.
//   - LineProfile attributes device memory to the lines of code that asked
//     for it, prints the tree as CuPy's LineProfileHook does, and writes it
//     as a pprof profile for `go tool pprof`.
//   - TraceRecorder writes the allocations and frees as a timed trace
//     (package trace) that `clpool replay` can replay and `clpool viz`
//     draw, with the pool's own segments, and with WithSites each block's
//     queue and call site. It writes whole lines only, by itself every
//     250 ms; Flush or Close it when done (on Ctrl-C too: see
//     TraceRecorder).
//   - History keeps the last n allocations and frees in a ring, as
//     torch.cuda.memory._record_memory_history(max_entries=n) does, with
//     the pool's segments and each event's queue, and with WithSites its
//     site: read them with Events, or write them as a timed trace with
//     WriteTrace. A pool's Snapshot includes them, and with sites names
//     each active block's site from them.
//
// Times are from the monotonic clock, measured from when the hook was made.
// Register any of them with pool.AddHook; each is safe for concurrent use.
// Adding one to a pool again is the same registration, told each event
// once (see Pool.AddHook).
package memhooks
