// Command load drives an edgeplane (or any Kubernetes API server) from a
// second process: N concurrent clients mix create/update/get/list/delete of
// ConfigMaps while W watches check that every acknowledged write reaches every
// watch that should see it. It prints a table and a JSON summary and exits
// non-zero when an assertion fails: an error other than 429, a write whose
// event did not reach a watch within --watch-bound, or (with --server-pid and
// --rss-budget-mib) a server RSS over the budget. See docs/reliability/load.md.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgeplane/edgeplane/internal/procfs"
)

// ops are the operations a client can be told to mix, in report order.
var ops = []string{"create", "update", "get", "list", "delete"}

type options struct {
	kubeconfig   string
	clients      int
	watches      int
	duration     time.Duration
	mix          map[string]int
	namespace    string
	groups       int
	nsWatchEvery int
	objects      int
	valueBytes   int
	watchBound   time.Duration
	watchTimeout time.Duration
	protobuf     bool
	jsonPath     string
	serverPID    int
	rssBudgetMiB int
	cleanup      bool
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	var mix string
	fs.StringVar(&o.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the server under load")
	fs.IntVar(&o.clients, "clients", 16, "concurrent writer/reader clients, each on its own connection")
	fs.IntVar(&o.watches, "watches", 100, "open watches, each on its own connection")
	fs.DurationVar(&o.duration, "duration", 30*time.Second, "how long the clients run")
	fs.StringVar(&mix, "mix", "create=25,update=30,get=30,list=10,delete=5", "operation weights (create, update, get, list, delete)")
	fs.StringVar(&o.namespace, "namespace", "load", "namespace the clients write to (created if missing)")
	fs.IntVar(&o.groups, "groups", 10, "label groups: client i writes group i%groups, watch j selects group j%groups")
	fs.IntVar(&o.nsWatchEvery, "namespace-watch-every", 25, "every k-th watch (j%k==0) watches the whole namespace instead of one group; 0: none")
	fs.IntVar(&o.objects, "objects", 100, "objects a client keeps at most; a create beyond that deletes its oldest object instead")
	fs.IntVar(&o.valueBytes, "value-bytes", 256, "size of each ConfigMap's value")
	fs.DurationVar(&o.watchBound, "watch-bound", 15*time.Second, "an acknowledged write's event must reach each watch within this")
	fs.DurationVar(&o.watchTimeout, "watch-timeout", 20*time.Second, "server-side watch timeout (randomised +-50%) so watches are re-established from their last resourceVersion during the run; 0: server default")
	fs.BoolVar(&o.protobuf, "protobuf", true, "use protobuf for requests and watches")
	fs.StringVar(&o.jsonPath, "json", "", "also write the JSON summary to this file")
	fs.IntVar(&o.serverPID, "server-pid", 0, "pid of the server on this host: sample its RSS and CPU")
	fs.IntVar(&o.rssBudgetMiB, "rss-budget-mib", 0, "fail when the server's RSS (needs --server-pid) exceeds this; 0: no check")
	fs.BoolVar(&o.cleanup, "cleanup", true, "delete this run's ConfigMaps at the end")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var err error
	if o.mix, err = parseMix(mix); err != nil {
		return nil, err
	}
	switch {
	case o.kubeconfig == "":
		return nil, errors.New("--kubeconfig is required")
	case o.clients < 1 || o.watches < 0 || o.groups < 1 || o.objects < 1:
		return nil, errors.New("--clients, --groups and --objects must be positive, --watches not negative")
	case o.duration <= 0 || o.watchBound <= 0:
		return nil, errors.New("--duration and --watch-bound must be positive")
	}
	return o, nil
}

// parseMix reads "create=25,update=30,..." into weights.
func parseMix(s string) (map[string]int, error) {
	m := map[string]int{}
	total := 0
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		if !ok {
			return nil, fmt.Errorf("--mix: %q is not op=weight", part)
		}
		known := false
		for _, op := range ops {
			known = known || op == name
		}
		if !known {
			return nil, fmt.Errorf("--mix: unknown operation %q (want one of %s)", name, strings.Join(ops, ", "))
		}
		w, err := strconv.Atoi(val)
		if err != nil || w < 0 {
			return nil, fmt.Errorf("--mix: weight of %s must be a non-negative integer", name)
		}
		m[name] += w
		total += w
	}
	if total == 0 {
		return nil, errors.New("--mix: all weights are zero")
	}
	return m, nil
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(2)
	}
	fmt.Print(sum.table())
	js, _ := json.Marshal(sum)
	fmt.Printf("JSON %s\n", js)
	if o.jsonPath != "" {
		if err := os.WriteFile(o.jsonPath, append(js, '\n'), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "load:", err)
			os.Exit(2)
		}
	}
	if !sum.OK {
		fmt.Fprintf(os.Stderr, "load: FAILED: %s\n", strings.Join(sum.Failures, "; "))
		os.Exit(1)
	}
}

// run sets up the namespace and watches, runs the clients for the duration,
// waits for the watches to catch up and summarises.
func run(ctx context.Context, o *options) (*summary, error) {
	base, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return nil, err
	}
	admin, err := newClientset(base, o.protobuf, nil)
	if err != nil {
		return nil, err
	}
	setupCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err = admin.CoreV1().Namespaces().Create(setupCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("create namespace %s: %w", o.namespace, err)
	}
	runID := randomHex(4)
	sampler := startSampler(o.serverPID)

	// Watches first: every write must be seen by the watches open before it.
	ws := newWatchSet(o, runID)
	watchCtx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	if err := ws.start(watchCtx, base); err != nil {
		return nil, err
	}
	stopSweeper := ws.sweepEvery(watchCtx, time.Second)

	counts := &transportCounts{}
	clients := make([]*client, o.clients)
	for i := range clients {
		cs, err := newClientset(base, o.protobuf, counts)
		if err != nil {
			return nil, err
		}
		clients[i] = newClient(i, cs, o, runID, ws)
	}
	start := time.Now()
	load1Start := procfs.LoadAvg()
	end := start.Add(o.duration)
	done := make(chan struct{})
	for _, c := range clients {
		go func() {
			c.run(ctx, end)
			done <- struct{}{}
		}()
	}
	for range clients {
		<-done
	}
	elapsed := time.Since(start)
	load1End := procfs.LoadAvg()

	// Let every watch deliver what was acknowledged, then judge the rest.
	ws.drain(ctx, o.watchBound)
	stopSweeper()
	stopWatches()
	ws.wait()
	srv := sampler.stop()

	sum := summarize(o, runID, clients, ws, counts, elapsed, srv)
	sum.Load1Start, sum.Load1End = load1Start, load1End
	if o.cleanup {
		cctx, ccancel := context.WithTimeout(context.Background(), time.Minute)
		defer ccancel()
		err := admin.CoreV1().ConfigMaps(o.namespace).DeleteCollection(cctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: runLabel + "=" + runID})
		if err != nil {
			fmt.Fprintf(os.Stderr, "load: cleanup: %v\n", err)
		}
	}
	return sum, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
