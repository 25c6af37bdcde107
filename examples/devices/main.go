// Command devices lists the OpenCL platforms and devices with the memory
// facts a pool cares about: what `clinfo -l` shows, plus global memory,
// the largest single allocation, base-address alignment and SVM support.
// The device CLPOOL_DEVICE selects is marked with "*".
package main

import (
	"fmt"
	"os"

	"github.com/clpool/clpool/cl"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "devices:", err)
		os.Exit(1)
	}
}

func run() error {
	platforms, err := cl.Platforms()
	if err != nil {
		return err
	}
	if len(platforms) == 0 {
		return fmt.Errorf("no OpenCL platform found (is OCL_ICD_VENDORS set? `make demo` sets it)")
	}
	selected, selErr := cl.SelectDevice()
	for _, p := range platforms {
		fmt.Printf("Platform #%d: %s\n", p.Index, p.Name)
		fmt.Printf("  %s, %s\n", p.Vendor, p.Version)
		devices, err := p.Devices(cl.DeviceTypeAll)
		if err != nil {
			return err
		}
		for _, d := range devices {
			mark := " "
			if selected != nil && selected.Platform.Index == p.Index && selected.Index == d.Index {
				mark = "*"
			}
			fmt.Printf(" %s`-- Device #%d: %s\n", mark, d.Index, d.Name)
			fmt.Printf("       type %v, %s, driver %s, %d compute units\n", d.Type, d.Version, d.DriverVersion, d.MaxComputeUnits)
			fmt.Printf("       global memory %s, max allocation %s, base-address alignment %d bytes\n",
				human(d.GlobalMemSize), human(d.MaxMemAllocSize), d.MemBaseAddrAlign)
			fmt.Printf("       shared virtual memory: %v\n", d.SVMCapabilities)
		}
	}
	if selErr != nil {
		return selErr
	}
	fmt.Printf("\n%s selects %v\n", cl.DeviceEnv, selected)
	return nil
}

// human prints a byte count in binary units.
func human(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB (%d)", float64(n)/float64(div), "KMGTPE"[exp], n)
}
