package allocator

import (
	"errors"
	"fmt"
	"sync"

	"github.com/clpool/clpool/cl"
)

// pinnedFlags are the flags of every buffer a Pinned allocates.
const pinnedFlags = cl.MemAllocHostPtr | cl.MemReadWrite

// Pinned allocates pinned host memory for transfers, as CUDA's
// cudaHostAlloc does: buffers made with cl.MemAllocHostPtr|cl.MemReadWrite,
// whose memory the runtime allocates on the host, where the device can
// reach it (page-locked, for DMA, on GPU runtimes), each mapped for
// reading and writing once, at allocation, and kept mapped until Free.
// Host returns a buffer's mapped bytes. A pool over a Pinned,
// mempool.New(pinned), is a pinned memory pool (CuPy's
// PinnedMemoryPool); the host bytes of one of its blocks pb are
//
//	pinned.Host(pb.Base())[pb.Offset() : pb.Offset()+pb.Size()]
//
// and pb.Close() may come right after a non-blocking transfer from or to
// them is enqueued on pb's queue (or one pb.RecordQueue names): the pool
// hands the block out again, or frees it, only once those queues'
// commands have completed (mempool's package doc, "Pinned host memory").
//
// # Staging memory
//
// The host bytes are the host side of ordinary transfers of other,
// device, buffers: the destination of q.ReadBuffer(dev, off, host) and the
// source of q.WriteBuffer(dev, off, host) (or their Enqueue forms), which
// runtimes can run at full speed from pinned memory. A blocking transfer
// is done with the bytes when it returns; after a non-blocking one, wait
// for its Event before touching the bytes or freeing the buffer.
//
// The pinned buffer itself is not for commands: while a buffer is mapped
// for writing, OpenCL leaves undefined every command that uses it (a
// kernel argument, a read, write, copy or fill of it), and host and
// device see the same contents only at a map or unmap (OpenCL 1.2,
// 5.4.3). Since a Pinned's buffers stay mapped, pass only their host
// bytes to transfers, never the buffer (nor pb.Buffer() of a pool over
// it).
//
// Free unmaps on the Pinned's queue and then releases the buffer: free
// every buffer (close the pool) before releasing the queue. A Pinned is
// safe for concurrent use.
type Pinned struct {
	q *cl.CommandQueue

	mu   sync.Mutex            // protects host
	host map[*cl.Buffer][]byte // the live buffers and their mapped bytes
}

// NewPinned returns an allocator of pinned buffers in q's context, mapped
// and unmapped on q. A nil queue returns an error matching
// cl.ErrInvalidCommandQueue.
func NewPinned(q *cl.CommandQueue) (*Pinned, error) {
	if q == nil {
		return nil, fmt.Errorf("allocator: NewPinned: nil queue: %w", cl.ErrInvalidCommandQueue)
	}
	return &Pinned{q: q, host: make(map[*cl.Buffer][]byte)}, nil
}

// HostOf returns the Host method of allocator a, or of one it wraps
// (through wrappers whose Unwrap returns an Allocator, as Budget's and
// Counting's do): a Pinned's, or any allocator's whose buffers stay
// mapped to memory the host reads and writes directly (one that embeds a
// *Pinned, say); nil if none has one. A pool over such an allocator hands
// its blocks to the host (see mempool's package doc).
func HostOf(a any) (host func(*cl.Buffer) []byte) {
	walk(a, func(a any) bool {
		if h, ok := a.(interface{ Host(*cl.Buffer) []byte }); ok {
			host = h.Host
			return true
		}
		return false
	})
	return host
}

// Context returns the context the buffers are made in.
func (p *Pinned) Context() *cl.Context { return p.q.Context() }

// Queue returns the queue the buffers are mapped and unmapped on.
func (p *Pinned) Queue() *cl.CommandQueue { return p.q }

// Flags returns the flags the buffers are made with:
// cl.MemAllocHostPtr|cl.MemReadWrite.
func (p *Pinned) Flags() cl.MemFlags { return pinnedFlags }

// Allocate returns a new pinned buffer of size bytes, mapped for reading
// and writing: Host(buf) returns its bytes, whose contents are undefined.
// Size 0 returns a nil buffer and no error; negative sizes and sizes over
// the device's max allocation return cl.ErrInvalidBufferSize. If the map
// fails, the buffer is released and the error returned.
func (p *Pinned) Allocate(size int64) (*cl.Buffer, error) {
	if size == 0 {
		return nil, nil
	}
	if err := checkSize(size); err != nil {
		return nil, err
	}
	buf, err := p.q.Context().CreateBuffer(pinnedFlags, size)
	if err != nil {
		return nil, fmt.Errorf("allocator: Pinned.Allocate(%d): %w", size, err)
	}
	host, err := p.q.MapBuffer(buf, cl.MapRead|cl.MapWrite, 0, size)
	if err != nil {
		_ = buf.Release()
		return nil, fmt.Errorf("allocator: Pinned.Allocate(%d): mapping the new buffer: %w", size, err)
	}
	p.mu.Lock()
	p.host[buf] = host
	p.mu.Unlock()
	own(buf, p) // so that the package's Free unmaps it too
	return buf, nil
}

// Host returns the mapped bytes of buf, all Size() of them, valid until
// Free(buf); nil for a buffer this Pinned did not allocate or has freed.
// The slice is over memory the runtime owns: do not use it after Free.
func (p *Pinned) Host(buf *cl.Buffer) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.host[buf]
}

// Free unmaps buf, waiting for the unmap, and releases it. Free(nil) does
// nothing; a buffer this Pinned did not allocate, or has already freed,
// returns an error matching ErrFreed and is left alone; one released
// behind its back (buf.Release) is forgotten, with an error matching
// ErrFreed. Commands that transfer to or from the buffer's host bytes
// must have completed.
func (p *Pinned) Free(buf *cl.Buffer) error {
	if buf == nil {
		return nil
	}
	p.mu.Lock()
	host, ok := p.host[buf]
	delete(p.host, buf)
	p.mu.Unlock()
	if !ok {
		return fmt.Errorf("allocator: Pinned.Free: a buffer this allocator did not allocate, or already freed: %w", ErrFreed)
	}
	disown(buf)
	released := func() error {
		return fmt.Errorf("allocator: Pinned.Free: the %d-byte buffer was released already: %w", buf.Size(), ErrFreed)
	}
	if buf.Released() { // released behind p's back: nothing left to unmap
		return released()
	}
	err := p.q.UnmapBuffer(buf, host)
	if err != nil {
		if buf.Released() { // released behind p's back while it unmapped
			return released()
		}
		err = fmt.Errorf("allocator: Pinned.Free: %w", err)
	}
	// Released even if the unmap failed: it is of no use to anyone now.
	if rerr := buf.Release(); rerr != nil {
		err = errors.Join(err, fmt.Errorf("allocator: Pinned.Free: %w", rerr))
	}
	return err
}

// Live returns the number of buffers allocated and not yet freed.
func (p *Pinned) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.host)
}
