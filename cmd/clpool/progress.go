package main

import (
	"fmt"
	"io"
	"os"
	"strings"
)

// progress reports how far a command has got: replay's runs as a bar
// redrawn in place on a terminal and plain lines otherwise (a log, a pipe,
// CI); viz's reading and replaying as a bar on a terminal only.
type progress struct {
	w        io.Writer
	terminal bool
	drawn    bool
	phase    string // count's last phase and percentage
	pct      int
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

// count reports that done of total units of a phase are done (bytes read,
// events replayed): on a terminal, a bar redrawn when the percentage
// changes; nothing otherwise.
func (p *progress) count(phase string, done, total int64) {
	if !p.terminal || total <= 0 {
		return
	}
	pct := int(100 * done / total)
	if p.drawn && phase == p.phase && pct == p.pct {
		return
	}
	p.phase, p.pct = phase, pct
	const width = 30
	filled := width * pct / 100
	fmt.Fprintf(p.w, "\r%-22s [%s%s] %3d%%", phase, strings.Repeat("#", filled), strings.Repeat(" ", width-filled), pct)
	p.drawn = true
}
