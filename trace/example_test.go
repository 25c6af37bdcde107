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
