package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/edgeplane/edgeplane/internal/testing/testcontainerd"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// nodeHost is what a server-as-node configuration needs beside edgeplane:
// a private containerd (the one tests use, so the benchmark never touches
// the host's runtime) and a node IP. The kubelet refuses a loopback node IP
// and nothing may connect to the host's own address, so the IP is the host
// end of a veth into a network namespace of the benchmark's own, as the
// e2e tests do. Nothing is sent to it: no pods run, and nobody asks the
// kubelet for logs.
type nodeHost struct {
	ctrd    *testcontainerd.Containerd
	short   string // the socket's short directory
	netns   string
	ip      string
	dataDir string
}

var nodeHosts atomic.Int32

// startNodeHost starts containerd under dataDir and makes a node IP; args
// are the edgeplane flags that make the server that node.
func startNodeHost(dataDir string) (h *nodeHost, args []string, err error) {
	if os.Geteuid() != 0 {
		return nil, nil, errors.New("a node configuration needs root (containerd, a network namespace)")
	}
	n := int(nodeHosts.Add(1)) % 250
	h = &nodeHost{dataDir: dataDir}
	defer func() {
		if err != nil {
			h.stop()
		}
	}()
	if h.short, err = os.MkdirTemp("/tmp", "bctd"); err != nil {
		return nil, nil, err
	}
	ctrdDir := filepath.Join(dataDir, "containerd")
	if err := os.MkdirAll(ctrdDir, 0o700); err != nil {
		return nil, nil, err
	}
	if h.ctrd, err = testcontainerd.Launch(ctrdDir, h.short, testcontainerd.Options{}); err != nil {
		return nil, nil, err
	}
	pid := os.Getpid() % 10000
	h.netns = fmt.Sprintf("ep-bench-%d-%d", pid, n)
	host, peer := fmt.Sprintf("epb%dh%d", pid, n), fmt.Sprintf("epb%dp%d", pid, n)
	h.ip = fmt.Sprintf("10.203.%d.1", n)
	for _, cmd := range [][]string{
		{"netns", "add", h.netns},
		{"link", "add", host, "type", "veth", "peer", "name", peer, "netns", h.netns},
		{"addr", "add", h.ip + "/30", "dev", host},
		{"link", "set", host, "up"},
		{"-n", h.netns, "addr", "add", fmt.Sprintf("10.203.%d.2/30", n), "dev", peer},
		{"-n", h.netns, "link", "set", peer, "up"},
	} {
		if out, err := exec.Command("ip", cmd...).CombinedOutput(); err != nil {
			return nil, nil, fmt.Errorf("ip %s: %v: %s", strings.Join(cmd, " "), err, out)
		}
	}
	ports, err := freePorts(2)
	if err != nil {
		return nil, nil, err
	}
	args = []string{
		"--container-runtime-endpoint", h.ctrd.Endpoint,
		"--cni-conf-dir", h.ctrd.CNIConfDir,
		"--node-name", nodeName,
		"--node-ip", h.ip,
		"--kubelet-arg=port=" + strconv.Itoa(ports[0]),
		"--kubelet-arg=healthz-port=" + strconv.Itoa(ports[1]),
		// Its own pod log directory (another kubelet on this host removes
		// what is not its own in /var/log/pods), and no flannel or
		// kube-proxy rules in the host's network namespace.
		"--pod-logs-dir", filepath.Join(dataDir, "pod-logs"),
		"--flannel-backend=none", "--disable=kube-proxy",
	}
	return h, args, nil
}

// nodeName is the server's node in a node configuration.
const nodeName = "bench-node"

// waitReady waits until the server's Node reports Ready.
func (h *nodeHost) waitReady(in *instance, timeout time.Duration) error {
	if err := in.loadCredentials(); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(in.rest)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last string
	for {
		n, err := cs.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err == nil {
			last = "not Ready"
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					return nil
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not Ready after %s (%s)", nodeName, timeout, last)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// stop ends containerd, the network namespace (its veth goes with it) and
// the kubelet's mounts under the data dir. Run it after edgeplane ended.
func (h *nodeHost) stop() error {
	var errs []error
	logf := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	testcontainerd.UnmountUnder(logf, h.dataDir)
	if h.ctrd != nil {
		h.ctrd.Stop(logf)
	}
	if h.netns != "" {
		if out, err := exec.Command("ip", "netns", "del", h.netns).CombinedOutput(); err != nil {
			logf("ip netns del %s: %v: %s", h.netns, err, out)
		}
	}
	if h.short != "" {
		if err := os.RemoveAll(h.short); err != nil {
			logf("%v", err)
		}
	}
	return errors.Join(errs...)
}
