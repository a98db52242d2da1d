package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	remote "k8s.io/cri-client/pkg"
	fakeremote "k8s.io/cri-client/pkg/fake"
	"k8s.io/klog/v2"
	kubeletapp "k8s.io/kubernetes/cmd/kubelet/app"
	"k8s.io/kubernetes/cmd/kubelet/app/options"
	cadvisortest "k8s.io/kubernetes/pkg/kubelet/cadvisor/testing"
	"k8s.io/kubernetes/pkg/kubelet/cm"
	"k8s.io/kubernetes/pkg/kubemark"

	"github.com/edgeplane/edgeplane/pkg/node"
	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
	"github.com/edgeplane/edgeplane/pkg/nodetoken"
)

// hollowConfig is one simulated node: where it keeps its files, the server
// it joins and the node token it joins with.
type hollowConfig struct {
	Dir    string // the node's own directory (credentials, kubelet root, CRI socket)
	Server string // https://127.0.0.1:port
	Token  string // K10<ca-hash>::<id>.<secret>
	Name   string
}

// leaseLatencyFile is where a hollow node writes its Lease updates (one per
// line: when it ended, its duration in microseconds, how it ended, and the
// node's name) for the driver to read.
const leaseLatencyFile = "lease-latency.txt"

// maxLatencySamples bounds the samples a hollow node keeps: an hour of
// renewals every 10 s is 360.
const maxLatencySamples = 20000

// runHollow joins the cluster as a real agent does (pkg/node's TokenJoin:
// CA discovery with the node token, the node's client certificate for its
// identity key through a CSR the server approves, the cluster's node
// settings), and runs a kubemark HollowKubelet
// on the kubelet's fake CRI runtime until ctx ends. It blocks.
func runHollow(ctx context.Context, c hollowConfig) error {
	logger := klog.FromContext(ctx)
	if c.Dir == "" || c.Server == "" || c.Token == "" || c.Name == "" {
		return errors.New("hollow node: -dir, -server, -token and -name are all required")
	}
	tok, err := nodetoken.Parse(c.Token)
	if err != nil {
		return fmt.Errorf("hollow node: -token: %w", err)
	}
	paths := node.PathsIn(c.Dir)
	nc, err := join(ctx, c, tok, paths)
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", paths.Kubeconfig)
	if err != nil {
		return fmt.Errorf("hollow node %s: %w", c.Name, err)
	}
	// kubemark's client settings (cmd/kubemark/app): protobuf, 10 QPS.
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.QPS, cfg.Burst = 10, 20
	cfg.UserAgent = "hollow-kubelet"
	client, err := clientset.NewForConfig(cfg)
	if err != nil {
		return err
	}

	f, kc := kubemark.GetHollowKubeletConfig(&kubemark.HollowKubeletOptions{
		NodeName: c.Name, MaxPods: 110, NodeLabels: map[string]string{"edgeplane.io/hollow": "true"},
	})
	// kubemark makes the kubelet's root dir in /tmp whatever TMPDIR says
	// (k8s.io/kubernetes v1.37.2 test/utils.MakeTempDirOrDie) and never
	// removes it: record it, so that the fleet removes it with the node's
	// own dir also when the node is killed, and remove it on a clean exit.
	if err := os.WriteFile(filepath.Join(c.Dir, rootDirFile), []byte(f.RootDirectory), 0o600); err != nil {
		return err
	}
	defer os.RemoveAll(f.RootDirectory)
	// No kubelet API: nothing of the benchmark calls it, and N kubelets
	// would need N ports. The node's Lease and status go out as usual.
	kc.EnableServer = false
	kc.ReadOnlyPort = 0
	kc.HealthzPort = 0
	kc.Address = "127.0.0.1"
	// The host's iptables belong to the host (and to the other tests on it):
	// a hollow node has no pod network, so it sets up no chains there.
	kc.MakeIPTablesUtilChains = false
	// The cluster's heartbeat, as an agent's kubelet takes it (the server's
	// --node-heartbeat; upstream's 40 s Lease unless it says otherwise).
	kc.NodeLeaseDurationSeconds = leaseSeconds(nc, kc.NodeLeaseDurationSeconds)

	// The heartbeat client as the kubelet builds it: no client-side rate
	// limit, a timeout of the lease duration at most.
	hb := rest.CopyConfig(cfg)
	hb.Timeout = min(kc.NodeStatusUpdateFrequency.Duration, time.Duration(kc.NodeLeaseDurationSeconds)*time.Second)
	hb.QPS = -1
	lat := &leaseLatency{}
	hb.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &leaseTimer{next: rt, rec: lat} })
	heartbeat, err := clientset.NewForConfig(hb)
	if err != nil {
		return err
	}

	endpoint := "unix://" + filepath.Join(c.Dir, "cri.sock")
	if len(endpoint)-len("unix://") > 107 {
		return fmt.Errorf("hollow node %s: socket path %s is longer than Linux's 107 bytes: use a shorter -dir", c.Name, endpoint)
	}
	fake := fakeremote.NewFakeRemoteRuntime()
	if err := fake.Start(endpoint); err != nil {
		return fmt.Errorf("hollow node %s: fake CRI runtime: %w", c.Name, err)
	}
	defer fake.Stop()
	runtime, err := remote.NewRemoteRuntimeServiceBuilder().WithEndpoint(endpoint).WithConnectionTimeout(15 * time.Second).Build(ctx)
	if err != nil {
		return fmt.Errorf("hollow node %s: CRI client: %w", c.Name, err)
	}

	hk := kubemark.NewHollowKubelet(f, kc, client, heartbeat,
		&cadvisortest.Fake{NodeName: c.Name}, fake.ImageService, runtime, cm.NewStubContainerManager())
	if err := kubeletapp.RunKubelet(ctx, &options.KubeletServer{KubeletFlags: *hk.KubeletFlags, KubeletConfiguration: *hk.KubeletConfiguration}, hk.KubeletDeps); err != nil {
		return fmt.Errorf("hollow node %s: kubelet: %w", c.Name, err)
	}
	logger.Info("Hollow kubelet running", "node", c.Name, "server", c.Server)

	out := filepath.Join(c.Dir, leaseLatencyFile)
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return lat.write(out)
		case <-tick.C:
			if err := lat.write(out); err != nil {
				logger.Error(err, "Writing lease latencies")
			}
		}
	}
}

// join runs the agent's join, and starts it again (at most 5 times in 4
// minutes, with backoff) when it fails, as systemd restarts an agent whose
// join failed: a join ends at the first request that is refused or times
// out, and N nodes joining at once on a loaded host meet timeouts (seen
// with 50 nodes against embedded etcd at load 17-23).
func join(ctx context.Context, c hollowConfig, tok nodetoken.Token, paths node.Paths) (nodeconfig.Config, error) {
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	var err error
	delay := 2 * time.Second
	for attempt := 1; attempt <= 5; attempt++ {
		var cluster node.Cluster
		if cluster, err = (&node.TokenJoin{Server: c.Server, Token: tok}).Ensure(ctx, c.Name, paths); err == nil {
			return cluster.Config, nil
		}
		err = fmt.Errorf("hollow node %s: join (attempt %d): %w", c.Name, attempt, err)
		klog.FromContext(ctx).Info("Join failed, starting it again", "err", err.Error(), "after", delay)
		select {
		case <-ctx.Done():
			return nodeconfig.Config{}, err
		case <-time.After(delay):
		}
		delay *= 2
	}
	return nodeconfig.Config{}, err
}

// leaseTimer times the heartbeat client's Lease updates and records each
// one's outcome: a renewal that failed (an error, or a status other than
// 2xx) or timed out (the client's or the request's deadline, or the
// server's 504) is counted, not dropped.
type leaseTimer struct {
	next http.RoundTripper
	rec  *leaseLatency
}

func (l *leaseTimer) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodPut || !strings.Contains(r.URL.Path, "/leases/") {
		return l.next.RoundTrip(r)
	}
	start := time.Now()
	resp, err := l.next.RoundTrip(r)
	l.rec.add(path.Base(r.URL.Path), time.Since(start), renewalOutcome(r, resp, err))
	return resp, err
}

// renewalOutcome classifies one Lease PUT. An http.Client's Timeout both
// cancels the request and puts a deadline on its context, and the cancel
// can end the round trip a moment before the context reports it: a
// request that failed at or past its deadline timed out.
func renewalOutcome(r *http.Request, resp *http.Response, err error) outcome {
	var ne net.Error
	deadline, hasDeadline := r.Context().Deadline()
	switch {
	case err != nil && (errors.Is(err, context.DeadlineExceeded) || (hasDeadline && !time.Now().Before(deadline)) ||
		(errors.As(err, &ne) && ne.Timeout())):
		return renewTimedOut
	case err != nil:
		return renewFailed
	case resp.StatusCode == http.StatusGatewayTimeout:
		return renewTimedOut
	case resp.StatusCode >= 300:
		return renewFailed
	}
	return renewOK
}

// outcome is how a Lease renewal ended.
type outcome uint8

const (
	renewOK outcome = iota
	renewFailed
	renewTimedOut
)

// outcomeWord is how the latency file marks an outcome.
var outcomeWord = map[outcome]string{renewOK: "ok", renewFailed: "failed", renewTimedOut: "timeout"}

// leaseLatency keeps the newest maxLatencySamples renewals: the time each
// ended, its duration, its outcome and the node (the Lease's name).
type leaseLatency struct {
	mu      sync.Mutex
	samples []latencySample
}

type latencySample struct {
	at      time.Time
	d       time.Duration
	outcome outcome
	node    string
}

// line is the sample's line in the latency file: "<unix s> <µs> ok|failed|
// timeout <node>".
func (s latencySample) line() string {
	return fmt.Sprintf("%d %d %s %s\n", s.at.Unix(), s.d.Microseconds(), outcomeWord[s.outcome], s.node)
}

func (l *leaseLatency) add(node string, d time.Duration, o outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.samples) >= maxLatencySamples {
		l.samples = slices.Delete(l.samples, 0, 1)
	}
	l.samples = append(l.samples, latencySample{at: time.Now(), d: d, outcome: o, node: node})
}

func (l *leaseLatency) write(path string) error {
	l.mu.Lock()
	var b strings.Builder
	for _, s := range l.samples {
		b.WriteString(s.line())
	}
	l.mu.Unlock()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
