package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/term"
)

// progress reports how far a command has got. On a terminal (as
// golang.org/x/term tells: /dev/null, a pipe or a file is none) it is a
// bar redrawn in place; otherwise (a log, CI) replay's runs are plain
// lines, at most one every plainEvery, and viz's reading and replaying
// nothing.
type progress struct {
	w        io.Writer
	terminal bool
	drawn    bool
	phase    string // count's last phase and percentage
	pct      int

	now     func() time.Time // time.Now; tests set their own
	printed time.Time        // the last plain line's time; zero before the first
}

// plainEvery is the least time between two plain progress lines.
const plainEvery = 3 * time.Second

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, now: time.Now}
	if f, ok := w.(*os.File); ok {
		p.terminal = term.IsTerminal(int(f.Fd()))
	}
	return p
}

// step reports run i of n of a replay configuration, of ns per event.
func (p *progress) step(config string, i, n int, ns float64) {
	if !p.terminal {
		now := p.now()
		if !p.printed.IsZero() && now.Sub(p.printed) < plainEvery {
			return
		}
		p.printed = now
		fmt.Fprintf(p.w, "%s: run %d/%d: %.1f ns/event\n", config, i, n, ns)
		return
	}
	const width = 30
	filled := width * i / n
	fmt.Fprintf(p.w, "\r%-22s [%s%s] %d/%d %10.1f ns/event", config, strings.Repeat("#", filled), strings.Repeat(" ", width-filled), i, n, ns)
	p.drawn = true
}

// done ends the bar's line, if one was drawn.
func (p *progress) done() {
	if p.terminal && p.drawn {
		fmt.Fprintln(p.w)
	}
}

// count reports that done of total units of a phase are done (bytes read,
// events replayed): on a terminal, a bar redrawn when the percentage
// changes; nothing otherwise. done may pass total (a file that grows as
// it is read): the bar stays full.
func (p *progress) count(phase string, done, total int64) {
	if !p.terminal || total <= 0 {
		return
	}
	pct := int(100 * min(max(done, 0), total) / total)
	if p.drawn && phase == p.phase && pct == p.pct {
		return
	}
	p.phase, p.pct = phase, pct
	const width = 30
	filled := width * pct / 100
	fmt.Fprintf(p.w, "\r%-22s [%s%s] %3d%%", phase, strings.Repeat("#", filled), strings.Repeat(" ", width-filled), pct)
	p.drawn = true
}
