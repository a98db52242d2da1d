package e2e

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// How the package's tests share the machine. Most tests start their own
// servers on port 0 in their own t.TempDir() and wait on them: those run
// side by side (parallel). The node tests (a kubelet, containerd, CNI,
// iptables: parallelNode) use what a host has once, the kubelet's pod
// cgroups above all (a kubelet with per-QoS cgroups kills the processes of
// pod cgroups it does not know, see startTwoNodeCluster) and runc's state
// directory: one runs at a time, beside the others. A few tests stay
// serial, and so run alone before all the parallel ones (Go's testing runs
// serial tests first): TestLoad and TestHostile, whose bounds (watch
// delivery, request latency, connections closed in time) are about the
// server under their own load only, and TestWhatUsersSee, whose -v 0
// start-up log is counted line by line (the componentstatus ports it asks
// about are its own already: it runs in a network namespace of its own).
//
// -parallel N (default defaultParallel) is how many tests run at once: one
// node test and N-1 others (N=1: one test at a time). The package keeps the
// count itself rather than through the testing package's own limit, which
// counts a test waiting for the node lock as running, and starts the
// longest tests first (see parallel's typical); TestMain lifts the testing
// package's limit (setUpParallel).

// defaultParallel is N without -parallel. On 2 cores, CI's size, the tests
// spend most of their time waiting on servers: one at a time kept the
// cores about a quarter busy, four at a time (about 1.5 GB of servers)
// keep them about 80% busy on a quiet machine, and the tests' bounds hold
// there and beside other engineers' benchmarks (load average 10-15). The
// testing package's default, GOMAXPROCS, is not used.
const defaultParallel = 4

var (
	// slots are held by the running tests that are not node tests.
	slots *scheduler
	// nodeHost is held by the running node test.
	nodeHost = newScheduler(1)
	// nodeNeedsSlot: with -parallel 1 a node test holds a slot as well.
	nodeNeedsSlot bool
)

// setUpParallel reads -parallel (before m.Run) and lifts the testing
// package's limit: a test waiting here has called t.Parallel already.
func setUpParallel() {
	n := defaultParallel
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			n, _ = strconv.Atoi(f.Value.String())
		}
	})
	n = max(n, 1)
	slots = newScheduler(max(n-1, 1))
	nodeNeedsSlot = n == 1
	if err := flag.Set("test.parallel", "1000"); err != nil {
		fmt.Fprintln(os.Stderr, "set -test.parallel:", err)
		os.Exit(2)
	}
}

// parallel runs t beside the package's other parallel tests, at most N-1
// of them (plus a node test) at once. Call it first thing in the test: what
// comes before it runs while the serial tests run. typical, when given, is
// about how long t takes on a quiet 2-core machine: tests start longest
// first, so that the run does not end waiting on a long one that happened
// to start last.
func parallel(t *testing.T, typical ...time.Duration) {
	t.Helper()
	var d time.Duration
	if len(typical) > 0 {
		d = typical[0]
	}
	hold(t, d, nil, slots)
}

// parallelNode is parallel for a test that runs a node (kubelet,
// containerd, CNI): one such test at a time, beside the others. before runs
// first, without the node lock: the builds node tests share (the CoreDNS
// image: seconds to minutes) then go on beside the running node test
// instead of holding it up.
func parallelNode(t *testing.T, before ...func()) {
	t.Helper()
	if nodeNeedsSlot {
		hold(t, 0, before, nodeHost, slots)
		return
	}
	hold(t, 0, before, nodeHost)
}

// parallelSubtests runs t beside the package's other parallel tests
// without holding a slot itself: each of its subtests calls parallel.
func parallelSubtests(t *testing.T) {
	t.Helper()
	t.Parallel()
}

// hold calls t.Parallel, runs before and takes a place in each of ss in
// turn, which t keeps until it and its cleanups have ended (servers
// stopped, directories removed: the first cleanup registered runs last).
// Without before, t queues for the first before t.Parallel, while the
// serial tests run, so that when they end the scheduler chooses among all
// the top-level tests; a test with before queues once it is done with it.
func hold(t *testing.T, typical time.Duration, before []func(), ss ...*scheduler) {
	t.Helper()
	var first <-chan struct{}
	if len(before) == 0 {
		first = ss[0].queue(typical)
	}
	entered := time.Now()
	t.Parallel()
	// The pause in t.Parallel (while the serial tests run) and the wait for
	// a place count as waiting; before's builds count as the test's own.
	paused := time.Since(entered)
	for _, f := range before {
		f()
	}
	begin := time.Now()
	for i, s := range ss {
		turn := first
		if i > 0 || turn == nil {
			turn = s.queue(typical)
		}
		s.arrived()
		<-turn
		t.Cleanup(s.release)
	}
	// hack/gotest reads this line to tell a test's own time from its wait.
	if waited := paused + time.Since(begin); waited > time.Second {
		t.Logf("started after %s waiting for its turn", waited.Round(time.Second))
	}
}

// scheduler hands out a number of places to queued tests, longest typical
// duration first, then in queueing order.
type scheduler struct {
	mu      sync.Mutex
	free    int
	waiting []*waiter
	seq     int
}

type waiter struct {
	typical time.Duration
	seq     int
	turn    chan struct{}
}

func newScheduler(places int) *scheduler { return &scheduler{free: places} }

// queue adds a waiter; its channel is closed when it has a place.
func (s *scheduler) queue(typical time.Duration) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	w := &waiter{typical: typical, seq: s.seq, turn: make(chan struct{})}
	s.waiting = append(s.waiting, w)
	return w.turn
}

// arrived hands out free places: the first test to come back from
// t.Parallel starts the choosing, with every queued test to choose from.
func (s *scheduler) arrived() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.handOut()
}

func (s *scheduler) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.free++
	s.handOut()
}

func (s *scheduler) handOut() {
	slices.SortStableFunc(s.waiting, func(a, b *waiter) int {
		return cmp.Or(cmp.Compare(b.typical, a.typical), cmp.Compare(a.seq, b.seq))
	})
	for s.free > 0 && len(s.waiting) > 0 {
		close(s.waiting[0].turn)
		s.waiting = s.waiting[1:]
		s.free--
	}
}

// TestParallelOnlyThroughHelpers keeps every parallel test of the package
// on the helpers above: a bare t.Parallel() would run beside any number of
// others, as TestMain lifts the testing package's limit.
func TestParallelOnlyThroughHelpers(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	bare := regexp.MustCompile(`\.Parallel\(\)`)
	for _, f := range files {
		if f == "parallel_test.go" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			if bare.MatchString(line) && !strings.HasPrefix(strings.TrimSpace(line), "//") {
				t.Errorf("%s:%d: %s: call parallel, parallelNode or parallelSubtests (parallel_test.go) instead", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}
