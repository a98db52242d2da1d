package procfs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// IO holds a process's storage counters from /proc/<pid>/io, in bytes.
type IO struct {
	// WriteBytes are the bytes the process caused to be written to
	// storage (a page counts when it turns dirty).
	WriteBytes int64
	// CancelledWriteBytes were dirtied, then truncated away before
	// writeback.
	CancelledWriteBytes int64
	// WChar are the bytes passed to write(2) and its kin, sockets and
	// pipes included.
	WChar int64
}

// ReadIO reads /proc/<pid>/io (root, or the process's own user).
func ReadIO(pid int) (IO, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return IO{}, err
	}
	var c IO
	seen := false
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "write_bytes":
			c.WriteBytes, seen = n, true
		case "cancelled_write_bytes":
			c.CancelledWriteBytes = n
		case "wchar":
			c.WChar = n
		}
	}
	if !seen {
		return c, fmt.Errorf("no write_bytes in /proc/%d/io", pid)
	}
	return c, nil
}
