package cl

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestSpacedOptions: BuildProgram hands the runtime its options with ASCII
// whitespace as spaces (NVIDIA's compiler fails on "-D\nX"); other
// characters, quotes and non-ASCII spaces included, pass as they are.
func TestSpacedOptions(t *testing.T) {
	for in, want := range map[string]string{
		"":                   "",
		"-D\nX":              "-D X",
		"-w -D X\n":          "-w -D X ",
		"-D\tA=1\r\n-D\vB\f": "-D A=1  -D B ",
		`-I "a dir" -DX=é`:   `-I "a dir" -DX=é`,
		"-DX=\u00a0":         "-DX=\u00a0",
	} {
		assert.Equal(t, want, spaced(in), "%q", in)
	}
}
