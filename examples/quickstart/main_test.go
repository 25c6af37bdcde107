package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/clpool/clpool/internal/cltest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The program runs: the kernel's results are right, both queues were
// served from the pool after their first request, and the summary ends
// it.
func TestQuickstartRuns(t *testing.T) {
	q := cltest.Queue(t) // the device the program will pick, or a skip
	n := cltest.Size(q, 1024, 1<<16)
	var out bytes.Buffer
	require.NoError(t, run(&out, n, 4))
	t.Log(out.String())
	text := out.String()
	assert.Contains(t, text, fmt.Sprintf("y[%d] = %d (want %d)\n", n-1, 8*(n-1), 8*(n-1)))
	assert.Contains(t, text, "queue copy: 4 requests, 3 served by held blocks\n")
	assert.Contains(t, text, "queue compute: 4 requests, 3 served by held blocks\n")
	assert.Contains(t, text, "|                           clpool memory summary                           |")
	assert.True(t, strings.HasSuffix(text, "|===========================================================================|\n"), "the summary comes last")
}

// README.md quotes the program whole, so that what a new user copies is
// what this test runs.
func TestReadmeQuotesTheProgram(t *testing.T) {
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	assert.True(t, strings.Contains(string(readme), "```go\n"+string(src)+"```\n"),
		"README.md quotes examples/quickstart/main.go as it is, in a go block of its own")
}
