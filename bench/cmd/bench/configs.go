package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// A configuration is one way to run a control plane: its processes, binaries
// and how to reach it.
type configuration struct {
	Name      string
	About     string
	Edgeplane bool   // one edgeplane process, else upstream kube-apiserver + a datastore process
	Datastore string // edgeplane: sqlite or etcd; upstream: etcd or kine
	Bare      bool   // edgeplane without controller-manager and scheduler
	// Controllers: upstream, also kube-controller-manager and kube-scheduler
	// (kubeadm.go), which edgeplane runs in its one process.
	Controllers bool
	Profile     string // edgeplane --profile; empty: default (this benchmark's hosts are not small)
	// Node: edgeplane is its own node too (the kubelet in-process) on a
	// private containerd (node.go); no pods are scheduled to it.
	Node bool
	// Args are more edgeplane flags (the idle window's 5-minute-compaction twin).
	Args []string
}

// upstreamCompaction is kube-apiserver's default compaction interval; an
// edgeplane configuration also runs idle at it (idleCompactionTwin), so that
// idle disk writes compare at the same interval as well as at the defaults.
const upstreamCompaction = "5m"

// idleCompactionTwin is c with upstream's compaction interval, for the idle
// window only.
func idleCompactionTwin(c configuration) configuration {
	c.Name += "-compact" + upstreamCompaction
	c.Args = append(slices.Clone(c.Args), "--compaction-interval="+upstreamCompaction)
	return c
}

// configurations lists what the benchmark can run, by name.
var configurations = []configuration{
	{Name: "upstream-etcd", About: "upstream kube-apiserver + etcd, two processes as kubeadm runs them", Datastore: "etcd"},
	{Name: "upstream-kubeadm", About: "upstream kube-apiserver + etcd + kube-controller-manager + kube-scheduler, four processes: kubeadm's whole control plane", Datastore: "etcd", Controllers: true},
	{Name: "upstream-kine", About: "upstream kube-apiserver + kine on SQLite, two processes (k3s's datastore)", Datastore: "kine"},
	{Name: "edgeplane-sqlite", About: "edgeplane, SQLite: apiserver chain + controller-manager + scheduler, one process", Edgeplane: true, Datastore: "sqlite"},
	{Name: "edgeplane-etcd", About: "edgeplane, embedded etcd: apiserver chain + controller-manager + scheduler", Edgeplane: true, Datastore: "etcd"},
	{Name: "edgeplane-sqlite-small", About: "edgeplane, SQLite, the whole control plane with --profile small (512 MB-1 GB boards)", Edgeplane: true, Datastore: "sqlite", Profile: "small"},
	{Name: "edgeplane-sqlite-apiserver", About: "edgeplane, SQLite, --disable=controller-manager,scheduler (a bare apiserver, apples to apples)", Edgeplane: true, Datastore: "sqlite", Bare: true},
	{Name: "edgeplane-sqlite-node", About: "edgeplane, SQLite, --profile small, the server its own node: control plane + in-process kubelet on a private containerd, no pods", Edgeplane: true, Datastore: "sqlite", Profile: "small", Node: true},
	{Name: "edgeplane-etcd-node", About: "edgeplane, embedded etcd, --profile small, the server its own node (as edgeplane-sqlite-node)", Edgeplane: true, Datastore: "etcd", Profile: "small", Node: true},
	{Name: "edgeplane-etcd-apiserver", About: "edgeplane, embedded etcd, --disable=controller-manager,scheduler", Edgeplane: true, Datastore: "etcd", Bare: true},
}

const defaultConfigs = "upstream-etcd,upstream-kubeadm,upstream-kine,edgeplane-sqlite,edgeplane-etcd,edgeplane-sqlite-small,edgeplane-sqlite-apiserver"

func configByName(name string) (configuration, bool) {
	for _, c := range configurations {
		if c.Name == name {
			return c, true
		}
	}
	return configuration{}, false
}

// binaries are the executables a configuration runs.
func (c configuration) binaries(binDir string) []string {
	if c.Edgeplane {
		return []string{filepath.Join(binDir, "edgeplane")}
	}
	ds := "etcd"
	if c.Datastore == "kine" {
		ds = "kine"
	}
	bins := []string{filepath.Join(binDir, ds), filepath.Join(binDir, "kube-apiserver")}
	if c.Controllers {
		bins = append(bins, filepath.Join(binDir, "kube-controller-manager"), filepath.Join(binDir, "kube-scheduler"))
	}
	return bins
}

// kineParams are the SQLite settings edgeplane gives kine
// (pkg/datastore's sqliteParams), in kine's own DSN form.
const kineParams = "_journal_mode=WAL&_busy_timeout=30000&_synchronous=NORMAL&_txlock=immediate"

// advertiseAddress goes into the kubernetes Service's endpoints; neither
// server accepts a loopback address there. Nothing connects to it: it is
// TEST-NET-1 (RFC 5737), never routed.
const advertiseAddress = "192.0.2.10"

// readyLine is what edgeplane logs when every component is ready.
const readyLine = "edgeplane ready in"

// instance is one running start of a configuration.
type instance struct {
	cfg     configuration
	dataDir string
	procs   []*proc // datastore first, apiserver last
	host    string  // https://127.0.0.1:port
	started time.Time
	rest    *rest.Config // nil until the credentials exist
	node    *nodeHost    // a Node configuration's containerd and node IP
}

// prepare readies a fresh data dir for a configuration: the upstream
// configurations get kubeadm's PKI (kubeadm writes it before it starts
// anything); edgeplane creates its own at start.
func prepare(c configuration, dataDir string) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	if c.Edgeplane {
		return nil
	}
	return kubeadmPKI(filepath.Join(dataDir, "pki"))
}

// start execs the configuration's processes on dataDir. Every process is
// started at once, as the kubelet starts kubeadm's static pods.
func start(c configuration, binDir, dataDir, logDir string, env, extra []string) (*instance, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	in := &instance{cfg: c, dataDir: dataDir, host: "https://127.0.0.1:" + strconv.Itoa(port)}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	logName := func(n string) string { return filepath.Join(logDir, n+".log") }

	if c.Edgeplane {
		args := []string{"server", "--config", "", "--data-dir", dataDir, "--datastore", c.Datastore,
			"--bind-address", "127.0.0.1", "--advertise-address", advertiseAddress, "--https-port", strconv.Itoa(port)}
		if c.Node {
			h, nodeArgs, err := startNodeHost(dataDir)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", c.Name, err)
			}
			in.node = h
			args = append(args, nodeArgs...)
		} else {
			// A host with containerd running would make the server a node
			// too, which the upstream configurations are not.
			args = append(args, "--disable=kubelet")
		}
		if c.Bare {
			args = append(args, "--disable", "controller-manager,scheduler")
		}
		profile := c.Profile
		if profile == "" {
			profile = "default"
		}
		args = append(args, "--profile", profile)
		args = append(args, extra...)
		in.started = time.Now()
		p, err := startProc("edgeplane", filepath.Join(binDir, "edgeplane"), args, env, logName("edgeplane"))
		if err != nil {
			if in.node != nil {
				err = errors.Join(err, in.node.stop())
			}
			return nil, err
		}
		p.out.watchFor(readyLine)
		in.procs = []*proc{p}
		return in, nil
	}

	pki := filepath.Join(dataDir, "pki")
	pk := func(n string) string { return filepath.Join(pki, n) }
	var dsArgs []string
	var dsName, etcdServers string
	apiArgs := []string{
		"--advertise-address=" + advertiseAddress,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--allow-privileged=true",
		"--authorization-mode=Node,RBAC",
		"--client-ca-file=" + pk("ca.crt"),
		"--enable-admission-plugins=NodeRestriction",
		"--enable-bootstrap-token-auth=true",
		"--kubelet-client-certificate=" + pk("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + pk("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
		"--proxy-client-cert-file=" + pk("front-proxy-client.crt"),
		"--proxy-client-key-file=" + pk("front-proxy-client.key"),
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-client-ca-file=" + pk("front-proxy-ca.crt"),
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-username-headers=X-Remote-User",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pk("sa.pub"),
		"--service-account-signing-key-file=" + pk("sa.key"),
		"--service-cluster-ip-range=10.96.0.0/12",
		"--tls-cert-file=" + pk("apiserver.crt"),
		"--tls-private-key-file=" + pk("apiserver.key"),
	}
	switch c.Datastore {
	case "etcd":
		ports, err := freePorts(3)
		if err != nil {
			return nil, err
		}
		client := fmt.Sprintf("https://127.0.0.1:%d", ports[0])
		peer := fmt.Sprintf("https://127.0.0.1:%d", ports[1])
		dsName = "etcd"
		// kubeadm's etcd flags (cmd/kubeadm/app/phases/etcd/local.go).
		dsArgs = []string{
			"--name=bench",
			"--data-dir=" + filepath.Join(dataDir, "etcd"),
			"--listen-client-urls=" + client,
			"--advertise-client-urls=" + client,
			"--listen-peer-urls=" + peer,
			"--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=bench=" + peer,
			"--cert-file=" + pk("etcd/server.crt"),
			"--key-file=" + pk("etcd/server.key"),
			"--trusted-ca-file=" + pk("etcd/ca.crt"),
			"--client-cert-auth=true",
			"--peer-cert-file=" + pk("etcd/peer.crt"),
			"--peer-key-file=" + pk("etcd/peer.key"),
			"--peer-trusted-ca-file=" + pk("etcd/ca.crt"),
			"--peer-client-cert-auth=true",
			"--snapshot-count=10000",
			fmt.Sprintf("--listen-metrics-urls=http://127.0.0.1:%d", ports[2]),
			"--feature-gates=InitialCorruptCheck=true",
			"--watch-progress-notify-interval=5s",
		}
		etcdServers = client
		apiArgs = append(apiArgs,
			"--etcd-cafile="+pk("etcd/ca.crt"),
			"--etcd-certfile="+pk("apiserver-etcd-client.crt"),
			"--etcd-keyfile="+pk("apiserver-etcd-client.key"))
	case "kine":
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		dsName = "kine"
		db := filepath.Join(dataDir, "db")
		if err := os.MkdirAll(db, 0o700); err != nil {
			return nil, err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", p)
		dsArgs = []string{"-listen-address", addr, "-endpoint", "sqlite://" + filepath.Join(db, "state.db") + "?" + kineParams}
		etcdServers = "http://" + addr
	default:
		return nil, fmt.Errorf("unknown datastore %q", c.Datastore)
	}
	apiArgs = append(apiArgs, "--etcd-servers="+etcdServers)
	apiArgs = append(apiArgs, extra...)

	in.started = time.Now()
	ds, err := startProc(dsName, filepath.Join(binDir, dsName), dsArgs, env, logName(dsName))
	if err != nil {
		return nil, err
	}
	in.procs = append(in.procs, ds)
	api, err := startProc("kube-apiserver", filepath.Join(binDir, "kube-apiserver"), apiArgs, env, logName("kube-apiserver"))
	if err != nil {
		in.stop()
		return nil, err
	}
	in.procs = append(in.procs, api)
	in.rest = &rest.Config{Host: in.host, TLSClientConfig: rest.TLSClientConfig{
		CAFile: pk("ca.crt"), CertFile: pk("admin.crt"), KeyFile: pk("admin.key"),
	}}
	if c.Controllers {
		if err := startControllers(in, binDir, pki, env, logName); err != nil {
			in.stop()
			return nil, err
		}
	}
	return in, nil
}

// loadCredentials reads edgeplane's admin kubeconfig once it exists; the
// server URL is ours (the file may still name the previous run's port).
func (in *instance) loadCredentials() error {
	if in.rest != nil {
		return nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(in.dataDir, "admin.kubeconfig"))
	if err != nil {
		return err
	}
	cfg.Host = in.host
	in.rest = cfg
	return nil
}

// checkTimes maps each /readyz check to when it was first seen ok.
type checkTimes map[string]time.Duration

// waitReady polls /readyz?verbose until it returns 200 and returns the time
// since exec, and when each check first turned ok.
func (in *instance) waitReady(ctx context.Context, timeout time.Duration) (time.Duration, checkTimes, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	checks := checkTimes{}
	var client *http.Client
	for {
		for _, p := range in.procs {
			if p.exited() {
				return 0, checks, fmt.Errorf("%s exited (%v) before ready:\n%s", p.name, p.err, p.tail(15))
			}
		}
		if client == nil && in.loadCredentials() == nil {
			c, err := rest.HTTPClientFor(in.rest)
			if err != nil {
				return 0, checks, err
			}
			c.Timeout = 2 * time.Second
			client = c
		}
		if client != nil {
			ok, body := getReadyz(ctx, client, in.host)
			now := time.Since(in.started)
			for _, line := range strings.Split(body, "\n") {
				if name, found := strings.CutPrefix(line, "[+]"); found {
					name = strings.TrimSuffix(name, " ok")
					if _, seen := checks[name]; !seen {
						checks[name] = now
					}
				}
			}
			if ok {
				client.CloseIdleConnections()
				return now, checks, nil
			}
		}
		select {
		case <-ctx.Done():
			return 0, checks, fmt.Errorf("not ready after %s", timeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func getReadyz(ctx context.Context, c *http.Client, host string) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, host+"/readyz?verbose", nil)
	if err != nil {
		return false, ""
	}
	resp, err := c.Do(req)
	if err != nil {
		return false, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode == http.StatusOK, string(b)
}

// waitAllReady waits for edgeplane's "ready" log line (every component
// started), or upstream's controller-manager and scheduler to lead
// (kubeadm.go), and returns its time since exec; a bare upstream apiserver
// has nothing more to wait for.
func (in *instance) waitAllReady(timeout time.Duration, apiReady time.Duration) (time.Duration, error) {
	if in.cfg.Controllers {
		return in.waitLeaders(timeout)
	}
	if !in.cfg.Edgeplane {
		return apiReady, nil
	}
	p := in.procs[0]
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if t, ok := p.out.seenAt(readyLine); ok {
			if in.node != nil {
				// The idle window and the memory figures are for a node
				// that is up, not one still registering.
				if err := in.node.waitReady(in, time.Until(deadline)); err != nil {
					return 0, err
				}
			}
			return t.Sub(in.started), nil
		}
		if p.exited() {
			return 0, fmt.Errorf("edgeplane exited (%v):\n%s", p.err, p.tail(15))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0, fmt.Errorf("no %q log line after %s", readyLine, timeout)
}

func (in *instance) pids() []int {
	var pids []int
	for _, p := range in.procs {
		pids = append(pids, p.pid())
	}
	return pids
}

// memory sums the processes' memory.
func (in *instance) memory() (memory, error) {
	var sum memory
	for _, p := range in.procs {
		m, err := readMemory(p.pid())
		if err != nil {
			return sum, fmt.Errorf("%s: %w", p.name, err)
		}
		sum = sum.add(m)
	}
	return sum, nil
}

// counters sums the processes' I/O counters and CPU time.
func (in *instance) counters() (ioCounters, error) {
	var sum ioCounters
	for _, p := range in.procs {
		c, err := readIO(p.pid())
		if err != nil {
			return sum, fmt.Errorf("%s: %w", p.name, err)
		}
		sum = sum.add(c)
	}
	return sum, nil
}

// stop stops the processes, apiserver first, datastore last.
func (in *instance) stop() error {
	var errs []error
	for i := len(in.procs) - 1; i >= 0; i-- {
		errs = append(errs, in.procs[i].stop(60*time.Second))
	}
	if in.node != nil {
		errs = append(errs, in.node.stop())
		in.node = nil
	}
	return errors.Join(errs...)
}

// freePort asks the kernel for a free loopback port.
func freePort() (int, error) {
	ps, err := freePorts(1)
	if err != nil {
		return 0, err
	}
	return ps[0], nil
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
