package cl_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDevicesReportMemoryFacts(t *testing.T) {
	all, err := cl.AllDevices()
	require.NoError(t, err)
	require.NotEmpty(t, all, "make test installs POCL and Oclgrind")
	for _, d := range all {
		t.Run(d.Name, func(t *testing.T) {
			assert.NotEmpty(t, d.Name)
			assert.NotEmpty(t, d.Platform.Name)
			assert.Positive(t, d.GlobalMemSize)
			assert.Positive(t, d.MaxMemAllocSize)
			assert.LessOrEqual(t, d.MaxMemAllocSize, d.GlobalMemSize)
			assert.Positive(t, d.MemBaseAddrAlign)
			assert.Zero(t, d.MemBaseAddrAlign&(d.MemBaseAddrAlign-1), "alignment %d is a power of two", d.MemBaseAddrAlign)
			major, minor := d.VersionNumber()
			assert.GreaterOrEqual(t, major*10+minor, 12, "version %q", d.Version)
			if major < 2 {
				assert.Zero(t, d.SVMCapabilities)
			}
		})
	}
}

func TestSelectDevice(t *testing.T) {
	all, err := cl.AllDevices()
	require.NoError(t, err)
	require.NotEmpty(t, all)
	last := all[len(all)-1]

	t.Run("unset picks the first", func(t *testing.T) {
		t.Setenv(cl.DeviceEnv, "")
		d, err := cl.SelectDevice()
		require.NoError(t, err)
		assert.Equal(t, all[0].String(), d.String())
	})
	t.Run("by indices", func(t *testing.T) {
		t.Setenv(cl.DeviceEnv, fmt.Sprintf("%d:%d", last.Platform.Index, last.Index))
		d, err := cl.SelectDevice()
		require.NoError(t, err)
		assert.Equal(t, last.String(), d.String())
	})
	t.Run("by platform name, any case", func(t *testing.T) {
		t.Setenv(cl.DeviceEnv, strings.ToUpper(last.Platform.Name))
		d, err := cl.SelectDevice()
		require.NoError(t, err)
		assert.Equal(t, last.Platform.Name, d.Platform.Name)
	})
	t.Run("pocl and oclgrind by their short names", func(t *testing.T) {
		for _, name := range []string{"pocl", "oclgrind"} {
			t.Setenv(cl.DeviceEnv, name)
			d, err := cl.SelectDevice()
			require.NoError(t, err, "make test installs both runtimes")
			assert.True(t, d.Matches(name))
			assert.False(t, d.Matches("no-such-device"))
		}
	})
	t.Run("nothing matches", func(t *testing.T) {
		t.Setenv(cl.DeviceEnv, "no-such-device")
		_, err := cl.SelectDevice()
		require.ErrorIs(t, err, cl.ErrDeviceNotFound)
		assert.Contains(t, err.Error(), "no-such-device")
		for _, d := range all {
			assert.Contains(t, err.Error(), d.Name, "the error lists every device")
		}
	})
	t.Run("indices out of range", func(t *testing.T) {
		t.Setenv(cl.DeviceEnv, "99:0")
		_, err := cl.SelectDevice()
		require.ErrorIs(t, err, cl.ErrDeviceNotFound)
	})
}

func TestDefaultQueueUsesTheSelectedDevice(t *testing.T) {
	want := os.Getenv(cl.DeviceEnv)
	q, err := cl.DefaultQueue()
	require.NoError(t, err)
	defer q.Release()
	require.NotNil(t, q.Context())
	assert.Equal(t, []*cl.Device{q.Device()}, q.Context().Devices())
	if want != "" && !strings.Contains(want, ":") {
		assert.True(t, q.Device().Matches(want), "%v matches %q", q.Device(), want)
	}
}
