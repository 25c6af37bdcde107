package allocator

import (
	"sync"

	"github.com/clpool/clpool/cl"
)

// owners maps each buffer that a Budget or a Counting handed out, and that
// has not been freed, to that wrapper: the outermost one whose Allocate
// returned it (Counting over Budget: the Counting). Their Allocate records
// the buffer, their Free forgets it.
var owners sync.Map // *cl.Buffer → Allocator

// own records that a handed out buf: Free(buf) is to call a.Free.
func own(buf *cl.Buffer, a Allocator) {
	if buf != nil {
		owners.Store(buf, a)
	}
}

// disown forgets buf's owner, once the buffer is freed.
func disown(buf *cl.Buffer) { owners.Delete(buf) }

// Free frees buf through the allocator that handed it out, for code that
// holds a buffer but not its allocator (package array frees the buffers of
// a raw allocator here). For a buffer from a Budget or a Counting, that is
// the wrapper's Free, so that the budget gets its bytes back and the count
// sees the free; any other buffer (from a Deferred, an Immediate, or
// cl.Context.CreateBuffer) is released as Deferred.Free releases it.
// Releasing such a buffer directly would leave a Budget short of those
// bytes for good and a Counting reporting a leak. Free(nil) does nothing;
// a buffer already freed returns ErrFreed, one whose Free is under way
// ErrBeingFreed. An allocator wrapped by a Budget or a Counting frees
// through the allocator it wraps, not through Free: the buffer's owner is
// the outermost wrapper, whose Free of it is the one under way.
func Free(buf *cl.Buffer) error {
	if buf == nil {
		return nil
	}
	if a, ok := owners.Load(buf); ok {
		return a.(Allocator).Free(buf)
	}
	return releaseOnce(buf)
}
