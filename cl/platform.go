package cl

/*
#cgo LDFLAGS: -lOpenCL
#include "clpool.h"
*/
import "C"

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unsafe"
)

// DeviceType is a bit set of device kinds (cl_device_type).
type DeviceType uint64

// Device types.
const (
	DeviceTypeDefault     DeviceType = C.CL_DEVICE_TYPE_DEFAULT
	DeviceTypeCPU         DeviceType = C.CL_DEVICE_TYPE_CPU
	DeviceTypeGPU         DeviceType = C.CL_DEVICE_TYPE_GPU
	DeviceTypeAccelerator DeviceType = C.CL_DEVICE_TYPE_ACCELERATOR
	DeviceTypeCustom      DeviceType = C.CL_DEVICE_TYPE_CUSTOM
	DeviceTypeAll         DeviceType = C.CL_DEVICE_TYPE_ALL
)

// String returns the kinds in s, such as "CPU" or "GPU|ACCELERATOR".
func (t DeviceType) String() string {
	var parts []string
	for _, k := range []struct {
		bit  DeviceType
		name string
	}{{DeviceTypeDefault, "DEFAULT"}, {DeviceTypeCPU, "CPU"}, {DeviceTypeGPU, "GPU"},
		{DeviceTypeAccelerator, "ACCELERATOR"}, {DeviceTypeCustom, "CUSTOM"}} {
		if t&k.bit != 0 {
			parts = append(parts, k.name)
		}
	}
	if len(parts) == 0 {
		return "NONE"
	}
	return strings.Join(parts, "|")
}

// SVMCapabilities is the device's shared-virtual-memory support
// (cl_device_svm_capabilities, OpenCL 2.0). Zero on OpenCL 1.x devices,
// which are not asked (the query is not theirs), and on OpenCL 3.0 devices
// without SVM, which 3.0 makes optional: they answer the query with 0.
// Context.SVMAlloc needs SVMCoarseGrainBuffer at least.
type SVMCapabilities uint64

// SVM capability bits.
const (
	SVMCoarseGrainBuffer SVMCapabilities = C.CL_DEVICE_SVM_COARSE_GRAIN_BUFFER
	SVMFineGrainBuffer   SVMCapabilities = C.CL_DEVICE_SVM_FINE_GRAIN_BUFFER
	SVMFineGrainSystem   SVMCapabilities = C.CL_DEVICE_SVM_FINE_GRAIN_SYSTEM
	SVMAtomics           SVMCapabilities = C.CL_DEVICE_SVM_ATOMICS
)

// String returns the capabilities as names, or "none".
func (c SVMCapabilities) String() string {
	var parts []string
	for i, n := range []string{"coarse-grain buffer", "fine-grain buffer", "fine-grain system", "atomics"} {
		if c&(1<<i) != 0 {
			parts = append(parts, n)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// Platform is an OpenCL platform (an installed driver).
type Platform struct {
	id      C.cl_platform_id
	Index   int    // position in Platforms()
	Name    string // CL_PLATFORM_NAME
	Vendor  string // CL_PLATFORM_VENDOR
	Version string // CL_PLATFORM_VERSION, "OpenCL <major>.<minor> <vendor text>"
}

// Device is an OpenCL device with the facts clpool and its users need, read
// once when the device is listed. Devices need no release.
type Device struct {
	id       C.cl_device_id
	Platform *Platform
	Index    int // position in Platform.Devices()

	Name          string     // CL_DEVICE_NAME
	Vendor        string     // CL_DEVICE_VENDOR
	Version       string     // CL_DEVICE_VERSION
	DriverVersion string     // CL_DRIVER_VERSION
	Type          DeviceType // CL_DEVICE_TYPE

	GlobalMemSize     int64 // CL_DEVICE_GLOBAL_MEM_SIZE, bytes
	MaxMemAllocSize   int64 // CL_DEVICE_MAX_MEM_ALLOC_SIZE, bytes: the largest single buffer
	MemBaseAddrAlign  int64 // CL_DEVICE_MEM_BASE_ADDR_ALIGN, in bytes (the API reports bits)
	LocalMemSize      int64 // CL_DEVICE_LOCAL_MEM_SIZE, bytes: a work-group's local memory
	MaxComputeUnits   int   // CL_DEVICE_MAX_COMPUTE_UNITS
	MaxWorkGroupSize  int   // CL_DEVICE_MAX_WORK_GROUP_SIZE
	SVMCapabilities   SVMCapabilities
	ProfilingTimerRes int64 // CL_DEVICE_PROFILING_TIMER_RESOLUTION, ns
}

// Platforms lists the installed platforms. If there is none, it returns an
// error matching ErrPlatformNotFound that says what to check.
func Platforms() ([]*Platform, error) {
	var n C.cl_uint
	code := int32(C.clGetPlatformIDs(0, nil, &n))
	if Status(code) == ErrPlatformNotFound || (code == 0 && n == 0) {
		return nil, misuse("clGetPlatformIDs", ErrPlatformNotFound, noPlatformHelp())
	}
	if err := callErr("clGetPlatformIDs", code); err != nil {
		return nil, err
	}
	ids := make([]C.cl_platform_id, n)
	if err := callErr("clGetPlatformIDs", int32(C.clGetPlatformIDs(n, &ids[0], nil))); err != nil {
		return nil, err
	}
	ps := make([]*Platform, len(ids))
	for i, id := range ids {
		p := &Platform{id: id, Index: i}
		var err error
		if p.Name, err = platformString(id, C.CL_PLATFORM_NAME); err != nil {
			return nil, err
		}
		if p.Vendor, err = platformString(id, C.CL_PLATFORM_VENDOR); err != nil {
			return nil, err
		}
		if p.Version, err = platformString(id, C.CL_PLATFORM_VERSION); err != nil {
			return nil, err
		}
		ps[i] = p
	}
	return ps, nil
}

// noPlatformHelp says what to check when the ICD loader finds no platform.
func noPlatformHelp() string {
	where := "/etc/OpenCL/vendors"
	if dir := os.Getenv("OCL_ICD_VENDORS"); dir != "" {
		where = fmt.Sprintf("OCL_ICD_VENDORS=%q", dir)
	}
	return "no OpenCL platform found: the ICD loader (libOpenCL) found no runtime in " + where +
		"; install one, such as pocl-opencl-icd, and check that OCL_ICD_VENDORS, if set, names a directory of .icd files"
}

func platformString(id C.cl_platform_id, param C.cl_platform_info) (string, error) {
	var n C.size_t
	if err := callErr("clGetPlatformInfo", int32(C.clGetPlatformInfo(id, param, 0, nil, &n))); err != nil {
		return "", err
	}
	if n == 0 {
		return "", nil
	}
	buf := make([]byte, n)
	if err := callErr("clGetPlatformInfo", int32(C.clGetPlatformInfo(id, param, n, unsafe.Pointer(&buf[0]), nil))); err != nil {
		return "", err
	}
	return cString(buf), nil
}

// Devices lists the platform's devices of the given types.
// A platform without such devices returns an empty list and no error.
func (p *Platform) Devices(t DeviceType) ([]*Device, error) {
	if p == nil {
		return nil, misuse("clGetDeviceIDs", ErrInvalidPlatform, "platform is nil")
	}
	var n C.cl_uint
	code := int32(C.clGetDeviceIDs(p.id, C.cl_device_type(t), 0, nil, &n))
	if Status(code) == ErrDeviceNotFound {
		return nil, nil
	}
	if err := callErr("clGetDeviceIDs", code); err != nil {
		return nil, err
	}
	ids := make([]C.cl_device_id, n)
	if err := callErr("clGetDeviceIDs", int32(C.clGetDeviceIDs(p.id, C.cl_device_type(t), n, &ids[0], nil))); err != nil {
		return nil, err
	}
	ds := make([]*Device, len(ids))
	for i, id := range ids {
		d, err := newDevice(id, p, i)
		if err != nil {
			return nil, err
		}
		ds[i] = d
	}
	return ds, nil
}

func newDevice(id C.cl_device_id, p *Platform, index int) (*Device, error) {
	d := &Device{id: id, Platform: p, Index: index}
	var err error
	str := func(param C.cl_device_info) string {
		if err != nil {
			return ""
		}
		var s string
		s, err = deviceString(id, param)
		return s
	}
	u64 := func(param C.cl_device_info) uint64 {
		if err != nil {
			return 0
		}
		var v C.cl_ulong
		err = deviceInfo(id, param, unsafe.Sizeof(v), unsafe.Pointer(&v))
		return uint64(v)
	}
	u32 := func(param C.cl_device_info) uint32 {
		if err != nil {
			return 0
		}
		var v C.cl_uint
		err = deviceInfo(id, param, unsafe.Sizeof(v), unsafe.Pointer(&v))
		return uint32(v)
	}
	sz := func(param C.cl_device_info) uint64 {
		if err != nil {
			return 0
		}
		var v C.size_t
		err = deviceInfo(id, param, unsafe.Sizeof(v), unsafe.Pointer(&v))
		return uint64(v)
	}
	d.Name = str(C.CL_DEVICE_NAME)
	d.Vendor = str(C.CL_DEVICE_VENDOR)
	d.Version = str(C.CL_DEVICE_VERSION)
	d.DriverVersion = str(C.CL_DRIVER_VERSION)
	d.Type = DeviceType(u64(C.CL_DEVICE_TYPE))
	d.GlobalMemSize = int64(u64(C.CL_DEVICE_GLOBAL_MEM_SIZE))
	d.MaxMemAllocSize = int64(u64(C.CL_DEVICE_MAX_MEM_ALLOC_SIZE))
	d.MemBaseAddrAlign = int64(u32(C.CL_DEVICE_MEM_BASE_ADDR_ALIGN)) / 8
	d.LocalMemSize = int64(u64(C.CL_DEVICE_LOCAL_MEM_SIZE))
	d.MaxComputeUnits = int(u32(C.CL_DEVICE_MAX_COMPUTE_UNITS))
	d.MaxWorkGroupSize = int(sz(C.CL_DEVICE_MAX_WORK_GROUP_SIZE))
	d.ProfilingTimerRes = int64(sz(C.CL_DEVICE_PROFILING_TIMER_RESOLUTION))
	if major, _ := d.VersionNumber(); major >= 2 {
		d.SVMCapabilities = SVMCapabilities(u64(C.CL_DEVICE_SVM_CAPABILITIES))
	}
	if err != nil {
		return nil, err
	}
	return d, nil
}

func deviceInfo(id C.cl_device_id, param C.cl_device_info, size uintptr, p unsafe.Pointer) error {
	return callErr("clGetDeviceInfo", int32(C.clGetDeviceInfo(id, param, C.size_t(size), p, nil)))
}

func deviceString(id C.cl_device_id, param C.cl_device_info) (string, error) {
	var n C.size_t
	if err := callErr("clGetDeviceInfo", int32(C.clGetDeviceInfo(id, param, 0, nil, &n))); err != nil {
		return "", err
	}
	if n == 0 {
		return "", nil
	}
	buf := make([]byte, n)
	if err := deviceInfo(id, param, uintptr(n), unsafe.Pointer(&buf[0])); err != nil {
		return "", err
	}
	return strings.TrimSpace(cString(buf)), nil
}

var versionRE = regexp.MustCompile(`^OpenCL (\d+)\.(\d+)`)

// VersionNumber returns the device's OpenCL version as major and minor
// numbers, parsed from Version ("OpenCL 1.2 ...", "OpenCL 3.0 PoCL ...");
// 0, 0 if it cannot be read. Use it to detect features newer than the 1.2
// API that this package calls everywhere; in OpenCL 3.0 those features are
// optional, so a 3.0 device must still be asked about each (as
// SVMCapabilities is). A nil Device returns 0, 0.
func (d *Device) VersionNumber() (major, minor int) {
	if d == nil {
		return 0, 0
	}
	m := versionRE.FindStringSubmatch(d.Version)
	if m == nil {
		return 0, 0
	}
	major, _ = strconv.Atoi(m[1])
	minor, _ = strconv.Atoi(m[2])
	return major, minor
}

// String returns "platform:device name (platform name)", or "<nil>".
func (d *Device) String() string {
	if d == nil || d.Platform == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%d:%d %s (%s)", d.Platform.Index, d.Index, d.Name, d.Platform.Name)
}

// stableNames caches StableName's answers by device id (cl_device_id,
// which every listing of a device returns alike, unlike the *Device it
// makes anew): the names of the devices of the last listing StableName
// made, so that it holds no Device and no more entries than there are
// devices.
var stableNames struct {
	mu   sync.Mutex
	byID map[C.cl_device_id]string
}

// StableName returns the device's name and vendor, "name (vendor)": a
// name that stays the same however the ICD loader is set up, unlike
// String, which begins with the platform's ordinal (it changes with the
// .icd files installed). A device identical in name and vendor to one
// listed before it (AllDevices' order) is told apart by its place among
// them: "name (vendor) #2", #3, and so on; the first has no number, so a
// second card does not rename the first. It returns "" for a nil d.
//
// StableName lists the devices (AllDevices) for a device it has not
// named, and caches the names of all those listed by their OpenCL ids,
// not by Device: the Devices of later listings, which are new Devices of
// the same ids, are named from the cache, and the cache keeps no Device
// alive.
func (d *Device) StableName() string {
	if d == nil {
		return ""
	}
	if d.id != nil {
		stableNames.mu.Lock()
		name, ok := stableNames.byID[d.id]
		stableNames.mu.Unlock()
		if ok {
			return name
		}
	}
	name := d.Name + " (" + d.Vendor + ")"
	if d.id == nil && d.Platform == nil {
		return name // not a listed device: none to tell it apart from
	}
	all, err := AllDevices()
	if err != nil {
		return name
	}
	byID := make(map[C.cl_device_id]string, len(all))
	nth := map[[2]string]int{} // the devices of each name and vendor so far
	byIndex := ""              // the name of the device at d's place, if it is d's
	for _, o := range all {
		oName := o.Name + " (" + o.Vendor + ")"
		k := [2]string{o.Name, o.Vendor}
		nth[k]++
		if n := nth[k]; n > 1 {
			oName += " #" + strconv.Itoa(n)
		}
		byID[o.id] = oName
		if d.Platform != nil && o.Platform.Index == d.Platform.Index && o.Index == d.Index && o.Name == d.Name && o.Vendor == d.Vendor {
			byIndex = oName
		}
	}
	stableNames.mu.Lock()
	stableNames.byID = byID
	stableNames.mu.Unlock()
	if listed, ok := byID[d.id]; ok && d.id != nil {
		return listed
	}
	if byIndex != "" {
		return byIndex
	}
	return name
}

// AllDevices lists every device of every platform, in platform order.
func AllDevices() ([]*Device, error) {
	ps, err := Platforms()
	if err != nil {
		return nil, err
	}
	var all []*Device
	for _, p := range ps {
		ds, err := p.Devices(DeviceTypeAll)
		if err != nil {
			return nil, fmt.Errorf("platform %d (%s): %w", p.Index, p.Name, err)
		}
		all = append(all, ds...)
	}
	return all, nil
}

// DeviceEnv is the environment variable that SelectDevice and DefaultQueue read.
const DeviceEnv = "CLPOOL_DEVICE"

var indexRE = regexp.MustCompile(`^(\d+):(\d+)$`)

// SelectDevice returns the device that CLPOOL_DEVICE names: either
// "platform:device" indices ("1:0") or a case-insensitive substring of the
// platform or device name, vendor or platform version ("pocl",
// "oclgrind"). A value that matches nothing is an error that lists the
// devices found.
//
// Among the devices that match, or all devices if CLPOOL_DEVICE is unset or
// empty, it returns the first, in platform order, that is not a simulator
// (see Device.IsSimulator), and the first simulator only if nothing else
// matches. The ICD loader may list Oclgrind first, and a simulator runs
// kernels far slower than real hardware: it is used when asked for by name
// or indices, or when it is all there is.
func SelectDevice() (*Device, error) {
	return selectDevice(os.Getenv(DeviceEnv))
}

func selectDevice(want string) (*Device, error) {
	all, err := AllDevices()
	if err != nil {
		return nil, err
	}
	if len(all) == 0 {
		return nil, misuse("clGetDeviceIDs", ErrDeviceNotFound, "no OpenCL device found: is an ICD (pocl-opencl-icd) installed, and does OCL_ICD_VENDORS point at it?")
	}
	want = strings.TrimSpace(want)
	var matches []*Device
	for _, d := range all {
		if names(want, d) {
			matches = append(matches, d)
		}
	}
	for _, d := range matches {
		if !d.IsSimulator() {
			return d, nil
		}
	}
	if len(matches) > 0 {
		return matches[0], nil
	}
	var list strings.Builder
	for _, d := range all {
		list.WriteString("\n  " + d.String())
	}
	return nil, misuse("clGetDeviceIDs", ErrDeviceNotFound, fmt.Sprintf("%s=%q matches no device; found:%s", DeviceEnv, want, list.String()))
}

// names reports whether want, a value of CLPOOL_DEVICE, names d. An empty
// value names every device.
func names(want string, d *Device) bool {
	if want == "" {
		return true
	}
	if m := indexRE.FindStringSubmatch(want); m != nil {
		pi, _ := strconv.Atoi(m[1])
		di, _ := strconv.Atoi(m[2])
		return d.Platform.Index == pi && d.Index == di
	}
	return d.Matches(want)
}

// simulatorPlatforms names, in lower case, the platforms that simulate a
// device rather than run on one.
var simulatorPlatforms = []string{"oclgrind"}

// IsSimulator reports whether the device is simulated (Oclgrind), which
// runs kernels far slower than real hardware: SelectDevice picks one only
// when asked by name or when there is no other device. A nil Device is not
// a simulator.
func (d *Device) IsSimulator() bool { return d.onPlatform(simulatorPlatforms) }

// onPlatform reports whether the name of the device's platform contains
// one of names (lower case); false for a nil Device.
func (d *Device) onPlatform(names []string) bool {
	if d == nil || d.Platform == nil {
		return false
	}
	platform := strings.ToLower(d.Platform.Name)
	for _, name := range names {
		if strings.Contains(platform, name) {
			return true
		}
	}
	return false
}

// overlapUnsafePlatforms names, in lower case, the platforms that crash on
// partly overlapping sub-buffers (see OverlappingSubBuffersSafe).
var overlapUnsafePlatforms = []string{"nvidia"}

// OverlappingSubBuffersSafe reports whether the device's runtime survives
// the release of a sub-buffer that partly overlaps another live one of the
// same buffer, both used by commands. NVIDIA's driver (OpenCL 3.0 CUDA,
// 580.159) does not: it dereferences a null pointer in clReleaseMemObject.
// Containment, identical and adjacent ranges were safe on every runtime
// tried (POCL, Oclgrind, NVIDIA's). A nil Device is safe.
func (d *Device) OverlappingSubBuffersSafe() bool { return !d.onPlatform(overlapUnsafePlatforms) }

// Matches reports whether name is a case-insensitive substring of the
// device's or platform's name or vendor, or of the platform's version (POCL
// calls its platform "Portable Computing Language" and says "PoCL" only in
// its version and vendor). It is how CLPOOL_DEVICE picks a device by name.
// A nil Device matches nothing.
func (d *Device) Matches(name string) bool {
	if d == nil || d.Platform == nil {
		return false
	}
	name = strings.ToLower(name)
	for _, s := range []string{d.Name, d.Vendor, d.Platform.Name, d.Platform.Vendor, d.Platform.Version} {
		if strings.Contains(strings.ToLower(s), name) {
			return true
		}
	}
	return false
}

// cString returns the text of a NUL-terminated C string held in buf.
func cString(buf []byte) string {
	if i := strings.IndexByte(string(buf), 0); i >= 0 {
		buf = buf[:i]
	}
	return string(buf)
}
