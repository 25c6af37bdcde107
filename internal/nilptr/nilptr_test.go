package nilptr_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/clpool/clpool/internal/nilptr"
)

func TestIs(t *testing.T) {
	var p *int
	var i any = p
	n := 1
	assert.True(t, nilptr.Is(nil))
	assert.True(t, nilptr.Is(i), "a nil pointer in an interface")
	assert.False(t, nilptr.Is(&n))
	assert.False(t, nilptr.Is(0), "a value is no pointer")
}
