// Package preflight checks a host before `edgeplane server` runs on it: the
// clock, the API port, the data dir, memory, and cgroup and kernel facts.
//
// Gather reads the facts from the system; Evaluate turns facts into findings
// and is pure, so that every rule is tested on made-up facts.
package preflight

import (
	"fmt"
	"io"
	"time"
)

// Severity of a finding. Only a Blocker makes `edgeplane check` fail.
type Severity int

const (
	OK Severity = iota
	Warning
	Blocker
)

func (s Severity) String() string {
	switch s {
	case Warning:
		return "warn"
	case Blocker:
		return "BLOCKER"
	}
	return "ok"
}

// Finding is one line of the report.
type Finding struct {
	Severity Severity
	Check    string
	Message  string
}

func (f Finding) String() string {
	return fmt.Sprintf("%-7s %s: %s", f.Severity, f.Check, f.Message)
}

// Options are what the server would run with.
type Options struct {
	DataDir     string
	BindAddress string
	HTTPSPort   int
	Datastore   string
	// Profile is the server's resource profile ("small", "default"), or ""
	// when the server has no such flag.
	Profile string

	// Roots of the kernel's files; empty means /proc and /sys/fs/cgroup.
	ProcDir   string
	CgroupDir string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Thresholds.
const (
	MiB = 1 << 20
	GiB = 1 << 30

	// minMemory is the least memory worth running on; the etcd datastore
	// and the default profile need more.
	minMemory        = 512 * MiB
	minMemoryDefault = 1 * GiB
	etcdExtraMemory  = 256 * MiB

	minFreeBlocker = 100 * MiB
	minFreeWarning = 1 * GiB

	minNoFile  = 65536
	minInotify = 128
)

// earliestSaneTime: a clock before it is wrong (a board without a real-time
// clock that booted without network time), and the certificates minted
// with it would not be valid once the clock is set.
var earliestSaneTime = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// Run gathers the facts and evaluates them.
func Run(o Options) []Finding {
	return Evaluate(o, Gather(o))
}

// Report writes one finding per line and a summary; it returns whether
// there was a blocker.
func Report(w io.Writer, findings []Finding) (blocked bool) {
	var warnings, blockers int
	for _, f := range findings {
		fmt.Fprintln(w, f)
		switch f.Severity {
		case Warning:
			warnings++
		case Blocker:
			blockers++
		}
	}
	fmt.Fprintf(w, "%d checks, %d warnings, %d blockers\n", len(findings), warnings, blockers)
	return blockers > 0
}
