package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/clpool/clpool/trace"
)

// readTrace reads the trace file at path, more strictly than trace.Read:
// every event line has all three fields, a free's size is 0 or the size
// its block was allocated with, lines may be of any length, and the trace
// must have at least one event. Errors name the file and the line.
func readTrace(path string) ([]trace.Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	events, err := parseTrace(f, path)
	if err != nil {
		return nil, err
	}
	if len(events) == 0 {
		return nil, fmt.Errorf("%s: the trace has no events", path)
	}
	return events, nil
}

// parseTrace parses a trace read from r; name is its file's name in errors.
// It reads with a bufio.Reader, which, unlike a bufio.Scanner, has no limit
// on a line's length.
func parseTrace(r io.Reader, name string) ([]trace.Event, error) {
	var events []trace.Event
	liveSize := map[int64]int64{} // live block id -> its size
	br := bufio.NewReader(r)
	for line := 1; ; line++ {
		text, readErr := br.ReadString('\n')
		if readErr != nil && !errors.Is(readErr, io.EOF) {
			return nil, fmt.Errorf("%s:%d: %w", name, line, readErr)
		}
		ev, ok, err := parseLine(strings.TrimSpace(text), line, liveSize)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		if ok {
			events = append(events, ev)
		}
		if readErr != nil { // io.EOF, after the last line
			return events, nil
		}
	}
}

// parseLine parses one line of a trace, already trimmed. ok is false for a
// line that holds no event: a blank line, a # comment or the header on
// line 1. liveSize holds the sizes of the live blocks; parseLine updates it.
func parseLine(text string, line int, liveSize map[int64]int64) (ev trace.Event, ok bool, err error) {
	fields := strings.Fields(text)
	switch {
	case text == "" || strings.HasPrefix(text, "#"):
		return ev, false, nil
	case line == 1 && strings.Join(fields, " ") == "op id size":
		return ev, false, nil
	case len(fields) != 3:
		return ev, false, fmt.Errorf("want three fields, `op id size`, got %d: %s", len(fields), shorten(text))
	case fields[0] != "a" && fields[0] != "f":
		return ev, false, fmt.Errorf("unknown op %s, want a or f", shorten(fields[0]))
	}
	id, err := strconv.ParseInt(fields[1], 10, 64)
	if err != nil {
		return ev, false, fmt.Errorf("block id %s is not an integer", shorten(fields[1]))
	}
	size, err := strconv.ParseInt(fields[2], 10, 64)
	if err != nil || size < 0 {
		return ev, false, fmt.Errorf("size %s is not a non-negative integer", shorten(fields[2]))
	}
	allocated, live := liveSize[id]
	if fields[0] == "a" {
		if live {
			return ev, false, fmt.Errorf("block %d allocated while live", id)
		}
		liveSize[id] = size
		return trace.Event{Op: trace.Alloc, ID: id, Size: size}, true, nil
	}
	if !live {
		return ev, false, fmt.Errorf("free of block %d, which is not live", id)
	}
	if size != 0 && size != allocated {
		return ev, false, fmt.Errorf("free of block %d with size %d, but it was allocated with %d (a free's size is 0 or the allocated size)", id, size, allocated)
	}
	delete(liveSize, id)
	return trace.Event{Op: trace.Free, ID: id}, true, nil
}

// shorten quotes s for an error message, cutting it short if it is long:
// a line of a broken trace can be megabytes.
func shorten(s string) string {
	const limit = 40
	if len(s) <= limit {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:limit], len(s))
}
