// Package policy holds the pool's placement policies as plain data
// structures: which free block serves a request, how a new segment is
// sized, and what happens to a block given back. It knows nothing of
// OpenCL: a Segment carries the pool's handle of its memory as an opaque
// T (a buffer or SVM allocation in package mempool; an int in this package's tests), so
// every policy is tested here without a device.
//
// Two policies implement the same methods:
//
//   - Bins: PyOpenCL's exact bins. A segment is one block of its bin's
//     AllocSize, held on the bin's LIFO stack when given back, and serves
//     only requests of its own bin.
//   - Arenas: a splitting arena. Segments are cut into blocks aligned to
//     the device's base-address alignment; free blocks are indexed by size
//     class (TLSF's two-level index, the classes being PyOpenCL's bins), a
//     request takes the best fit (the smallest free block that fits) and
//     splits it, and a block given back merges with its free neighbours.
//
// Nothing here is safe for concurrent use: the pool calls it under its
// lock. Nothing here counts statistics either: a policy reports the sizes
// of its own structures (Counts), and the pool's ledger turns them into
// statistics.
package policy
