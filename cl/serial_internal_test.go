package cl

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestOrderLockByPlatform: the calls that order queues take serialMu on
// Oclgrind (every call does), orderMu on NVIDIA's driver (which crashes on
// concurrent flushes and markers), and nothing on POCL.
func TestOrderLockByPlatform(t *testing.T) {
	for name, want := range map[string]*sync.Mutex{
		"Oclgrind":                    &serialMu,
		"NVIDIA CUDA":                 &orderMu,
		"Portable Computing Language": nil,
	} {
		devs := []*Device{{Platform: &Platform{Name: name}}}
		c := &Context{serial: needsSerial(devs), orderSerial: needsOrderSerial(devs)}
		assert.Same(t, want, c.orderLock(), name)
	}
	assert.Nil(t, (&Context{}).orderLock(), "a context whose platform is unknown")
}
