package main

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/edgeplane/edgeplane/internal/procfs"
)

// procTotals sums what the control plane's processes used so far.
type procTotals struct {
	cpu        time.Duration
	writeBytes int64
	rss        int64
}

func readTotals(pids []int) (procTotals, error) {
	var t procTotals
	for _, pid := range pids {
		cpu, err := procfs.CPUTime(pid)
		if err != nil {
			return t, err
		}
		io, err := procfs.ReadIO(pid)
		if err != nil {
			return t, err
		}
		rss, err := procfs.RSS(pid)
		if err != nil {
			return t, err
		}
		t.cpu += cpu
		t.writeBytes += io.WriteBytes
		t.rss += rss
	}
	return t, nil
}

// cpuTimes maps each of pids that can still be read to its CPU time so far
// (a simulator's processes: one that ended is left out).
func cpuTimes(pids []int) map[int]time.Duration {
	out := make(map[int]time.Duration, len(pids))
	for _, pid := range pids {
		if cpu, err := procfs.CPUTime(pid); err == nil {
			out[pid] = cpu
		}
	}
	return out
}

// dirSize is the bytes of the regular files under dir (0 for "").
func dirSize(dir string) int64 {
	if dir == "" {
		return 0
	}
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			n += info.Size()
		}
		return nil
	})
	return n
}

// leaseRenewals are the Lease renewals of a window: the durations of those
// that succeeded, and how many failed or timed out.
type leaseRenewals struct {
	ok               []time.Duration
	failed, timedOut int
}

func (l *leaseRenewals) addAll(o leaseRenewals) {
	l.ok = append(l.ok, o.ok...)
	l.failed += o.failed
	l.timedOut += o.timedOut
}

// readLeaseLatencies reads a node's (or a lite process's) lease latency file
// and keeps the renewals that ended in [from, to].
func readLeaseLatencies(path string, from, to time.Time) (leaseRenewals, error) {
	var out leaseRenewals
	f, err := os.Open(path)
	if err != nil {
		return out, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 || len(fields) > 3 {
			continue
		}
		sec, err1 := strconv.ParseInt(fields[0], 10, 64)
		micro, err2 := strconv.ParseInt(fields[1], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if t := time.Unix(sec, 0); t.Before(from.Truncate(time.Second)) || t.After(to) {
			continue
		}
		switch {
		case len(fields) == 2:
			out.ok = append(out.ok, time.Duration(micro)*time.Microsecond)
		case fields[2] == outcomeWord[renewTimedOut]:
			out.timedOut++
		default:
			out.failed++
		}
	}
	return out, sc.Err()
}

// pss is a process's proportional set size (/proc/<pid>/smaps_rollup):
// pages shared by N processes count 1/N to each, so that N hollow nodes of
// one binary are not charged N times for its code.
func pss(pid int) (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Pss:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, fmt.Errorf("no Pss in /proc/%d/smaps_rollup", pid)
}
