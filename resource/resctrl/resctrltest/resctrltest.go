// Package resctrltest writes fake resctrl trees of chosen hardware shapes. The machines Tandem is built
// and tested on have no RDT (no /sys/fs/resctrl), and resctrl.FS depends only on the files it reads and
// writes, so tests lay those files out in a temporary directory.
package resctrltest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Hardware describes a machine's RDT.
type Hardware struct {
	// CacheIDs are the L3 instances (one per socket); MBA domains follow them.
	CacheIDs []int
	// CBMMask is info/L3/cbm_mask, in hex ("7ff" = 11 ways). Empty means no L3 CAT.
	CBMMask    string
	MinCBMBits int
	L3Closids  int
	// CDP lays out L3CODE and L3DATA instead of L3.
	CDP bool
	// MB adds memory bandwidth allocation with these properties; MBClosids 0 means no MBA.
	MinBandwidth, BandwidthGran, MBClosids int
}

// XeonTwoSocket is a common shape: two sockets, 11 L3 ways, 16 CLOSIDs for CAT and 8 for MBA in steps
// of 10%.
var XeonTwoSocket = Hardware{
	CacheIDs: []int{0, 1}, CBMMask: "7ff", MinCBMBits: 1, L3Closids: 16,
	MinBandwidth: 10, BandwidthGran: 10, MBClosids: 8,
}

// Write lays out hw under a new temporary directory and returns it.
func Write(t testing.TB, hw Hardware) string {
	t.Helper()
	root := t.TempDir()
	var schemata strings.Builder
	put := func(rel, s string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(s+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	line := func(name, val string, ids []int) {
		// The kernel pads resource names to a common width; parsers must trim.
		schemata.WriteString("    " + name + ":")
		for i, id := range ids {
			if i > 0 {
				schemata.WriteByte(';')
			}
			schemata.WriteString(strconv.Itoa(id) + "=" + val)
		}
		schemata.WriteByte('\n')
	}
	if hw.CBMMask != "" {
		dirs := []string{"L3"}
		if hw.CDP {
			dirs = []string{"L3CODE", "L3DATA"}
		}
		for _, d := range dirs {
			put("info/"+d+"/cbm_mask", hw.CBMMask)
			put("info/"+d+"/min_cbm_bits", strconv.Itoa(hw.MinCBMBits))
			put("info/"+d+"/num_closids", strconv.Itoa(hw.L3Closids))
			put("info/"+d+"/shareable_bits", "0")
			line(d, hw.CBMMask, hw.CacheIDs)
		}
	}
	if hw.MBClosids > 0 {
		put("info/MB/min_bandwidth", strconv.Itoa(hw.MinBandwidth))
		put("info/MB/bandwidth_gran", strconv.Itoa(hw.BandwidthGran))
		put("info/MB/num_closids", strconv.Itoa(hw.MBClosids))
		put("info/MB/delay_linear", "1")
		line("MB", "100", hw.CacheIDs)
	}
	put("info/last_cmd_status", "ok")
	if err := os.MkdirAll(filepath.Join(root, "info"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "schemata"), []byte(schemata.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	put("tasks", "1")
	return root
}

// Read returns a file of the tree, trimmed.
func Read(t testing.TB, root, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
