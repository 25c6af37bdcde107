package cltest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/clpool/clpool/cl"
	"github.com/stretchr/testify/require"
)

// ChildEnv tells a test binary started by Reexec which part to play.
const ChildEnv = "CLPOOL_TEST_CHILD"

// Reexec runs this test binary again, with the tests that match run, with
// env added to the environment, and returns its output. The ICD loader
// reads OCL_ICD_VENDORS once per process: only a new process sees another
// set of platforms.
func Reexec(tb testing.TB, run string, env ...string) (string, error) {
	tb.Helper()
	args := []string{"-test.run=" + run, "-test.count=1", "-test.v"}
	if testing.Short() {
		args = append(args, "-test.short")
	}
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), env...)
	// A child that hangs (a runtime stuck on what the test feeds it) dies
	// with this process, when a watchdog ends it: left running, it kept a
	// core busy for the rest of the machine's day.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// POCLICD returns the .icd file that names POCL, in the directory
// OCL_ICD_VENDORS names or else /etc/OpenCL/vendors; it skips the test if
// there is none.
func POCLICD(tb testing.TB) string {
	tb.Helper()
	dir := os.Getenv("OCL_ICD_VENDORS")
	if dir == "" {
		dir = "/etc/OpenCL/vendors"
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.icd"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err == nil && strings.Contains(strings.ToLower(filepath.Base(f)+string(data)), "pocl") {
			return f
		}
	}
	tb.Skipf("this test needs POCL, and no .icd file in %s names it (`make deps` installs it)", dir)
	return ""
}

// POCLOnlyVendors returns a new directory for OCL_ICD_VENDORS that names
// POCL alone (a copy of POCLICD's file); it skips the test where POCL is
// not installed.
func POCLOnlyVendors(tb testing.TB) string {
	tb.Helper()
	icd := POCLICD(tb)
	dir := tb.TempDir()
	data, err := os.ReadFile(icd)
	require.NoError(tb, err)
	require.NoError(tb, os.WriteFile(filepath.Join(dir, filepath.Base(icd)), data, 0o644))
	return dir
}

// TwoDevices returns the first two devices of the first platform that has
// two, and skips the test where none has (RunOnTwoPOCLDevices makes one).
func TwoDevices(tb testing.TB) (*cl.Device, *cl.Device) {
	tb.Helper()
	ps, err := cl.Platforms()
	require.NoError(tb, err)
	var seen []string
	for _, p := range ps {
		ds, err := p.Devices(cl.DeviceTypeAll)
		require.NoError(tb, err)
		if len(ds) >= 2 {
			return ds[0], ds[1]
		}
		seen = append(seen, fmt.Sprintf("%s: %d", p.Name, len(ds)))
	}
	tb.Skipf("this test needs a platform with two devices, and the platforms have these devices: %s; "+
		`POCL shows two with POCL_DEVICES="pthread pthread" (RunOnTwoPOCLDevices runs tests so)`,
		strings.Join(seen, ", "))
	return nil, nil
}

// RunOnTwoPOCLDevices runs the test named test (a TwoDevices user) in a
// new process of this test binary whose ICD loader sees POCL alone, with
// POCL_DEVICES naming two CPU devices, and fails if it fails. POCL shows
// two devices only when POCL_DEVICES names them before the loader starts
// it, which only a new process can do. It skips where the selected device
// is not POCL, and inside such a child.
func RunOnTwoPOCLDevices(t *testing.T, test string) {
	t.Helper()
	if os.Getenv(ChildEnv) != "" {
		t.Skip("a child of Reexec")
	}
	if dev, err := cl.SelectDevice(); err != nil || !dev.Matches("pocl") {
		t.Skipf("runs where the selected device is POCL (%s=pocl); selected: %v (%v)", cl.DeviceEnv, dev, err)
	}
	dir := POCLOnlyVendors(t)
	// POCL 3 calls its CPU device "pthread"; later versions call it "cpu".
	var outs []string
	for _, devices := range []string{"pthread pthread", "cpu cpu"} {
		out, err := Reexec(t, "^"+test+"$", ChildEnv+"=two-pocl-devices",
			"OCL_ICD_VENDORS="+dir, "POCL_DEVICES="+devices, cl.DeviceEnv+"=pocl")
		require.NoError(t, err, out)
		if strings.Contains(out, "--- PASS: "+test) {
			t.Logf("POCL_DEVICES=%q:\n%s", devices, out)
			return
		}
		outs = append(outs, "POCL_DEVICES="+devices+":\n"+out)
	}
	t.Skipf("POCL showed fewer than two devices:\n%s", strings.Join(outs, "\n"))
}
