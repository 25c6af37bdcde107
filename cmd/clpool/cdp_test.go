package main

// A small client of the Chrome DevTools Protocol over a pipe
// (--remote-debugging-pipe: messages are JSON, each ended by a NUL byte,
// read by the browser from file descriptor 3 and written to 4), for the
// tests that open viz's page in headless Chromium and act on it as a user
// would: real mouse events, then the DOM and the canvas read back.

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// browser is a headless Chromium driven over its DevTools pipe, with one
// page open.
type browser struct {
	t       *testing.T
	cmd     *exec.Cmd
	out     *os.File // to the browser
	session string   // the page's
	width   int      // the viewport's, in CSS pixels
	height  int
	cancel  context.CancelFunc

	mu       sync.Mutex
	nextID   int
	waiting  map[int]chan cdpMessage
	loaded   chan struct{} // Page.loadEventFired
	problems []string      // exceptions thrown and errors logged by the page
	done     chan struct{} // closed when the browser's output ends
}

type cdpMessage struct {
	ID        int             `json:"id,omitempty"`
	Method    string          `json:"method,omitempty"`
	Params    json.RawMessage `json:"params,omitempty"`
	SessionID string          `json:"sessionId,omitempty"`
	Result    json.RawMessage `json:"result,omitempty"`
	Error     *struct {
		Message string `json:"message"`
	} `json:"error,omitempty"`
}

// openBrowser starts Chromium with a page width by height CSS pixels,
// and closes it when the test ends.
func openBrowser(t *testing.T, chrome string, width, height int) *browser {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	toR, toW, err := os.Pipe()
	require.NoError(t, err)
	fromR, fromW, err := os.Pipe()
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, chrome, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--disable-extensions", "--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--hide-scrollbars", "--mute-audio", "--remote-debugging-pipe", "--user-data-dir="+t.TempDir(),
		fmt.Sprintf("--window-size=%d,%d", width, height), "about:blank")
	cmd.ExtraFiles = []*os.File{toR, fromW} // descriptors 3 and 4
	var stderr strings.Builder
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	toR.Close()
	fromW.Close()
	b := &browser{t: t, cmd: cmd, out: toW, cancel: cancel, width: width, height: height, waiting: map[int]chan cdpMessage{},
		loaded: make(chan struct{}, 16), done: make(chan struct{})}
	go b.read(fromR)
	t.Cleanup(func() {
		b.out.Close()
		select {
		case <-b.done:
		case <-time.After(10 * time.Second):
		}
		cancel()
		_ = cmd.Wait()
		fromR.Close()
	})

	var target struct{ TargetID string }
	b.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var attached struct{ SessionID string }
	b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached)
	b.session = attached.SessionID
	b.do("Page.enable", nil)
	b.do("Runtime.enable", nil)
	b.do("Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false})
	return b
}

// read reads the browser's messages until its pipe closes.
func (b *browser) read(r *os.File) {
	defer close(b.done)
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		raw, err := br.ReadBytes(0)
		if err != nil {
			b.mu.Lock()
			for id, ch := range b.waiting {
				close(ch)
				delete(b.waiting, id)
			}
			b.mu.Unlock()
			return
		}
		var m cdpMessage
		if json.Unmarshal(raw[:len(raw)-1], &m) != nil {
			continue
		}
		b.mu.Lock()
		switch {
		case m.ID != 0:
			if ch, ok := b.waiting[m.ID]; ok {
				ch <- m
				delete(b.waiting, m.ID)
			}
		case m.Method == "Page.loadEventFired":
			select {
			case b.loaded <- struct{}{}:
			default:
			}
		case m.Method == "Runtime.exceptionThrown":
			var p struct {
				ExceptionDetails struct {
					Text      string `json:"text"`
					Exception struct {
						Description string `json:"description"`
					} `json:"exception"`
				} `json:"exceptionDetails"`
			}
			_ = json.Unmarshal(m.Params, &p)
			b.problems = append(b.problems, "exception: "+p.ExceptionDetails.Text+" "+p.ExceptionDetails.Exception.Description)
		case m.Method == "Runtime.consoleAPICalled":
			var p struct {
				Type string            `json:"type"`
				Args []json.RawMessage `json:"args"`
			}
			_ = json.Unmarshal(m.Params, &p)
			if p.Type == "error" || p.Type == "assert" {
				b.problems = append(b.problems, fmt.Sprintf("console.%s: %s", p.Type, p.Args))
			}
		}
		b.mu.Unlock()
	}
}

// call sends a command to the session (the browser's if "") and decodes
// its result into result, if not nil.
func (b *browser) call(session, method string, params any, result any) {
	b.t.Helper()
	b.mu.Lock()
	b.nextID++
	id := b.nextID
	ch := make(chan cdpMessage, 1)
	b.waiting[id] = ch
	b.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	raw, err := json.Marshal(msg)
	require.NoError(b.t, err)
	_, err = b.out.Write(append(raw, 0))
	require.NoError(b.t, err, "sending %s", method)
	select {
	case m, ok := <-ch:
		require.True(b.t, ok, "the browser ended before answering %s", method)
		if m.Error != nil {
			b.t.Fatalf("%s: %s", method, m.Error.Message)
		}
		if result != nil {
			require.NoError(b.t, json.Unmarshal(m.Result, result), "%s's result", method)
		}
	case <-time.After(90 * time.Second):
		b.t.Fatalf("%s: no answer in 90 s", method)
	}
}

// do sends a command to the page.
func (b *browser) do(method string, params any) { b.t.Helper(); b.call(b.session, method, params, nil) }

// open loads the file at path, and waits for its load event and two
// animation frames.
func (b *browser) open(path string) { b.t.Helper(); b.openFragment(path, "") }

// openFragment is open with a fragment for the URL, as "#at=3".
func (b *browser) openFragment(path, fragment string) {
	b.t.Helper()
	abs, err := filepath.Abs(path)
	require.NoError(b.t, err)
	for len(b.loaded) > 0 {
		<-b.loaded
	}
	b.do("Page.navigate", map[string]any{"url": "file://" + abs + fragment})
	select {
	case <-b.loaded:
	case <-time.After(2 * time.Minute):
		b.t.Fatalf("%s did not load in 2 minutes", path)
	}
	// The viewport as tall as the page, so that every element can be
	// pointed at where it is.
	var height int
	b.eval(`document.documentElement.scrollHeight`, &height)
	if height > b.height {
		b.do("Emulation.setDeviceMetricsOverride", map[string]any{"width": b.width, "height": height, "deviceScaleFactor": 1, "mobile": false})
		b.height = height
	}
	b.settle()
}

// settle waits for two animation frames, after which what the page
// scheduled is drawn.
func (b *browser) settle() {
	b.t.Helper()
	b.eval(`new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(true))))`, nil)
}

// eval evaluates a JavaScript expression in the page, awaiting it if it is
// a promise, and decodes its value, JSON-able, into v if not nil.
func (b *browser) eval(expr string, v any) {
	b.t.Helper()
	var res struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	b.call(b.session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true, "awaitPromise": true}, &res)
	if e := res.ExceptionDetails; e != nil {
		b.t.Fatalf("evaluating %s: %s %s", expr, e.Text, e.Exception.Description)
	}
	if v != nil {
		require.NoError(b.t, json.Unmarshal(res.Result.Value, v), "the value of %s: %s", expr, res.Result.Value)
	}
}

// evalString evaluates expr and returns its value, a string.
func (b *browser) evalString(expr string) string {
	b.t.Helper()
	var s string
	b.eval(expr, &s)
	return s
}

// mouse sends a mouse event at (x, y), in CSS pixels of the viewport: kind
// is mouseMoved, mousePressed or mouseReleased, with the left button;
// shift holds the shift key down; clicks is the click count (2 for the
// events of a double click).
func (b *browser) mouse(kind string, x, y float64, shift bool, clicks int) {
	b.t.Helper()
	p := map[string]any{"type": kind, "x": x, "y": y, "button": "left", "clickCount": clicks}
	if kind == "mouseMoved" {
		p["button"] = "none"
	}
	if kind == "mousePressed" || (kind == "mouseMoved" && clicks > 0) {
		p["buttons"] = 1
	}
	if shift {
		p["modifiers"] = 8
	}
	b.do("Input.dispatchMouseEvent", p)
}

// drag drags with the left button from (x0, y) to (x1, y), in a few moves.
func (b *browser) drag(x0, x1, y float64, shift bool) {
	b.t.Helper()
	b.mouse("mouseMoved", x0, y, shift, 0)
	b.mouse("mousePressed", x0, y, shift, 1)
	for i := 1; i <= 4; i++ {
		b.mouse("mouseMoved", x0+(x1-x0)*float64(i)/4, y, shift, 1)
	}
	b.mouse("mouseReleased", x1, y, shift, 1)
	b.settle()
}

// click clicks at (x, y); double with a double click.
func (b *browser) click(x, y float64, double bool) {
	b.t.Helper()
	b.mouse("mouseMoved", x, y, false, 0)
	b.mouse("mousePressed", x, y, false, 1)
	b.mouse("mouseReleased", x, y, false, 1)
	if double {
		b.mouse("mousePressed", x, y, false, 2)
		b.mouse("mouseReleased", x, y, false, 2)
	}
	b.settle()
}

// screenshot writes a PNG of the whole page to path and returns its bytes.
func (b *browser) screenshot(path string) []byte {
	b.t.Helper()
	var res struct{ Data string }
	b.call(b.session, "Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true}, &res)
	png, err := base64.StdEncoding.DecodeString(res.Data)
	require.NoError(b.t, err)
	if path != "" {
		require.NoError(b.t, os.WriteFile(path, png, 0o644))
	}
	return png
}

// problems returns the exceptions and console errors of the page so far,
// and the error its script noted, if any.
func (b *browser) pageProblems() []string {
	b.t.Helper()
	b.mu.Lock()
	out := append([]string(nil), b.problems...)
	b.mu.Unlock()
	if e := b.evalString(`document.body.dataset.error || ""`); e != "" {
		out = append(out, "data-error: "+e)
	}
	return out
}
