// Command nodes runs N simulated nodes against a running control plane and
// measures what they cost it. With -sim hollow (the default) each node is a
// kubemark HollowKubelet (the upstream kubelet's code on its fake CRI
// runtime) in its own process (this binary run again with -hollow: two
// kubelets in one Go process panic on duplicate metrics registration). A
// node joins as `edgeplane agent` does: CA discovery with the node token
// (pkg/agent), then the kubelet's own TLS bootstrap. It heartbeats with the
// kubelet's default Lease and status settings and runs the pods scheduled to
// it as fake containers. With -sim lite each node is a liteNode, the same
// join and the same API requests without kubelet code, up to 1000 of them as
// goroutines of one process (this binary run again with -lite), for N in the
// thousands; -sim auto runs hollow nodes up to N = 100 and lite ones above.
//
// The driver starts the nodes, waits for them to be Ready, creates a
// Deployment of N x -pods-per-node pods and times them to Running, then
// measures the control plane's processes (-pids) over -duration: RSS, CPU,
// bytes written, datastore size (-datastore-dir), Lease update latency as the
// nodes saw it with the renewals that failed, timed out or were never
// attempted, the latency of listing every pod (what `kubectl get pods -A`
// asks) with its errors, and every NotReady of a node while its process
// lives, with its duration. With -churn, that many pods a minute are deleted
// (and recreated by the Deployment), with the rate achieved and the deletes
// and creates that failed. With -kill, one node is killed at the end and the
// time until the node lifecycle controller marks it NotReady is measured.
//
//	nodes -data-dir <edgeplane data dir> -pids PID -n 10 -pods-per-node 10 -duration 5m
//	nodes -data-dir <edgeplane data dir> -pids PID -sim lite -n 2000 -duration 5m
//	nodes -table results.jsonl   (the -out lines of several runs as one table)
//	nodes -server https://127.0.0.1:6443 -token K10... -kubeconfig admin.kubeconfig -pids P1,P2 ...
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/klog/v2"

	// The hollow kubelets report go.mod's Kubernetes version, not v0.0.0.
	_ "github.com/edgeplane/edgeplane/internal/kubeversion"
	"github.com/edgeplane/edgeplane/pkg/nodetoken"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == hollowFlag {
		os.Exit(hollowMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == liteFlag {
		os.Exit(liteMain(os.Args[2:]))
	}
	if len(os.Args) == 3 && os.Args[1] == "-table" {
		if err := printTable(os.Stdout, os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "nodes:", err)
			os.Exit(1)
		}
		return
	}
	o, err := parseOptions(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodes:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	res, err := runDriver(ctx, o)
	if res != nil {
		res.print(os.Stdout)
		if o.out != "" {
			if werr := res.appendJSON(o.out); werr != nil {
				fmt.Fprintln(os.Stderr, "nodes:", werr)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "nodes:", err)
		os.Exit(1)
	}
}

// hollowMain is one hollow node: `nodes -hollow -dir D -server URL -name N`
// with the node token in $EDGEPLANE_HOLLOW_TOKEN.
func hollowMain(args []string) int {
	fs := flag.NewFlagSet("hollow", flag.ContinueOnError)
	var c hollowConfig
	fs.StringVar(&c.Dir, "dir", "", "the node's directory")
	fs.StringVar(&c.Server, "server", "", "the server's URL")
	fs.StringVar(&c.Name, "name", "", "the node's name")
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	c.Token = os.Getenv(tokenEnv)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := runHollow(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

type driverOptions struct {
	dataDir, server, token, kubeconfig string
	pids                               []int
	datastoreDir                       string
	n, podsPerNode, churn              int
	// listBurst is the clients of a LIST burst in the window (burst.go).
	listBurst                   int
	duration, settle            time.Duration
	workDir, prefix, label, out string
	kill                        bool
	startEvery                  time.Duration
	// sim is the simulator that runs the nodes (hollow or lite, auto
	// resolved); litePerProc the lite nodes per process.
	sim         string
	litePerProc int
}

func parseOptions(args []string) (*driverOptions, error) {
	fs := flag.NewFlagSet("nodes", flag.ContinueOnError)
	o := &driverOptions{}
	var pids string
	fs.StringVar(&o.dataDir, "data-dir", "", "an edgeplane server's data dir: its node-token, admin.kubeconfig and server URL")
	fs.StringVar(&o.server, "server", "", "the server's URL (default: from the admin kubeconfig)")
	fs.StringVar(&o.token, "token", "", "node token, K10<ca-hash>::<id>.<secret> (default: <data-dir>/node-token)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "admin kubeconfig (default: <data-dir>/admin.kubeconfig)")
	fs.StringVar(&pids, "pids", "", "comma-separated process ids of the control plane, measured together")
	fs.StringVar(&o.datastoreDir, "datastore-dir", "", "directory whose size is the datastore's")
	fs.IntVar(&o.n, "n", 5, "simulated nodes")
	fs.IntVar(&o.podsPerNode, "pods-per-node", 10, "pods per node")
	fs.IntVar(&o.churn, "churn", 0, "pods deleted (and recreated by their Deployment) per minute during the window")
	fs.IntVar(&o.listBurst, "list-burst", 0, "clients that list all pods, unpaged, for 30 s in the middle of the window (as an ordinary user: API Priority and Fairness applies); the Lease PUTs in it are reported apart")
	fs.DurationVar(&o.duration, "duration", 5*time.Minute, "measurement window")
	fs.DurationVar(&o.settle, "settle", time.Minute, "wait after the pods run, before the window")
	fs.StringVar(&o.workDir, "work-dir", "", "the nodes' directories (default: a new one under /tmp, removed at the end)")
	fs.StringVar(&o.prefix, "prefix", "", "node name prefix (default: the simulator's name, hollow or lite)")
	fs.StringVar(&o.label, "label", "", "the configuration's name in the table")
	fs.StringVar(&o.out, "out", "", "append the result as one JSON line to this file")
	fs.BoolVar(&o.kill, "kill", false, "at the end, kill one node and time its NotReady")
	fs.DurationVar(&o.startEvery, "start-every", 200*time.Millisecond, "pause between node starts (lite nodes: 50ms unless given)")
	fs.StringVar(&o.sim, "sim", simHollow, "node simulator: hollow (kubemark kubelets, a process each), lite (no kubelet code, many per process), or auto (hollow up to 100 nodes, lite above)")
	fs.IntVar(&o.litePerProc, "lite-per-process", 1000, "lite nodes per process")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	startEveryGiven := false
	fs.Visit(func(f *flag.Flag) { startEveryGiven = startEveryGiven || f.Name == "start-every" })
	for _, p := range strings.Split(pids, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		pid, err := strconv.Atoi(p)
		if err != nil || pid <= 0 {
			return nil, fmt.Errorf("-pids: %q is not a process id", p)
		}
		o.pids = append(o.pids, pid)
	}
	if o.dataDir != "" {
		if o.kubeconfig == "" {
			o.kubeconfig = filepath.Join(o.dataDir, "admin.kubeconfig")
		}
		if o.token == "" {
			t, ok, err := nodetoken.ReadFile(o.dataDir)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, fmt.Errorf("no %s in %s: is the server up?", nodetoken.FileName, o.dataDir)
			}
			o.token = t.String()
		}
	}
	var errs []string
	if o.kubeconfig == "" || o.token == "" {
		errs = append(errs, "give -data-dir, or -kubeconfig and -token")
	}
	sim, err := resolveSim(o.sim, o.n)
	if err != nil {
		errs = append(errs, err.Error())
	}
	o.sim = sim
	switch {
	case o.n < 1:
		errs = append(errs, fmt.Sprintf("-n %d: want at least 1", o.n))
	case sim == simHollow && o.n > maxHollowNodes:
		errs = append(errs, fmt.Sprintf("-n %d: want 1..%d hollow nodes (one process of ~25 MB each); -sim lite goes to %d", o.n, maxHollowNodes, maxLiteNodes))
	case sim == simLite && o.n > maxLiteNodes:
		errs = append(errs, fmt.Sprintf("-n %d: want 1..%d lite nodes", o.n, maxLiteNodes))
	}
	if o.litePerProc < 1 {
		errs = append(errs, "-lite-per-process must be at least 1")
	}
	if o.prefix == "" {
		o.prefix = sim
	}
	if sim == simLite && !startEveryGiven {
		o.startEvery = 50 * time.Millisecond
	}
	if o.podsPerNode < 0 || o.podsPerNode > 100 {
		errs = append(errs, fmt.Sprintf("-pods-per-node %d: want 0..100 (the hollow kubelet's max-pods is 110)", o.podsPerNode))
	}
	if o.churn < 0 {
		errs = append(errs, "-churn must not be negative")
	}
	if o.listBurst < 0 || o.listBurst > 64 {
		errs = append(errs, fmt.Sprintf("-list-burst %d: want 0..64 clients", o.listBurst))
	}
	if o.duration < 10*time.Second || o.duration > 24*time.Hour {
		errs = append(errs, fmt.Sprintf("-duration %s: want 10s..24h", o.duration))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return o, nil
}
