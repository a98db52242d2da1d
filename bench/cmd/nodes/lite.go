package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/edgeplane/edgeplane/pkg/nodetoken"
)

// liteFlag makes the binary a process of lite nodes: `nodes -lite -dir D
// -server URL -prefix P -first F -count K` with the node token in
// $EDGEPLANE_HOLLOW_TOKEN runs nodes P-F..P-(F+K-1) as goroutines (see
// liteNode) and talks to the driver in lines (see liteFleet).
const liteFlag = "-lite"

// liteConfig is one process of lite nodes.
type liteConfig struct {
	Dir, Server, Token, Prefix string
	First, Count               int
	// StartEvery paces the nodes' joins; at most Parallel join at once.
	StartEvery time.Duration
	Parallel   int
	// HeapProfile, if set, is where the process writes a heap profile as
	// it stops (before stopping its nodes).
	HeapProfile string
}

func liteMain(args []string) int {
	fs := flag.NewFlagSet("lite", flag.ContinueOnError)
	var c liteConfig
	fs.StringVar(&c.Dir, "dir", "", "the process's directory (lease latencies)")
	fs.StringVar(&c.Server, "server", "", "the server's URL")
	fs.StringVar(&c.Prefix, "prefix", "lite", "node name prefix")
	fs.IntVar(&c.First, "first", 0, "index of the first node")
	fs.IntVar(&c.Count, "count", 1, "nodes in this process")
	fs.DurationVar(&c.StartEvery, "start-every", 50*time.Millisecond, "pause between node starts")
	fs.IntVar(&c.Parallel, "parallel", 8, "joins in flight at most")
	fs.StringVar(&c.HeapProfile, "heap-profile", "", "write a heap profile here at the end (to see what a node costs)")
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	c.Token = os.Getenv(tokenEnv)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := runLite(ctx, c, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// liteRunner is what the nodes of one process share: the cluster CA from
// one discovery, the bootstrap client, the lease latency record, the
// request counters and the driver's event stream.
type liteRunner struct {
	cfg   liteConfig
	caPEM []byte
	boot  kubernetes.Interface // bootstrap token: the nodes' CSRs
	// bootHTTP is boot's connection, closed once every node has joined (an
	// agent does not keep its bootstrap connection either).
	bootHTTP *http.Client
	lat      *leaseLatency
	stats    liteStats
	nodes    []*liteNode

	outMu sync.Mutex
	out   io.Writer
}

// runLite runs the nodes until ctx ends, then stops them and writes the
// lease latencies one last time. It blocks.
func runLite(ctx context.Context, c liteConfig, cmds io.Reader, events io.Writer) error {
	logger := klog.FromContext(ctx)
	if c.Dir == "" || c.Server == "" || c.Token == "" || c.Count < 1 || c.First < 0 {
		return errors.New("lite nodes: -dir, -server, -count and the token are all required")
	}
	tok, err := nodetoken.Parse(c.Token)
	if err != nil {
		return fmt.Errorf("lite nodes: token: %w", err)
	}
	// All the nodes trust the same CA: one discovery for the process.
	caPEM, err := discoverCA(ctx, c.Server, tok)
	if err != nil {
		return err
	}
	bootCfg := bootstrapConfig(c.Server, caPEM, tok)
	bootHTTP, err := rest.HTTPClientFor(bootCfg)
	if err != nil {
		return err
	}
	boot, err := kubernetes.NewForConfigAndClient(bootCfg, bootHTTP)
	if err != nil {
		return err
	}
	r := &liteRunner{cfg: c, caPEM: caPEM, boot: boot, bootHTTP: bootHTTP, lat: &leaseLatency{}, out: events}
	r.nodes = make([]*liteNode, c.Count)
	for j := range r.nodes {
		r.nodes[j] = newLiteNode(ctx, r, c.First+j)
	}
	go r.commands(cmds)
	go r.startAll(ctx)

	latFile := filepath.Join(c.Dir, leaseLatencyFile)
	flush := time.NewTicker(30 * time.Second)
	defer flush.Stop()
	report := time.NewTicker(time.Minute)
	defer report.Stop()
	last := r.stats.snapshot()
	for {
		select {
		case <-ctx.Done():
			if c.HeapProfile != "" {
				if err := writeHeapProfile(c.HeapProfile); err != nil {
					logger.Error(err, "Writing the heap profile")
				}
			}
			for _, n := range r.nodes {
				n.kill()
			}
			return r.lat.appendTo(latFile)
		case <-flush.C:
			if err := r.lat.appendTo(latFile); err != nil {
				logger.Error(err, "Writing lease latencies")
			}
		case <-report.C:
			now := r.stats.snapshot()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			logger.Info("Lite nodes", "joined", r.stats.joined.Load(), "failed", r.stats.failed.Load(),
				"requestsLastMinute", now.minus(last).String(), "goroutines", runtime.NumGoroutine(),
				"heapInuseMiB", m.HeapInuse>>20, "stackInuseMiB", m.StackInuse>>20)
			last = now
		}
	}
}

func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// bootstrapConfig is the nodes' client with the bootstrap token, shared by
// the nodes of a process (one connection for their joins).
func bootstrapConfig(server string, caPEM []byte, tok nodetoken.Token) *rest.Config {
	return &rest.Config{
		Host:            server,
		TLSClientConfig: rest.TLSClientConfig{CAData: caPEM},
		BearerToken:     tok.BootstrapToken(),
		UserAgent:       liteUserAgent + " (bootstrap)",
		// The joins are paced by StartEvery and Parallel, not by a shared
		// client-side limit.
		QPS: -1,
	}
}

// emit writes one event line for the driver.
func (r *liteRunner) emit(format string, args ...any) {
	r.outMu.Lock()
	defer r.outMu.Unlock()
	fmt.Fprintf(r.out, format+"\n", args...)
}

// commands reads the driver's "kill <i>" lines until its end.
func (r *liteRunner) commands(in io.Reader) {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		word, arg, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		i, err := strconv.Atoi(arg)
		if word != "kill" || err != nil || i < r.cfg.First || i >= r.cfg.First+len(r.nodes) {
			klog.Background().Info("Ignoring a command", "line", sc.Text())
			continue
		}
		r.nodes[i-r.cfg.First].kill()
		r.emit("killed %d", i)
	}
}

// startAll joins the nodes, one every StartEvery and at most Parallel at
// once. A node's goroutine ends once it has registered and started its
// loops.
func (r *liteRunner) startAll(ctx context.Context) {
	sem := make(chan struct{}, max(r.cfg.Parallel, 1))
	defer func() {
		// The last joins done, the bootstrap connection goes.
		for range cap(sem) {
			select {
			case <-ctx.Done():
				return
			case sem <- struct{}{}:
			}
		}
		if r.bootHTTP != nil {
			r.bootHTTP.CloseIdleConnections()
		}
	}()
	for j, n := range r.nodes {
		if j > 0 && r.cfg.StartEvery > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(r.cfg.StartEvery):
			}
		}
		select {
		case <-ctx.Done():
			return
		case sem <- struct{}{}:
		}
		go func() {
			err := n.start()
			<-sem
			switch {
			case err == nil:
				r.stats.joined.Add(1)
				r.emit("ready %d", n.index)
			case n.ctx.Err() == nil:
				r.stats.failed.Add(1)
				klog.Background().Error(err, "Lite node failed", "node", n.name)
				r.emit("failed %d %s", n.index, strings.ReplaceAll(err.Error(), "\n", " "))
			}
		}()
	}
}

// Request kinds counted by liteStats.
const (
	reqLeaseGet = iota
	reqLeaseCreate
	reqLeaseUpdate
	reqNodeCreate
	reqNodeGet
	reqNodeStatusPatch
	reqPodGet
	reqPodStatusPatch
	reqPodDelete
	reqList
	reqWatch
	reqOther
	reqKinds
)

var reqKindNames = [reqKinds]string{"leaseGET", "leasePOST", "leasePUT", "nodePOST", "nodeGET", "nodeStatusPATCH",
	"podGET", "podStatusPATCH", "podDELETE", "LIST", "WATCH", "other"}

// liteStats counts the nodes' requests by kind, for the process's log: the
// cadence of what the nodes send, checkable against the kubelet's.
type liteStats struct {
	joined, failed atomic.Int64
	req            [reqKinds]atomic.Int64
}

type reqCounts [reqKinds]int64

func (s *liteStats) snapshot() reqCounts {
	var c reqCounts
	for k := range c {
		c[k] = s.req[k].Load()
	}
	return c
}

func (c reqCounts) minus(o reqCounts) reqCounts {
	for k := range c {
		c[k] -= o[k]
	}
	return c
}

func (c reqCounts) String() string {
	var b strings.Builder
	for k, v := range c {
		if v != 0 {
			fmt.Fprintf(&b, "%s=%d ", reqKindNames[k], v)
		}
	}
	return strings.TrimSpace(b.String())
}

// requestKind classifies a request of a lite node.
func requestKind(r *http.Request) int {
	p := r.URL.Path
	if strings.Contains(r.URL.RawQuery, "watch=true") {
		return reqWatch
	}
	switch {
	case strings.Contains(p, "/leases/"):
		switch r.Method {
		case http.MethodGet:
			return reqLeaseGet
		case http.MethodPut:
			return reqLeaseUpdate
		}
	case strings.HasSuffix(p, "/leases") && r.Method == http.MethodPost:
		return reqLeaseCreate
	case strings.HasSuffix(p, "/nodes") && r.Method == http.MethodPost:
		return reqNodeCreate
	case strings.Contains(p, "/nodes/"):
		if strings.HasSuffix(p, "/status") && r.Method == http.MethodPatch {
			return reqNodeStatusPatch
		}
		if r.Method == http.MethodGet {
			return reqNodeGet
		}
	case strings.Contains(p, "/pods/"):
		switch {
		case strings.HasSuffix(p, "/status") && r.Method == http.MethodPatch:
			return reqPodStatusPatch
		case r.Method == http.MethodGet:
			return reqPodGet
		case r.Method == http.MethodDelete:
			return reqPodDelete
		}
	}
	if r.Method == http.MethodGet {
		return reqList
	}
	return reqOther
}

// countingTransport counts every request of a node by kind.
type countingTransport struct {
	next  http.RoundTripper
	stats *liteStats
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.stats.req[requestKind(r)].Add(1)
	return c.next.RoundTrip(r)
}

// appendTo appends the samples to path and forgets them: a process of many
// nodes keeps only the samples since its last write.
func (l *leaseLatency) appendTo(path string) error {
	l.mu.Lock()
	samples := l.samples
	l.samples = nil
	l.mu.Unlock()
	var b strings.Builder
	for _, s := range samples {
		b.WriteString(s.line())
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(b.String()); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// discoverCA is the cluster CA through the node token (pkg/nodetoken),
// retried while the server cannot be reached, for at most 3 minutes.
func discoverCA(ctx context.Context, server string, tok nodetoken.Token) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		ca, err := nodetoken.Discover(ctx, server, tok)
		if err == nil {
			return ca, nil
		}
		if !errors.Is(err, nodetoken.ErrUnreachable) {
			return nil, fmt.Errorf("lite nodes: CA discovery: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("lite nodes: CA discovery: %w", err)
		case <-time.After(2 * time.Second):
		}
	}
}
