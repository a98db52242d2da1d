package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/edgeplane/edgeplane/internal/testing/testenv"
	"github.com/edgeplane/edgeplane/internal/testing/testimage"
)

// agentProc is one `edgeplane agent` process.
type agentProc struct {
	cmd    *exec.Cmd
	output *syncBuffer
	exited chan struct{}
	err    error
	// endExpected: the test stopped or killed it, or waits for it to fail.
	endExpected atomic.Bool
}

// mustKeepRunning fails t, when it ends, if the agent exited without the
// test asking it to or waiting for it to (a part of its node ended).
func (a *agentProc) mustKeepRunning(t *testing.T) {
	t.Helper()
	t.Cleanup(func() {
		select {
		case <-a.exited:
			if !a.endExpected.Load() {
				t.Errorf("the agent exited during the test without being asked to (%v):\n%s", a.err, tail(a.output.String()))
			}
		default:
		}
	})
}

func startAgent(t *testing.T, args ...string) *agentProc {
	t.Helper()
	a := &agentProc{output: &syncBuffer{}, exited: make(chan struct{})}
	a.cmd = exec.Command(binary, append([]string{"agent", "--config", ""}, args...)...)
	a.cmd.Stdout, a.cmd.Stderr = a.output, a.output
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { a.err = a.cmd.Wait(); close(a.exited) }()
	t.Cleanup(func() {
		a.kill()
		if t.Failed() {
			t.Logf("agent output:\n%s", tail(a.output.String()))
		}
	})
	return a
}

// agentDataDir is a data dir short enough for the kubelet's unix sockets
// below <data-dir>/agent/kubelet (the agent refuses longer ones, and a
// subtest's t.TempDir() can be): /tmp/ep-agent-NNN, removed when t ends.
func agentDataDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ep-agent-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove %s: %v", dir, err)
		}
	})
	unmountUnder(t, dir)
	return dir
}

// stop sends SIGTERM and expects a clean exit within a minute.
func (a *agentProc) stop(t *testing.T) {
	t.Helper()
	a.endExpected.Store(true)
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.exited:
	case <-time.After(time.Minute):
		t.Fatalf("agent did not stop within a minute of SIGTERM:\n%s", tail(a.output.String()))
	}
	if a.err != nil {
		t.Fatalf("agent exited with %v after SIGTERM:\n%s", a.err, tail(a.output.String()))
	}
}

func (a *agentProc) kill() {
	a.endExpected.Store(true)
	select {
	case <-a.exited:
	default:
		_ = a.cmd.Process.Kill()
		<-a.exited
	}
}

// waitExit waits for the agent to end by itself and returns its output.
func (a *agentProc) waitExit(t *testing.T, within time.Duration) string {
	t.Helper()
	a.endExpected.Store(true)
	select {
	case <-a.exited:
	case <-time.After(within):
		t.Fatalf("agent still running after %s:\n%s", within, tail(a.output.String()))
	}
	if a.err == nil {
		t.Fatalf("agent exited 0, want a failure:\n%s", tail(a.output.String()))
	}
	return a.output.String()
}

// agentKubeletArgs keep a second kubelet on this host out of the first's
// way: its own ports, and no pod cgroups of its own to reconcile.
func agentKubeletArgs(t *testing.T) []string {
	return append(kubeletPorts(t), "--kubelet-arg=cgroups-per-qos=false", "--kubelet-arg=enforce-node-allocatable=",
		"--pod-logs-dir", t.TempDir()) // not the host's /var/log/pods: its kubelet would remove the other's logs
}

func serverNodeToken(t *testing.T, s *server) string {
	t.Helper()
	out, err := exec.Command(binary, "token", "--node", "--data-dir", s.dataDir).CombinedOutput()
	if err != nil {
		t.Fatalf("edgeplane token --node: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func serverURL(s *server) string { return s.config.Host }

// TestAgentJoin: `edgeplane agent` (its own containerd, in a network
// namespace) joins a server that is its own node with the default node
// token: its labels are set, it gets a serving certificate for its own
// addresses only, it cannot change the server's Node, a restart keeps its
// pods, and bad input fails at once with a clear message. Its name is its
// own (nodeIdentity): nobody else gets it with a node token.
func TestAgentJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two containerds, a server node and an agent node in network namespaces")
	}
	parallelNode(t, buildClusterImages(t))
	c := startTwoNodeCluster(t, twoNodeOptions{AgentArgs: []string{"--node-label", "edge.example/zone=a"}})
	s := c.Server
	token := flagValue(t, c.agentArgs, "--token")
	agentDir := flagValue(t, c.agentArgs, "--data-dir")

	node, err := s.client.CoreV1().Nodes().Get(context.Background(), c.AgentNode, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Labels["edge.example/zone"] != "a" {
		t.Errorf("%s labels %v lack edge.example/zone=a", c.AgentNode, node.Labels)
	}

	t.Run("serving certificate only for its own addresses", func(t *testing.T) {
		var cert *x509.Certificate
		eventually(t, 2*time.Minute, c.AgentNode+"'s serving certificate", func(ctx context.Context) (bool, error) {
			list, err := s.client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			for _, csr := range list.Items {
				if csr.Spec.SignerName == certificatesv1.KubeletServingSignerName && csr.Spec.Username == "system:node:"+c.AgentNode && len(csr.Status.Certificate) > 0 {
					block, _ := pem.Decode(csr.Status.Certificate)
					cert, err = x509.ParseCertificate(block.Bytes)
					return err == nil, err
				}
			}
			return false, fmt.Errorf("no issued kubelet-serving CSR for %s", c.AgentNode)
		})
		own := map[string]bool{}
		for _, a := range node.Status.Addresses {
			own[a.Address] = true
		}
		for _, ip := range cert.IPAddresses {
			if !own[ip.String()] {
				t.Errorf("serving certificate holds IP %s, not one of %s's addresses %v", ip, c.AgentNode, node.Status.Addresses)
			}
		}
		for _, d := range cert.DNSNames {
			if !own[d] {
				t.Errorf("serving certificate holds name %s, not one of %s's addresses %v", d, c.AgentNode, node.Status.Addresses)
			}
		}
		if !slicesContainsIP(cert.IPAddresses, c.AgentIP) {
			t.Errorf("serving certificate IPs %v lack the node IP %s", cert.IPAddresses, c.AgentIP)
		}
	})

	agentClient := clientFromKubeconfig(t, filepath.Join(agentDir, "agent", "kubelet.kubeconfig"))

	t.Run("NodeRestriction keeps it off the server's Node", func(t *testing.T) {
		patch := []byte(`{"metadata":{"labels":{"hijacked":"yes"}}}`)
		_, err := agentClient.CoreV1().Nodes().Patch(context.Background(), c.ServerNode, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
		if !apierrors.IsForbidden(err) {
			t.Fatalf("%s patching node %s: err = %v, want Forbidden", c.AgentNode, c.ServerNode, err)
		}
		// Its own Node it may change.
		if _, err := agentClient.CoreV1().Nodes().Patch(context.Background(), c.AgentNode, types.StrategicMergePatchType,
			[]byte(`{"metadata":{"annotations":{"edge.example/ok":"yes"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatalf("%s patching its own node: %v", c.AgentNode, err)
		}
	})

	t.Run("a serving CSR for foreign addresses is denied", func(t *testing.T) {
		name := submitServingCSR(t, agentClient, c.AgentNode, []string{"10.99.99.99"}, []string{"not-" + c.AgentNode + ".example"})
		eventually(t, time.Minute, "the foreign CSR denied", func(ctx context.Context) (bool, error) {
			csr, err := s.client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if len(csr.Status.Certificate) > 0 {
				t.Fatalf("a serving certificate for foreign SANs was signed")
			}
			for _, cond := range csr.Status.Conditions {
				if cond.Type == certificatesv1.CertificateApproved {
					t.Fatalf("CSR for foreign SANs approved: %s", cond.Message)
				}
				if cond.Type == certificatesv1.CertificateDenied {
					return true, nil
				}
			}
			return false, fmt.Errorf("conditions %v", csr.Status.Conditions)
		})
	})

	t.Run("a restart keeps the node and its pod", func(t *testing.T) {
		if out, err := s.kubectl("run", "on-agent", "--image="+testimage.DefaultBusyboxName, "--labels=app=on-agent", "--restart=Never",
			"--overrides", `{"spec":{"nodeName":"`+c.AgentNode+`"}}`, "--", "sleep", "3600"); err != nil {
			t.Fatalf("kubectl run: %v\n%s", err, out)
		}
		before := runningPods(t, s, "on-agent", 1)[0]
		c.Agent.stop(t)
		c.Agent = c.startAgent(t)
		waitAgentReady(t, c.Agent)
		after := runningPods(t, s, "on-agent", 1)[0]
		if len(after.Status.ContainerStatuses) != 1 || len(before.Status.ContainerStatuses) != 1 {
			t.Fatalf("container statuses: before %v, after %v", before.Status.ContainerStatuses, after.Status.ContainerStatuses)
		}
		b, a := before.Status.ContainerStatuses[0], after.Status.ContainerStatuses[0]
		if a.ContainerID != b.ContainerID || a.RestartCount != 0 {
			t.Errorf("container %s (restarts %d) after the agent restart, want %s unrestarted", a.ContainerID, a.RestartCount, b.ContainerID)
		}
		wantText(t, c.Agent.output.String(), "Starting with the node's existing credentials")
	})

	nodeIdentity(t, c)

	// failing starts an agent on the host that is meant to fail before its
	// kubelet starts, with the agent's containerd, and returns its output.
	failing := func(t *testing.T, args ...string) string {
		a := startAgent(t, append(args, "--container-runtime-endpoint", c.AgentCtrd.Endpoint)...)
		return a.waitExit(t, time.Minute)
	}
	t.Run("a token whose CA hash does not match writes nothing", func(t *testing.T) {
		bad := "K10" + strings.Repeat("a", 64) + token[3+64:] // another CA's pin
		dir := filepath.Join(agentDataDir(t), "data")
		out := failing(t, "--server", serverURL(s), "--token", bad, "--data-dir", dir, "--node-name", "agent-x")
		wantText(t, out, "does not match")
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			entries, _ := os.ReadDir(dir)
			t.Errorf("data dir written after a CA mismatch: %v", entries)
		}
	})

	t.Run("a deleted token is named as unknown", func(t *testing.T) {
		created := lastLine(c.serverCLI(t, "token", "create", "--ttl", "1h", "--data-dir", s.dataDir))
		id := strings.SplitN(created[strings.Index(created, "::")+2:], ".", 2)[0]
		c.serverCLI(t, "token", "delete", id, "--data-dir", s.dataDir)
		out := failing(t, "--server", serverURL(s), "--token", created, "--data-dir", agentDataDir(t), "--node-name", "agent-y")
		wantText(t, out, id)
	})

	t.Run("an unreachable server is retried quietly", func(t *testing.T) {
		closed := "https://" + testenv.RefusingAddr(t)
		a := startAgent(t, "--server", closed, "--token", token, "--data-dir", agentDataDir(t), "--node-name", "agent-z",
			"--container-runtime-endpoint", c.AgentCtrd.Endpoint)
		eventually(t, 30*time.Second, "a retry log line", func(context.Context) (bool, error) {
			return strings.Contains(a.output.String(), "Cannot reach the server"), nil
		})
		select {
		case <-a.exited:
			t.Fatalf("agent gave up on an unreachable server:\n%s", a.output.String())
		case <-time.After(5 * time.Second):
		}
		if n := strings.Count(a.output.String(), "Cannot reach the server"); n != 1 {
			t.Errorf("%d retry lines in the first seconds, want 1 per window:\n%s", n, a.output.String())
		}
	})

	t.Run("no runtime, and a dead runtime socket", func(t *testing.T) {
		dead := filepath.Join(t.TempDir(), "dead.sock")
		l, err := net.Listen("unix", dead)
		if err != nil {
			t.Fatal(err)
		}
		l.(*net.UnixListener).SetUnlinkOnClose(false)
		_ = l.Close()
		for _, rt := range []struct{ endpoint, want string }{
			{"unix://" + filepath.Join(t.TempDir(), "missing.sock"), "missing.sock"},
			{"unix://" + dead, "dead.sock"},
		} {
			dir := filepath.Join(agentDataDir(t), "data")
			a := startAgent(t, "--server", serverURL(s), "--token", token, "--data-dir", dir, "--node-name", "agent-r",
				"--container-runtime-endpoint", rt.endpoint)
			wantText(t, a.waitExit(t, time.Minute), rt.want)
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("data dir written by an agent with no runtime")
			}
		}
	})
}

func slicesContainsIP(ips []net.IP, want string) bool {
	for _, ip := range ips {
		if ip.String() == want {
			return true
		}
	}
	return false
}

func clientFromKubeconfig(t *testing.T, path string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(cfg)
}

// submitServingCSR creates a kubelet-serving CSR as node with the given SANs.
func submitServingCSR(t *testing.T, client kubernetes.Interface, node string, ips, dns []string) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}}, DNSNames: dns}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "foreign-"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			SignerName: certificatesv1.KubeletServingSignerName,
			Usages:     []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageServerAuth},
		},
	}
	created, err := client.CertificatesV1().CertificateSigningRequests().Create(context.Background(), csr, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created.Name
}

// cliOut runs edgeplane with args and fails the test unless it exits 0.
func cliOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(binary, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("edgeplane %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
