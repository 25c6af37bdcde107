package main

// The README's claims that code can check: which runnable examples there
// are, and which benchmarks its advice rests on.

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// repoRoot is the repository's root, from this package's directory.
var repoRoot = filepath.Join("..", "..")

func readRepoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, name))
	require.NoError(t, err)
	return string(b)
}

// TestReadmeListsEveryExample keeps the README's table of runnable examples
// in step with the Example functions in the repository's test files.
func TestReadmeListsEveryExample(t *testing.T) {
	exampleFunc := regexp.MustCompile(`(?m)^func (Example\w*)\(`)
	examples := map[string][]string{} // package directory -> its examples
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != repoRoot && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "build") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir, err := filepath.Rel(repoRoot, filepath.Dir(path))
		if err != nil {
			return err
		}
		for _, m := range exampleFunc.FindAllStringSubmatch(string(src), -1) {
			examples[filepath.ToSlash(dir)] = append(examples[filepath.ToSlash(dir)], m[1])
		}
		return nil
	})
	require.NoError(t, err)
	require.Contains(t, examples, "mempool", "the walk found the examples")

	usage := section(readRepoFile(t, "README.md"), "## Using clpool from your own module")
	require.NotEmpty(t, usage, "README.md has the section")
	for dir, names := range examples {
		row := tableRow(usage, "| `"+dir+"` |")
		if !assert.NotEmpty(t, row, "README.md's table of examples has no row for package %s", dir) {
			continue
		}
		for _, name := range names {
			assert.Contains(t, row, "`"+name+"`", "README.md's row for %s", dir)
		}
	}
}

// section returns the part of a Markdown text from the line heading to the
// next heading of level 2, or "".
func section(text, heading string) string {
	_, after, found := strings.Cut(text, "\n"+heading+"\n")
	if !found {
		return ""
	}
	body, _, _ := strings.Cut(after, "\n## ")
	return body
}

// tableRow returns the line of text that starts with prefix, or "".
func tableRow(text, prefix string) string {
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}

// TestReadmeGoroutineAdviceNamesItsMeasurement checks that the README's
// advice for many goroutines says what it was measured with, and that the
// benchmarks it names exist.
func TestReadmeGoroutineAdviceNamesItsMeasurement(t *testing.T) {
	var advice string
	for para := range strings.SplitSeq(readRepoFile(t, "README.md"), "\n\n") {
		if strings.Contains(para, "many goroutines") {
			advice = para
			break
		}
	}
	require.NotEmpty(t, advice, "README.md advises on many goroutines")
	for _, want := range []string{"2-core", "POCL", "GOMAXPROCS=2", "BENCHMARKS.md"} {
		assert.Contains(t, advice, want)
	}

	benchmarks := regexp.MustCompile(`Benchmark\w+`).FindAllString(advice, -1)
	require.NotEmpty(t, benchmarks, "the advice names the benchmarks behind it")
	sources, err := filepath.Glob(filepath.Join(repoRoot, "mempool", "*_test.go"))
	require.NoError(t, err)
	var src strings.Builder
	for _, name := range sources {
		b, err := os.ReadFile(name)
		require.NoError(t, err)
		src.Write(b)
	}
	for _, name := range benchmarks {
		assert.Contains(t, src.String(), "func "+name+"(", "a benchmark the README names")
	}
}
