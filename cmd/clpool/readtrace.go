package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/clpool/clpool/trace"
)

// readTrace reads the trace file at path with trace.Read, which checks
// every line, and also refuses a trace with no events. Errors name the
// file and the line, as file:line.
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
func parseTrace(r io.Reader, name string) ([]trace.Event, error) {
	events, err := trace.Read(r)
	var le *trace.LineError
	switch {
	case errors.As(err, &le):
		return nil, fmt.Errorf("%s:%d: %w", name, le.Line, le.Err)
	case err != nil:
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return events, nil
}
