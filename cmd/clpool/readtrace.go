package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/clpool/clpool/trace"
)

// readTrace reads the trace file at path, for replay and plan, with
// trace.ReadComplete, which checks every line and refuses a trace cut
// mid-line, and also refuses a trace with no events, or with none of
// blocks (only a pool's segments, A and F: nothing to replay). Errors
// name the file, and the line, as file:line, if there is one.
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
	if !slices.ContainsFunc(events, func(ev trace.Event) bool { return !ev.Op.Segment() }) {
		return nil, fmt.Errorf("%s: the trace has no block events (a, f), only the %d of its pool's segments (A, F): nothing to replay", path, len(events))
	}
	return events, nil
}

// parseTrace parses a trace read from r with trace.ReadComplete; name is
// its file's name in errors, which give the line and, for a trace cut
// short, times that go backwards and columns that disagree with the
// header, a hint of what happened.
func parseTrace(r io.Reader, name string) ([]trace.Event, error) {
	events, err := trace.ReadComplete(r)
	var le *trace.LineError
	switch {
	case errors.As(err, &le):
		return nil, fmt.Errorf("%s:%d: %w%s", name, le.Line, le.Err, hint(le.Err))
	case err != nil:
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return events, nil
}

// where returns "path:line: " for an error of trace.Replay over events
// read from path (a *trace.EventError), naming the line of the event it is
// about, which it finds by reading the file again, or "path: " if the line
// cannot be told (a trace that is not a regular file: a pipe's is gone).
// events may leave out the segments' events (trace.Blocks): the event is
// the k-th block event of the file, k its rank among those of events.
func where(path string, events []trace.Event, err error) string {
	if line := eventLine(path, events, err); line > 0 {
		return fmt.Sprintf("%s:%d: ", path, line)
	}
	return path + ": "
}

// eventLine is where's line, 0 if it cannot be told.
func eventLine(path string, events []trace.Event, err error) int {
	var ee *trace.EventError
	if !errors.As(err, &ee) || ee.Index < 0 || ee.Index >= len(events) {
		return 0
	}
	k := 0
	for _, ev := range events[:ee.Index+1] {
		if !ev.Op.Segment() {
			k++
		}
	}
	if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
		return 0 // a pipe's trace cannot be read again (an open would wait for a writer)
	}
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	br := bufio.NewReader(f)
	for line := 1; ; line++ {
		text, rerr := br.ReadString('\n')
		if w := strings.Fields(text); len(w) > 0 && (w[0] == "a" || w[0] == "f") {
			if k--; k == 0 {
				return line
			}
		}
		if rerr != nil {
			return 0
		}
	}
}

// hint says what may have made a trace the error refused, or "".
func hint(err error) string {
	switch {
	case errors.Is(err, trace.ErrCut):
		return " (the program recording it stopped mid-line, before the recorder's Flush or Close: " +
			"record again, ending the program with signal.NotifyContext and the recorder's Close " +
			"(see memhooks.TraceRecorder), or delete the cut line to use the rest)"
	case errors.Is(err, trace.ErrTimeBackwards):
		return " (a recorder's times only grow: were two traces joined, or the lines sorted or edited?)"
	case errors.Is(err, trace.ErrColumns):
		return " (each line has the columns of the header, or of the first line if none)"
	}
	return ""
}
