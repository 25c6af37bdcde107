package memhooks

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/clpool/clpool/mempool"
)

// DebugPrint writes each event as one JSON line, like CuPy's DebugPrintHook,
// with its time, t, in integer nanoseconds since the DebugPrint was made
// (from the monotonic clock, as a timed trace's t):
//
//	{"event":"malloc_after","t":52310,"device":"pthread-...","size":4000,"alloc_size":4095,"buffer":"0x55d0c1a2b3c0","block":824634...}
//
// The time is taken as the line is written, so the times of the lines
// never go down.
type DebugPrint struct {
	start time.Time // it holds a monotonic reading

	// mu protects the fields below. Each line's time is taken under it,
	// so that the times of the lines never go down.
	mu  sync.Mutex
	enc *json.Encoder
	err error // the first write error
}

// NewDebugPrint returns a hook writing to w.
func NewDebugPrint(w io.Writer) *DebugPrint {
	return &DebugPrint{enc: json.NewEncoder(w), start: time.Now()}
}

type debugLine struct {
	Event     string `json:"event"`
	T         int64  `json:"t"` // nanoseconds since the DebugPrint was made
	Device    string `json:"device,omitempty"`
	Size      int64  `json:"size"`
	AllocSize int64  `json:"alloc_size"`
	Buffer    string `json:"buffer,omitempty"`
	SVM       string `json:"svm,omitempty"` // an SVM pool's allocation, by address
	Block     uint64 `json:"block,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Handle writes e.
func (d *DebugPrint) Handle(e mempool.Event) {
	line := debugLine{Event: e.Kind.String(), Size: e.Size, AllocSize: e.AllocSize, Block: e.BlockID}
	if e.Device != nil {
		line.Device = e.Device.Name
	}
	if e.Buffer != nil {
		line.Buffer = fmt.Sprintf("%#x", e.Buffer.Handle())
	}
	if e.SVM != nil {
		line.SVM = fmt.Sprintf("%#x", e.SVM.Pointer())
	}
	if e.Err != nil {
		line.Error = e.Err.Error()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	line.T = time.Since(d.start).Nanoseconds()
	if err := d.enc.Encode(line); err != nil && d.err == nil {
		d.err = err
	}
}

// Err returns the first write error, if any.
func (d *DebugPrint) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}
