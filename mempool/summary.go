package mempool

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file writes a pool's statistics in the table that
// torch.cuda.memory_summary prints. It reads only Stats and Device, as any
// user of the package could.

// The table is 77 characters wide: 75 between its outer borders, of which
// the metric's name takes 23 and each of the four value columns 12.
const (
	summaryInner = 75
	summaryLeft  = 36 // the left half of a two-part header line
	summaryRight = summaryInner - summaryLeft - 1
)

// byteUnits are the units of the table's byte counts, 1024 apart.
var byteUnits = []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB"}

// WriteSummary writes the pool's statistics to w as the table of
// torch.cuda.memory_summary: a header with the device (its StableName,
// as metrics labels it, without the ICD loader's ordinal), the policy, the
// limit and the pool's event counts, then a row for each torch statistic
// (allocated, active, requested, reserved and non-releasable memory; the
// counts of allocations, active allocations, reserved segments and
// non-releasable blocks; oversize allocations and segments) with its
// current value, peak, total allocated and total freed (Cur Usage, Peak
// Usage, Tot Alloc, Tot Freed). Each statistic has a row for all blocks,
// then one for the large pool and one for the small pool (see
// Stats.Allocation for what each pool holds).
//
// As in torch, the three byte counts of a column share a unit, chosen by
// the count for all blocks: B below 768 KiB, KiB below 768 MiB, MiB below
// 768 GiB, and so on; a count is rounded to the nearest whole unit.
// "Non-releasable memory" is Stats.InactiveSplitBytes: held blocks of
// segments that have a block in use, which FreeHeld cannot return to the
// device.
//
// WriteSummary writes the whole table in one write, and returns its
// error, if any.
func (p *Pool) WriteSummary(w io.Writer) error {
	s := p.Stats()
	var b strings.Builder
	border := "|" + strings.Repeat("=", summaryInner) + "|\n"
	rule := "|" + strings.Repeat("-", summaryInner) + "|\n"

	device := "device unknown"
	if d := p.Device(); d != nil {
		device = "device " + d.StableName()
	}
	b.WriteString(border)
	b.WriteString("|" + center("clpool memory summary", summaryInner) + "|\n")
	b.WriteString("|" + center(device, summaryInner) + "|\n")
	b.WriteString(rule)
	for _, pair := range [][2]string{
		{"policy: " + s.Policy, "leading bits: " + strconv.Itoa(s.LeadingBits)},
		{"max split size: " + sizeOrNone(s.MaxSplitSize), "limit: " + sizeOrNone(s.Limit)},
		{"hits: " + itoa(s.Hits), "misses: " + itoa(s.Misses)},
		{"device allocs: " + itoa(s.DeviceAllocs), "device frees: " + itoa(s.DeviceFrees)},
		{"OOMs: " + itoa(s.OOMs), "OOM retries: " + itoa(s.OOMRetries)},
	} {
		b.WriteString("|" + center(pair[0], summaryLeft) + "|" + center(pair[1], summaryRight) + "|\n")
	}
	b.WriteString(border)
	fmt.Fprintf(&b, "| %-21s | %-10s | %-10s | %-10s | %-10s |\n", "       Metric", "Cur Usage", "Peak Usage", "Tot Alloc", "Tot Freed")

	for _, row := range []struct {
		name  string
		g     StatGroup
		bytes bool
	}{
		{"Allocated memory", s.AllocatedBytes, true},
		{"Active memory", s.ActiveBlockBytes, true},
		{"Requested memory", s.RequestedBytes, true},
		{"Reserved memory", s.ReservedBytes, true},
		{"Non-releasable memory", s.InactiveSplitBytes, true},
		{"Allocations", s.Allocation, false},
		{"Active allocs", s.Active, false},
		{"Reserved segments", s.Segment, false},
		{"Non-releasable allocs", s.InactiveSplit, false},
	} {
		b.WriteString(rule)
		all := statValues(row.g.All)
		for _, part := range []struct {
			name string
			st   Stat
		}{{row.name, row.g.All}, {"      from large pool", row.g.Large}, {"      from small pool", row.g.Small}} {
			var cells [4]string
			for i, v := range statValues(part.st) {
				if row.bytes {
					cells[i] = bytesCell(v, byteUnit(all[i]))
				} else {
					cells[i] = countCell(v, countUnit(all[i]))
				}
			}
			writeSummaryRow(&b, part.name, cells)
		}
	}
	for _, row := range []struct {
		name string
		st   Stat
	}{{"Oversize allocations", s.OversizeAllocations}, {"Oversize segments", s.OversizeSegments}} {
		b.WriteString(rule)
		var cells [4]string
		for i, v := range statValues(row.st) {
			cells[i] = countCell(v, countUnit(v))
		}
		writeSummaryRow(&b, row.name, cells)
	}
	b.WriteString(border)

	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("mempool: WriteSummary: %w", err)
	}
	return nil
}

// writeSummaryRow writes one row of the table: a statistic's name and its
// four cells.
func writeSummaryRow(b *strings.Builder, name string, cells [4]string) {
	fmt.Fprintf(b, "| %-21s | %s | %s | %s | %s |\n", name, cells[0], cells[1], cells[2], cells[3])
}

// statValues returns a Stat's values in the table's column order.
func statValues(st Stat) [4]int64 {
	return [4]int64{st.Current, st.Peak, st.Allocated, st.Freed}
}

// byteUnit returns the unit, an index into byteUnits, of a column of byte
// counts whose count for all blocks is ref: the largest unit of which ref
// is at least 768, or B.
func byteUnit(ref int64) int {
	u := 0
	for u < len(byteUnits)-1 && ref >= 768<<10 {
		ref >>= 10
		u++
	}
	return u
}

// bytesCell formats n bytes in unit u (an index into byteUnits), rounded
// to the nearest whole unit, in the 10 characters of a cell.
func bytesCell(n int64, u int) string {
	div := int64(1) << (10 * u)
	q, r := n/div, n%div
	if r >= div-r && r > 0 { // r >= div/2, without overflow
		q++
	}
	return fmt.Sprintf("%6d %-3s", q, byteUnits[u])
}

// countUnits are the prefixes of counts in the table, as torch's
// _format_count has them (K, M), and on past them: a count of 2^63 - 1
// fits the cell in P.
var countUnits = []string{" ", "K", "M", "G", "T", "P"}

// countUnit returns the unit, an index into countUnits, of a column of
// counts whose count for all blocks is ref: each step of 1000 while the
// count is at least 750,000 (torch's rule), so that every cell fits.
func countUnit(ref int64) int {
	u := 0
	for u < len(countUnits)-1 && ref >= 750_000 {
		ref /= 1000
		u++
	}
	return u
}

// countCell formats a count in unit u (an index into countUnits),
// truncated as torch truncates it, in the 10 characters of a cell.
func countCell(n int64, u int) string {
	for range u {
		n /= 1000
	}
	return fmt.Sprintf("%7d %s ", n, countUnits[u])
}

// sizeOrNone formats a size of the header, where 0 means none: "none",
// "512 B", "64 MiB", "1.5 GiB" (one decimal, dropped when it is 0).
func sizeOrNone(n int64) string {
	if n <= 0 {
		return "none"
	}
	u := 0
	for u < len(byteUnits)-1 && n >= int64(1)<<(10*(u+1)) {
		u++
	}
	if u == 0 {
		return itoa(n) + " B"
	}
	v := strconv.FormatFloat(float64(n)/float64(int64(1)<<(10*u)), 'f', 1, 64)
	return strings.TrimSuffix(v, ".0") + " " + byteUnits[u]
}

// center centers s in width characters, cutting it short with "..." if it
// is longer.
func center(s string, width int) string {
	n := utf8.RuneCountInString(s)
	if n > width {
		s = string([]rune(s)[:width-3]) + "..."
		n = width
	}
	left := (width - n) / 2
	return strings.Repeat(" ", left) + s + strings.Repeat(" ", width-n-left)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
