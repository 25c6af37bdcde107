package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

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
