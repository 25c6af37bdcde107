package main

import (
	"bytes"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal and returns its two ends: what a
// program writes to the second shows on a terminal, which reads it from
// the first.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal here: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	fd := int(master.Fd())
	require.NoError(t, unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0)) // unlock
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	require.NoError(t, err)
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { tty.Close() })
	return master, tty
}

// Issue 24: /dev/null is a character device but no terminal; progress
// took it for one (`make replay >/dev/null` drew bars into it). A
// pseudo-terminal is one: the bar is redrawn in place there.
func TestProgressTellsATerminal(t *testing.T) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	require.NoError(t, err)
	defer null.Close()
	assert.False(t, newProgress(null).terminal, "/dev/null")

	file, err := os.Create(t.TempDir() + "/log")
	require.NoError(t, err)
	defer file.Close()
	assert.False(t, newProgress(file).terminal, "a file")
	assert.False(t, newProgress(&bytes.Buffer{}).terminal, "a buffer")

	master, tty := openPTY(t)
	p := newProgress(tty)
	require.True(t, p.terminal, "a pseudo-terminal")
	p.step("pool-arena", 1, 4, 12.5)
	p.step("pool-arena", 2, 4, 11.5)
	p.done()
	buf := make([]byte, 4096)
	require.NoError(t, master.SetReadDeadline(time.Now().Add(5*time.Second)))
	var got []byte
	for !bytes.Contains(got, []byte("\n")) {
		n, err := master.Read(buf)
		require.NoError(t, err)
		got = append(got, buf[:n]...)
	}
	assert.Equal(t, 2, bytes.Count(got, []byte("\rpool-arena")), "each step redraws the line in place: %q", got)
	assert.Contains(t, string(got), "2/4")
}

// Issue 24: off a terminal, replay printed a line per run (340 for `make
// replay`); now at most one every few seconds.
func TestPlainProgressIsAtMostALineEveryFewSeconds(t *testing.T) {
	var out bytes.Buffer
	p := newProgress(&out)
	now := time.Unix(0, 0)
	p.now = func() time.Time { return now }
	for i := range 340 { // 340 runs 100 ms apart: 34 s
		p.step("pool-immediate", i+1, 340, 10)
		now = now.Add(100 * time.Millisecond)
	}
	p.done()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	assert.Len(t, lines, 12, "the first, then one every 3 s of 34 s")
	assert.Equal(t, "pool-immediate: run 1/340: 10.0 ns/event", lines[0])
	assert.Equal(t, "pool-immediate: run 31/340: 10.0 ns/event", lines[1])
	p.count("reading", 1, 2)
	assert.Len(t, strings.Split(strings.TrimSpace(out.String()), "\n"), 12, "no bar off a terminal")
}

// On a terminal, viz draws a bar of the bytes read against the file's
// size at Stat. A trace still being recorded (the recorder now writes by
// itself every 250 ms) grows while viz reads it: the percentage passes
// 100 and strings.Repeat panics with a negative count.
func TestProgressOfAFileThatGrewDoesNotPanic(t *testing.T) {
	var out bytes.Buffer
	p := newProgress(&out)
	p.terminal = true                            // as newProgress sets it on a terminal
	grown := strings.Repeat("a\t1\t4096\n", 300) // 2,700 bytes
	r := &progressReader{r: strings.NewReader(grown), prog: p, phase: "reading", total: 1500}
	assert.NotPanics(t, func() { _, _ = io.Copy(io.Discard, r) })
}
