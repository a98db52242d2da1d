package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/edgeplane/edgeplane/internal/testing/testcontainerd"
	"github.com/edgeplane/edgeplane/internal/testing/testimage"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// board is one configuration's host side: a network namespace on a bridge
// of its own (the node's address; flannel's and kube-proxy's rules stay in
// it), the cgroups, a private containerd in its cgroup and edgeplane in its
// own.
type board struct {
	cfg  config
	opts *options

	root                        group // /edgeplane-board-<pid>-<i>
	edgeplane, containerd, pods group
	limited                     group // where the memory limit is

	ns, bridge, veth, hostIP, nodeIP string

	dataDir, short string
	ctrd           *testcontainerd.Containerd

	cmd     *exec.Cmd
	pid     int
	exited  chan struct{}
	exitErr error
	logFile *os.File

	kubeconfig string
	rest       *rest.Config
	client     kubernetes.Interface
}

// nodeName is the server's node.
const nodeName = "board"

// setUp makes the cgroups and the network namespace and starts containerd.
// On error the caller still calls tearDown.
func (b *board) setUp(i int, host *cgroupHost) error {
	pid := os.Getpid() % 100000
	name := fmt.Sprintf("edgeplane-board-%d-%d", pid, i)
	b.root = host.group("/" + name)
	b.edgeplane = host.group(b.root.path + "/edgeplane")
	b.containerd = host.group(b.root.path + "/containerd")
	b.pods = host.group(b.root.path + "/pods")
	if err := b.root.create(true); err != nil {
		return err
	}
	for _, g := range []group{b.edgeplane, b.containerd} {
		if err := g.create(false); err != nil {
			return err
		}
	}
	if err := b.pods.create(true); err != nil { // the kubelet's cgroup root
		return err
	}
	b.limited = b.edgeplane
	if b.cfg.Scope == scopeBoard {
		b.limited = b.root
	}
	if err := b.limited.setMemoryLimit(b.cfg.LimitMiB << 20); err != nil {
		return fmt.Errorf("memory limit on %s: %w", b.limited.path, err)
	}
	if err := b.edgeplane.setCPUShare(b.opts.cpuShare); err != nil {
		return fmt.Errorf("CPU limit on %s: %w", b.edgeplane.path, err)
	}

	n := (pid + i) % 200
	b.ns = fmt.Sprintf("ep-board-%d-%d", pid, i)
	b.bridge, b.veth = fmt.Sprintf("epbb%d-%d", pid, i), fmt.Sprintf("epbv%d-%d", pid, i)
	b.hostIP, b.nodeIP = fmt.Sprintf("10.206.%d.1", n), fmt.Sprintf("10.206.%d.2", n)
	for _, args := range [][]string{
		{"link", "add", b.bridge, "type", "bridge"},
		{"addr", "add", b.hostIP + "/24", "dev", b.bridge},
		{"link", "set", b.bridge, "up"},
		{"netns", "add", b.ns},
		{"link", "add", b.veth, "type", "veth", "peer", "name", "eth0", "netns", b.ns},
		{"link", "set", b.veth, "master", b.bridge, "up"},
		{"-n", b.ns, "addr", "add", b.nodeIP + "/24", "dev", "eth0"},
		{"-n", b.ns, "link", "set", "eth0", "up"},
		{"-n", b.ns, "link", "set", "lo", "up"},
		{"-n", b.ns, "route", "add", "default", "via", b.hostIP},
	} {
		if err := run("ip", args...); err != nil {
			return err
		}
	}

	var err error
	// Short: the kubelet's sockets live below the data dir.
	if b.dataDir, err = os.MkdirTemp("", "epboard-"); err != nil {
		return err
	}
	if b.short, err = os.MkdirTemp("/tmp", "bbctd"); err != nil {
		return err
	}
	if err := b.writeImages(); err != nil {
		return err
	}
	ctrdDir := filepath.Join(b.dataDir, "containerd")
	if err := os.MkdirAll(ctrdDir, 0o700); err != nil {
		return err
	}
	b.ctrd, err = testcontainerd.Launch(ctrdDir, b.short, testcontainerd.Options{Netns: b.ns, Cgroups: b.containerd.procsFiles()})
	return err
}

// writeImages puts the workload, sandbox and CoreDNS images where the
// server imports them at start (<data-dir>/agent/images): no registry.
func (b *board) writeImages() error {
	dir := filepath.Join(b.dataDir, "server", "agent", "images")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	dns, err := testimage.CoreDNS(b.opts.coreDNS)
	if err != nil {
		return err
	}
	for _, img := range []testimage.Image{testimage.Busybox(), testimage.Pause(), dns} {
		if _, err := testimage.Write(dir, img); err != nil {
			return err
		}
	}
	return nil
}

// start runs edgeplane in its cgroups and the namespace and waits until it
// serves and its node is Ready.
func (b *board) start(ctx context.Context) error {
	args := []string{"server", "--data-dir", filepath.Join(b.dataDir, "server"),
		"--profile", b.cfg.Profile,
		"--bind-address", "0.0.0.0", "--advertise-address", b.nodeIP, "--https-port", "6443",
		"--container-runtime-endpoint", b.ctrd.Endpoint, "--cni-conf-dir", b.ctrd.CNIConfDir,
		"--pause-image", testimage.DefaultPauseName, "--coredns-image", testimage.DefaultCoreDNSName,
		"--node-name", nodeName, "--node-ip", b.nodeIP,
		// The pods' cgroups under the benchmark's own root (a kubelet
		// removes the pod cgroups it does not know under its root: another
		// kubelet on this host would kill these pods under /kubepods), and
		// a pod log directory of its own (another kubelet removes what is
		// not its own in /var/log/pods). Test-host needs, not board ones.
		"--kubelet-arg=cgroup-root=" + b.pods.path,
		"--pod-logs-dir", filepath.Join(b.dataDir, "pod-logs"),
		// Disk thresholds in amounts, not shares, as the conformance
		// run's nodes have them: on a shared test host's disk, which the
		// kubelet sees more than 85% full, image garbage collection would
		// remove the imported images (the pods never pull) and the default
		// eviction thresholds would put the node into DiskPressure. A
		// board's SD card has its own; memory.available is the default.
		"--kubelet-arg=image-gc-high-threshold=100",
		"--kubelet-arg=eviction-hard=memory.available<100Mi,nodefs.available<512Mi,imagefs.available<512Mi,nodefs.inodesFree<1%",
	}
	args = append(args, b.opts.extraArgs...)
	const script = `for f in $BOARD_CGROUPS; do echo $$ > "$f" || exit 125; done; exec "$@"`
	b.cmd = exec.Command("/bin/sh", append([]string{"-c", script, "sh", "nsenter", "--net=/run/netns/" + b.ns, "--", b.opts.bin}, args...)...)
	b.cmd.Env = append(os.Environ(), "BOARD_CGROUPS="+strings.Join(b.edgeplane.procsFiles(), " "))
	var err error
	if b.logFile, err = os.Create(filepath.Join(b.opts.logDir, b.cfg.Name+".log")); err != nil {
		return err
	}
	b.cmd.Stdout, b.cmd.Stderr = b.logFile, b.logFile
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		return err
	}
	b.pid = b.cmd.Process.Pid
	b.exited = make(chan struct{})
	go func() { b.exitErr = b.cmd.Wait(); close(b.exited) }()

	b.kubeconfig = filepath.Join(b.dataDir, "server", "admin.kubeconfig")
	if err := b.waitFor(ctx, 5*time.Minute, "the admin kubeconfig and /readyz", b.serving); err != nil {
		return err
	}
	return nil
}

// serving loads the admin kubeconfig (pointed at the node's address: its
// own names loopback, the namespace's) and asks /readyz.
func (b *board) serving(ctx context.Context) error {
	if b.client == nil {
		cfg, err := clientcmd.LoadFromFile(b.kubeconfig)
		if err != nil {
			return err
		}
		for _, cl := range cfg.Clusters {
			cl.Server = "https://" + b.nodeIP + ":6443"
		}
		path := filepath.Join(b.dataDir, "bench.kubeconfig")
		if err := clientcmd.WriteToFile(*cfg, path); err != nil {
			return err
		}
		rc, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return err
		}
		rc.QPS, rc.Burst = 50, 100
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return err
		}
		b.kubeconfig, b.rest, b.client = path, rc, cs
	}
	body, err := b.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	if err != nil {
		return err
	}
	if !bytes.Equal(bytes.TrimSpace(body), []byte("ok")) {
		return fmt.Errorf("/readyz: %s", body)
	}
	return nil
}

// waitFor polls check every second until it passes, edgeplane exits or
// timeout passes.
func (b *board) waitFor(ctx context.Context, timeout time.Duration, what string, check func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		last = check(cctx)
		ccancel()
		if last == nil {
			return nil
		}
		select {
		case <-b.exited:
			return fmt.Errorf("edgeplane exited (%v) while waiting for %s (see %s)", b.exitErr, what, b.logFile.Name())
		case <-ctx.Done():
			return fmt.Errorf("%s: not within %s: %v", what, timeout, last)
		case <-time.After(time.Second):
		}
	}
}

// running tells whether edgeplane still runs.
func (b *board) running() bool {
	select {
	case <-b.exited:
		return false
	default:
		return b.exited != nil
	}
}

// tearDown stops edgeplane (SIGTERM, SIGKILL after 60 s), containerd, and
// removes the mounts, the namespace, the bridge, the cgroups and the
// directories.
func (b *board) tearDown() error {
	var errs []error
	logf := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if b.exited != nil {
		_ = syscall.Kill(b.pid, syscall.SIGTERM)
		select {
		case <-b.exited:
		case <-time.After(60 * time.Second):
			logf("edgeplane still ran 60 s after SIGTERM: killed")
			_ = syscall.Kill(b.pid, syscall.SIGKILL)
			<-b.exited
		}
	}
	if b.logFile != nil {
		_ = b.logFile.Close()
	}
	if b.ctrd != nil {
		b.ctrd.Stop(logf)
	}
	if b.dataDir != "" {
		testcontainerd.UnmountUnder(logf, b.dataDir)
	}
	if b.ns != "" {
		_ = exec.Command("ip", "netns", "del", b.ns).Run()
		_ = exec.Command("ip", "link", "del", b.veth).Run()
		_ = exec.Command("ip", "link", "del", b.bridge).Run()
	}
	if b.root.h != nil {
		if err := b.root.remove(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, dir := range []string{b.dataDir, b.short} {
		if dir != "" {
			if err := os.RemoveAll(dir); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// kernelLog is dmesg's text, or "" with the reason when it cannot be read.
func kernelLog() (string, error) {
	out, err := exec.Command("dmesg").Output()
	if err != nil {
		return "", fmt.Errorf("dmesg: %w", err)
	}
	return string(out), nil
}
