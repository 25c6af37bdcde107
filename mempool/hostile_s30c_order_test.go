package mempool_test

import (
	"testing"
)

// Two blocks handed over to one out-of-order queue by two Allocates in a
// row: the first from queue A (whose slow kernel still reads it), the
// second from queue B (whose kernel is short). Each handover enqueues a
// barrier of its own on C, so the two barriers are consecutive; POCL's
// out-of-order queues honour only the last of two barriers in a row
// (doc.go, issue 21), so the fill of the first block waits only for B's
// marker and overwrites the block under A's kernel.
//
// Expected: A's kernel reads only ones (the package doc: "the pool never
// hands its memory to any queue before the commands enqueued before Close
// may have finished with it"). Observed on POCL: 1 to 8 of 8 trials
// corrupted, every run. With the second Allocate on B instead of C (no
// second barrier on C), no trial is corrupted: one handover alone is
// ordered right. Cause: queue.go's fence (and order) enqueue a barrier per
// Allocate; nothing makes a later barrier on the same out-of-order queue
// also wait for the markers of the one before it.
func TestHostileS30cConsecutiveHandoversToOutOfOrderQueue(t *testing.T) {
	handoverTrials(t, handover{second: true})
}
