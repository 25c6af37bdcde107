package cl_test

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/clpool/clpool/cl"
	"github.com/clpool/clpool/internal/cltest"
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

	t.Run("unset picks the first that is not a simulator", func(t *testing.T) {
		unsetDeviceEnv(t)
		want := all[0]
		for _, d := range all {
			if !d.IsSimulator() {
				want = d
				break
			}
		}
		d, err := cl.SelectDevice()
		require.NoError(t, err)
		assert.Equal(t, want.String(), d.String())
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
	for _, name := range []string{"pocl", "oclgrind"} {
		t.Run(name+" by its short name", func(t *testing.T) {
			want := cltest.Device(t, name)
			t.Setenv(cl.DeviceEnv, name)
			d, err := cl.SelectDevice()
			require.NoError(t, err)
			assert.Equal(t, want.String(), d.String())
			assert.True(t, d.Matches(name))
			assert.False(t, d.Matches("no-such-device"))
		})
	}
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

// unsetDeviceEnv unsets CLPOOL_DEVICE until the end of the test.
func unsetDeviceEnv(t *testing.T) {
	t.Setenv(cl.DeviceEnv, "") // restores the value when the test ends
	require.NoError(t, os.Unsetenv(cl.DeviceEnv))
}

// With CLPOOL_DEVICE unset, DefaultQueue opens the first device that is
// not a simulator (POCL here, although the ICD loader lists Oclgrind
// first); Oclgrind is opened when asked for by name.
func TestDefaultQueuePrefersARealDeviceToASimulator(t *testing.T) {
	all, err := cl.AllDevices()
	require.NoError(t, err)
	var real *cl.Device
	for _, d := range all {
		if !d.IsSimulator() {
			real = d
			break
		}
	}
	if real == nil {
		t.Skip("this test needs a device that is not a simulator, such as POCL (`make deps` installs it)")
	}
	unsetDeviceEnv(t)
	q, err := cl.DefaultQueue()
	require.NoError(t, err)
	defer q.Release()
	assert.Equal(t, real.String(), q.Device().String())
	assert.False(t, q.Device().IsSimulator(), "%v", q.Device())

	sim := cltest.Device(t, "oclgrind")
	assert.True(t, sim.IsSimulator())
	t.Setenv(cl.DeviceEnv, "oclgrind")
	q2, err := cl.DefaultQueue()
	require.NoError(t, err)
	defer q2.Release()
	assert.True(t, q2.Device().IsSimulator(), "%v", q2.Device())
}

func TestContextAcrossPlatformsIsRefused(t *testing.T) {
	all, err := cl.AllDevices()
	require.NoError(t, err)
	for _, d := range all[1:] {
		if d.Platform.Index != all[0].Platform.Index {
			_, err := cl.CreateContext(all[0], d)
			require.ErrorIs(t, err, cl.ErrInvalidDevice)
			assert.Contains(t, err.Error(), "different platforms")
			assert.Equal(t, 1, strings.Count(err.Error(), "clCreateContext"), err.Error())
			return
		}
	}
	t.Skip("this test needs devices of two platforms, such as POCL and Oclgrind (`make deps` installs both)")
}

func TestNoPlatformSaysWhatToCheck(t *testing.T) {
	switch os.Getenv(cltest.ChildEnv) {
	case "no-platform":
		ps, err := cl.Platforms()
		if err == nil {
			// Some ICD loaders (NVIDIA's hosts) also read /etc/OpenCL/vendors.
			fmt.Printf("child skipped: the ICD loader found %d platforms with OCL_ICD_VENDORS naming none\n", len(ps))
			return
		}
		require.ErrorIs(t, err, cl.ErrPlatformNotFound)
		_, err = cl.DefaultQueue()
		require.ErrorIs(t, err, cl.ErrPlatformNotFound)
		fmt.Println("DefaultQueue:", err)
		return
	case "":
	default:
		t.Skip("a child of reexec for another test")
	}
	out, err := cltest.Reexec(t, "^TestNoPlatformSaysWhatToCheck$", cltest.ChildEnv+"=no-platform",
		"OCL_ICD_VENDORS="+t.TempDir()) // a directory with no .icd file: some ICD loaders fall back to /etc/OpenCL/vendors for a path that does not exist
	require.NoError(t, err, out)
	if strings.Contains(out, "child skipped: ") {
		t.Skip(out[strings.Index(out, "child skipped: "):])
	}
	assert.Contains(t, out, "DefaultQueue: clGetPlatformIDs: CL_PLATFORM_NOT_FOUND_KHR (-1001): no OpenCL platform found")
	assert.Contains(t, out, "OCL_ICD_VENDORS")
	assert.Contains(t, out, "pocl-opencl-icd")
	assert.Equal(t, 1, strings.Count(out, "clGetPlatformIDs"), out)
}

// go test on a machine with POCL alone passes: the tests of package cl
// that need Oclgrind skip, saying so. It runs them in a process whose ICD
// loader sees POCL alone.
func TestPackagePassesWithOnlyPOCL(t *testing.T) {
	if os.Getenv(cltest.ChildEnv) != "" {
		t.Skip("a child of reexec")
	}
	dir := cltest.POCLOnlyVendors(t)
	out, err := cltest.Reexec(t, ".", cltest.ChildEnv+"=only-pocl", "OCL_ICD_VENDORS="+dir, cl.DeviceEnv+"=")
	require.NoError(t, err, out)
	assert.Contains(t, out, "--- SKIP: TestSelectDevice/oclgrind_by_its_short_name")
	assert.Contains(t, out, `needs a "oclgrind" device, and none is installed`)
	assert.NotContains(t, out, "Oclgrind Simulator", "the child sees POCL alone")
}

// StableName is "name (vendor)", without String's platform ordinal
// ("1:0 ..."), which changes with the .icd files installed; a device
// identical to one listed before it has a number after it. nil's is "".
func TestStableNameHasNoICDOrdinal(t *testing.T) {
	all, err := cl.AllDevices()
	require.NoError(t, err)
	require.NotEmpty(t, all)
	for _, d := range all {
		name := d.StableName()
		assert.True(t, strings.HasPrefix(name, d.Name+" ("+d.Vendor+")"), "%q", name)
		assert.NotContains(t, name, fmt.Sprintf("%d:%d ", d.Platform.Index, d.Index))
		assert.Equal(t, name, d.StableName(), "the same each time")
	}
	var none *cl.Device
	assert.Empty(t, none.StableName())
	made := &cl.Device{Name: all[0].Name, Vendor: all[0].Vendor} // listed by no one
	assert.Equal(t, all[0].Name+" ("+all[0].Vendor+")", made.StableName())
}

// Every listing (AllDevices, Platform.Devices, DefaultDevice) makes new
// Devices: a program that lists its devices again and names them
// (WriteSummary, a metrics collector per pool) keeps none of them alive
// through StableName's cache, which is keyed by the devices' ids.
func TestStableNameKeepsNoDeviceAlive(t *testing.T) {
	var collected atomic.Int64
	const n = 20
	for range n {
		all, err := cl.AllDevices()
		require.NoError(t, err)
		d := all[0]
		require.NotEmpty(t, d.StableName())
		runtime.AddCleanup(d, func(*atomic.Int64) { collected.Add(1) }, &collected)
	}
	deadline := time.Now().Add(5 * time.Second)
	for collected.Load() < n && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	assert.Equal(t, int64(n), collected.Load(), "Devices listed, named and dropped that the garbage collector reclaimed")
}

// Two identical devices (POCL_DEVICES="cpu cpu") have different stable
// names, the first without a number, and so do the queues' devices.
func TestStableNameTellsIdenticalDevicesApart(t *testing.T) {
	if os.Getenv(cltest.ChildEnv) == "" {
		cltest.RunOnTwoPOCLDevices(t, "TestStableNameTellsIdenticalDevicesApart")
		return
	}
	a, b := cltest.TwoDevices(t)
	require.Equal(t, a.Name+a.Vendor, b.Name+b.Vendor, "identical")
	assert.Equal(t, a.Name+" ("+a.Vendor+")", a.StableName())
	assert.Equal(t, b.Name+" ("+b.Vendor+") #2", b.StableName())
	all, err := cl.AllDevices()
	require.NoError(t, err)
	assert.Equal(t, b.StableName(), all[1].StableName(), "the same device listed again")
}
