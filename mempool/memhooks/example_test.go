package memhooks_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/clpool/clpool/allocator"
	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/mempool"
	"github.com/clpool/clpool/mempool/memhooks"
	"github.com/clpool/clpool/trace"
)

// examplePool is a pool on the default device, for the examples.
func examplePool() (*mempool.Pool, func()) {
	q, err := cl.DefaultQueue()
	if err != nil {
		panic(err)
	}
	imm, _ := allocator.NewImmediate(q, cl.MemReadWrite)
	p, _ := mempool.New(imm)
	return p, func() { p.Close(); q.Release() }
}

func ExampleNewDebugPrint() {
	p, done := examplePool()
	defer done()
	var log bytes.Buffer
	p.AddHook(memhooks.NewDebugPrint(&log))
	b, _ := p.Allocate(4000)
	b.Close()

	// Each line is JSON: {"event":"malloc_before","t":1250,"device":"...","size":4000,"alloc_size":4095}
	sc := bufio.NewScanner(&log)
	for sc.Scan() {
		var line struct {
			Event     string
			Size      int64
			AllocSize int64 `json:"alloc_size"`
		}
		json.Unmarshal(sc.Bytes(), &line)
		fmt.Println(line.Event, line.Size, line.AllocSize)
	}
	// Output:
	// malloc_before 4000 4095
	// alloc_before 4095 4095
	// alloc_after 4095 4095
	// malloc_after 4000 4095
	// free_before 4000 4095
	// free_after 4000 4095
}

func ExampleLineProfile() {
	p, done := examplePool()
	defer done()
	lp := memhooks.NewLineProfile()
	p.AddHook(lp)

	a, _ := p.Allocate(1 << 20)
	b, _ := p.Allocate(1000)
	b.Close()
	c, _ := p.Allocate(1000) // reuses b's block: used, not acquired again
	defer a.Close()
	defer c.Close()

	lp.Print(os.Stdout, 0, memhooks.InUse)
	// Each line of the example that allocated is a node: (bytes in use,
	// bytes taken from the device).

	// Output:
	// _root (1.06MB, 1.06MB)
	//   example_test.go:63:memhooks_test.ExampleLineProfile (1.06MB, 1.06MB)
	//   example_test.go:64:memhooks_test.ExampleLineProfile (0.00B, 1023.00B)
	//   example_test.go:66:memhooks_test.ExampleLineProfile (1023.00B, 0.00B)
}

func ExampleTraceRecorder() {
	p, done := examplePool()
	defer done()
	var out bytes.Buffer
	rec := memhooks.NewTraceRecorder(&out, memhooks.WithSites())
	p.AddHook(rec)

	a, _ := p.Allocate(4000)
	b, _ := p.Allocate(100)
	a.Close()
	b.Close()
	p.FreeHeld() // the pool gives its segments back
	rec.Close()  // writes what is buffered, and stops recording

	// The trace is timed: its column t is the nanoseconds since the
	// recorder was made, which differ from run to run. Ops A and F are
	// the pool's segments, a and f the blocks.
	header, _, _ := strings.Cut(out.String(), "\n")
	fmt.Printf("%q\n", header)
	events, _ := trace.Read(&out)
	for _, ev := range events {
		fmt.Printf("%c %d %d queue %d %s\n", ev.Op, ev.ID, ev.Size, ev.Queue, ev.Site)
	}
	// Output:
	// "op\tid\tsize\tt\tqueue\tsite"
	// A 1 4095 queue 1 example_test.go:88:memhooks_test.ExampleTraceRecorder
	// a 1 4000 queue 1 example_test.go:88:memhooks_test.ExampleTraceRecorder
	// A 2 103 queue 1 example_test.go:89:memhooks_test.ExampleTraceRecorder
	// a 2 100 queue 1 example_test.go:89:memhooks_test.ExampleTraceRecorder
	// f 1 0 queue 1 example_test.go:90:memhooks_test.ExampleTraceRecorder
	// f 2 0 queue 1 example_test.go:91:memhooks_test.ExampleTraceRecorder
	// F 1 0 queue 0 example_test.go:92:memhooks_test.ExampleTraceRecorder
	// F 2 0 queue 0 example_test.go:92:memhooks_test.ExampleTraceRecorder
}

func ExampleNewHistory() {
	p, done := examplePool()
	defer done()
	h := memhooks.NewHistory(4) // the last 4 events
	p.AddHook(h)

	a, _ := p.Allocate(4000)
	b, _ := p.Allocate(100)
	a.Close()
	c, _ := p.Allocate(200)
	defer b.Close()
	defer c.Close()

	// Allocating block 1 has left the ring. Ops A and F are the pool's
	// segments, numbered apart from the blocks, a and f the blocks; all
	// on the pool's queue, the History's queue 1.
	for _, ev := range h.Events() {
		fmt.Printf("%c %d %d queue %d\n", ev.Op, ev.ID, ev.Size, ev.Queue)
	}
	// WriteTrace leaves out the free of block 1, so that its trace
	// replays, and writes first the allocations of segments 1 and 2,
	// live but out of the ring, so that it has the pool's managed bytes.
	var out bytes.Buffer
	h.WriteTrace(&out)
	events, err := trace.Read(&out)
	fmt.Println(len(events), "events in the trace", err)
	for _, ev := range events[:2] {
		fmt.Printf("%c %d %d\n", ev.Op, ev.ID, ev.Size)
	}
	// Output:
	// a 2 100 queue 1
	// f 1 0 queue 1
	// A 3 207 queue 1
	// a 3 200 queue 1
	// 5 events in the trace <nil>
	// A 1 4095
	// A 2 103
}
