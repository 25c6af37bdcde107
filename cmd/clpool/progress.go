package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// progress reports the runs: a bar redrawn in place on a terminal, plain
// lines otherwise (a log, a pipe, CI).
type progress struct {
	w        io.Writer
	terminal bool
	drawn    bool
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.terminal = true
		}
	}
	return p
}

func (p *progress) step(config string, i, n int, ns float64) {
	if !p.terminal {
		fmt.Fprintf(p.w, "%s: run %d/%d: %.1f ns/event\n", config, i, n, ns)
		return
	}
	const width = 30
	filled := width * i / n
	fmt.Fprintf(p.w, "\r%-22s [%s%s] %d/%d %10.1f ns/event", config, strings.Repeat("#", filled), strings.Repeat(" ", width-filled), i, n, ns)
	p.drawn = true
}

func (p *progress) done() {
	if p.terminal && p.drawn {
		fmt.Fprintln(p.w)
	}
}
