// Package memhooks holds ready-made mempool hooks, as CuPy's
// cupy.cuda.memory_hooks does:
//
//   - DebugPrint writes every event as a JSON line.
//   - LineProfile attributes device memory to the lines of code that asked
//     for it, prints the tree as CuPy's LineProfileHook does, and writes it
//     as a pprof profile for `go tool pprof`.
//   - TraceRecorder writes the allocations and frees as a trace (package
//     trace) that `clpool replay` can replay.
//
// Register any of them with pool.AddHook; each is safe for concurrent use.
package memhooks
