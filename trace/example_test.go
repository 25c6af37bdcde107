package trace_test

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/clpool/clpool/trace"
)

func ExampleNewTimedWriter() {
	w := trace.NewTimedWriter(os.Stdout)
	w.Write(trace.Event{Op: trace.Alloc, ID: 1, Size: 4096, Time: 1500 * time.Nanosecond})
	w.Write(trace.Event{Op: trace.Free, ID: 1, Time: 2 * time.Millisecond})
	w.Flush()
	// Output:
	// op	id	size	t
	// a	1	4096	1500
	// f	1	0	2000000
}

func ExampleTimed() {
	for _, text := range []string{
		"op\tid\tsize\na\t1\t4096\nf\t1\t0\n",
		"op\tid\tsize\tt\na\t1\t4096\t1500\nf\t1\t0\t2000000\n",
	} {
		events, err := trace.Read(strings.NewReader(text))
		if err != nil {
			panic(err)
		}
		fmt.Println(trace.Timed(events), events[len(events)-1].Time)
	}
	// Output:
	// false 0s
	// true 2ms
}

func ExamplePlan() {
	// Blocks 1 and 2 live at once, then 3 takes the place of 1.
	text := "op\tid\tsize\na\t1\t1000\na\t2\t4096\nf\t1\t0\na\t3\t500\nf\t2\t0\nf\t3\t0\n"
	events, err := trace.Read(strings.NewReader(text))
	if err != nil {
		panic(err)
	}
	l := trace.Plan(events, 256)
	for _, b := range l.Blocks {
		fmt.Printf("block %d: %d bytes at %d, events %d to %d\n", b.ID, b.Size, b.Offset, b.Alloc, b.Free)
	}
	fmt.Printf("peak live %d, plan %d (%.3fx)\n", l.PeakLive, l.Size, l.Ratio())
	// Output:
	// block 1: 1024 bytes at 4096, events 0 to 2
	// block 2: 4096 bytes at 0, events 1 to 4
	// block 3: 512 bytes at 4096, events 3 to 5
	// peak live 5096, plan 5120 (1.005x)
}

func ExampleBestFit() {
	// Block 1's place, freed, is too small for 3, which best fit puts on
	// top; the plan, knowing 3 comes, puts 1 where 3 goes later.
	text := "op\tid\tsize\na\t1\t256\na\t2\t512\nf\t1\t0\na\t3\t512\nf\t2\t0\nf\t3\t0\n"
	events, err := trace.Read(strings.NewReader(text))
	if err != nil {
		panic(err)
	}
	fmt.Println("best fit", trace.BestFit(events, 256), "plan", trace.Plan(events, 256).Size)
	// Output:
	// best fit 1280 plan 1024
}
