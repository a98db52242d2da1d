package main

import (
	"fmt"
	"sort"
	"time"
)

// The node simulators the driver can run (-sim).
const (
	simHollow = "hollow" // kubemark HollowKubelets, one process each
	simLite   = "lite"   // lite nodes: the kubelet's API traffic without kubelet code, many per process
	simAuto   = "auto"   // hollow up to autoHollowMax nodes, lite above
)

// autoHollowMax is the largest N that -sim auto runs as hollow kubelets: above
// it their own CPU swamps a 2-core host (docs/PERFORMANCE.md, "Simulated nodes
// at scale").
const autoHollowMax = 100

// Node count limits per simulator: a hollow node is a process of ~25 MB,
// a lite node a few goroutines and one connection.
const (
	maxHollowNodes = 1000
	maxLiteNodes   = 5000
)

// resolveSim turns -sim into the simulator that runs n nodes.
func resolveSim(sim string, n int) (string, error) {
	switch sim {
	case simHollow, simLite:
		return sim, nil
	case simAuto:
		if n <= autoHollowMax {
			return simHollow, nil
		}
		return simLite, nil
	}
	return "", fmt.Errorf("-sim %q: want %s, %s or %s", sim, simHollow, simLite, simAuto)
}

// simulator is a set of simulated nodes as the driver sees them: started
// together, each alive until it fails or is killed.
type simulator interface {
	// name is node i's Node name.
	name(i int) string
	// startAll starts nodes 0..n-1, one every `every` (or as fast as the
	// simulator allows), and returns once all were started: they join and
	// register in the background.
	startAll(n int, every time.Duration) error
	// alive reports whether node i still runs: started, not failed, not killed.
	alive(i int) bool
	// kill stops all of node i's activity at once, as a node that loses power.
	kill(i int) error
	// stop ends every node and the simulator's processes; it may be called again.
	stop() error
	// pids are the simulator's running processes, measured apart from the
	// control plane's.
	pids() []int
	// logTail is what the simulator said about node i, for error messages.
	logTail(i int) string
	// latencyFiles are the Lease update latency files (leaseLatencyFile format).
	latencyFiles() []string
}

var (
	_ simulator = (*fleet)(nil)
	_ simulator = (*liteFleet)(nil)
)

// latencyFiles are the hollow nodes' own files, one per node.
func (f *fleet) latencyFiles() []string {
	f.mu.Lock()
	ids := make([]int, 0, len(f.procs))
	for i := range f.procs {
		ids = append(ids, i)
	}
	f.mu.Unlock()
	sort.Ints(ids)
	out := make([]string, 0, len(ids))
	for _, i := range ids {
		out = append(out, f.nodeDir(i)+"/"+leaseLatencyFile)
	}
	return out
}
