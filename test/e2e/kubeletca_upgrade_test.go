package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/edgeplane/edgeplane/internal/testing/testimage"
	"github.com/edgeplane/edgeplane/pkg/certs"
	"github.com/edgeplane/edgeplane/pkg/nodeconfig"
)

// preKubeletCACommit is main's last commit before the kubelet-serving CA:
// its binary makes data dirs whose kubelet serving certificates come from
// the server CA.
const preKubeletCACommit = "fdb64e5"

// buildAt builds the edgeplane binary of commit from this repository's
// history, once per run: `git archive` copies out the tree (no worktree,
// ref or index of the repository changes) and a plain `go build` builds it.
// It needs the commit in the clone (CI's is a full one).
//
// One build runs at a time. The older commits share most of their
// dependencies, at versions HEAD's build (TestMain) does not have in the
// build cache: side by side, each build compiled all of them at once (four
// builds of most of Kubernetes on CI's two cores), one after another the
// later ones find them in the cache.
func buildAt(t *testing.T, commit string) string {
	t.Helper()
	oldBuildsMu.Lock()
	b, ok := oldBuilds[commit]
	if !ok {
		b = buildCommit(commit)
		oldBuilds[commit] = b
	}
	oldBuildsMu.Unlock()
	if b.err != nil {
		t.Fatal(b.err)
	}
	t.Logf("edgeplane at %s built in %s (once per run)", commit, b.took.Round(time.Second))
	return b.bin
}

var (
	oldBuildsMu sync.Mutex
	oldBuilds   = map[string]*oldBuild{}
)

// oldBuild is the outcome of building one older commit.
type oldBuild struct {
	bin  string
	took time.Duration
	err  error
}

// buildCommit builds commit's binary under runDir.
func buildCommit(commit string) *oldBuild {
	start := time.Now()
	dir, err := os.MkdirTemp(runDir, "ep-old-"+commit+"-")
	if err != nil {
		return &oldBuild{err: err}
	}
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o700); err != nil {
		return &oldBuild{err: err}
	}
	defer os.RemoveAll(src)
	archive := exec.Command("git", "-C", "../..", "archive", "--format=tar", commit)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return &oldBuild{err: err}
	}
	untar.Stdin = pipe
	var stderr syncBuffer
	archive.Stderr, untar.Stderr = &stderr, &stderr
	if err := untar.Start(); err != nil {
		return &oldBuild{err: err}
	}
	if err := archive.Run(); err != nil {
		_ = untar.Wait()
		return &oldBuild{err: fmt.Errorf("git archive %s (the test needs the commit in this clone): %v: %s", commit, err, stderr.String())}
	}
	if err := untar.Wait(); err != nil {
		return &oldBuild{err: fmt.Errorf("untar %s: %v: %s", commit, err, stderr.String())}
	}
	bin := filepath.Join(dir, "edgeplane-"+commit)
	build := exec.Command("go", "build", "-o", bin, "./cmd/edgeplane")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		return &oldBuild{err: fmt.Errorf("build edgeplane at %s: %v\n%s", commit, err, out)}
	}
	return &oldBuild{bin: bin, took: time.Since(start)}
}

// TestKubeletServingUpgrade: a data dir made by the binary from before the
// kubelet-serving CA (serving certificates from the server CA, on the
// server's own node and on an agent that stays at that version) starts with
// this binary. Through the transition the API server trusts both CAs for
// kubelets: `kubectl logs` and `exec` to a pod on the server's node keep
// working, the server's kubelet gets a serving certificate from the
// kubelet-serving CA at once, and the old agent stays reachable. At the
// first start after the transition (its length shortened by the test knob
// certs.LeafLifetimeEnv) the server CA is no longer trusted for kubelets:
// the server's node still works, the old agent's certificate is refused.
func TestKubeletServingUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("builds an older edgeplane, runs containerd, servers, their kubelet and an agent")
	}
	var old string
	parallelNode(t, func() { old = buildAt(t, preKubeletCACommit) })

	// Before: the old binary, its node and an agent of the same version
	// (each its own containerd, in a network namespace).
	c := startTwoNodeCluster(t, twoNodeOptions{Bin: old})
	s := c.Server
	tlsDir := filepath.Join(s.dataDir, "tls")
	if _, err := os.Stat(filepath.Join(tlsDir, "kubelet-serving-ca.crt")); !os.IsNotExist(err) {
		t.Fatalf("the binary of %s made a kubelet-serving CA (%v): not a data dir from before it", preKubeletCACommit, err)
	}
	serverCAPEM := []byte(readFile(t, filepath.Join(tlsDir, "server-ca.crt")))
	for _, node := range []string{c.ServerNode, c.AgentNode} {
		waitServingFrom(t, s, node, serverCAPEM, "the server CA")
	}
	if out, err := s.kubectl("run", "upg", "--image="+testimage.DefaultBusyboxName, "--labels=app=upg", "--restart=Never",
		"--overrides", `{"spec":{"nodeName":"`+c.ServerNode+`"}}`, "--command", "--", "sh", "-c", "echo up on srv; exec sleep 3600"); err != nil {
		t.Fatalf("kubectl run: %v\n%s", err, out)
	}
	runningPods(t, s, "upg", 1)
	logsAndExec(t, s, "upg", "up on srv")
	wantKubeletProxy(t, s, c.AgentNode, "")

	// The transition: this binary on that data dir.
	const transition = 2 * time.Minute
	env := certs.LeafLifetimeEnv + "=" + transition.String()
	restart := func() {
		s.stop()
		s = startServerCmd(t, s.dataDir, withEnv(nsenterCmd(c.ServerNS, c.serverArgs...), env))
		s.useAddress(t, serverURL(c.Server))
		s.mustKeepRunning(t)
	}
	restart()
	kubeletCAPEM := []byte(readFile(t, filepath.Join(tlsDir, "kubelet-serving-ca.crt")))
	kubeletCA, serverCA := pemCerts(t, kubeletCAPEM)[0], pemCerts(t, serverCAPEM)[0]
	if b := pemCerts(t, []byte(readFile(t, filepath.Join(tlsDir, "kubelet-serving-ca-bundle.crt")))); len(b) != 2 || !b[0].Equal(kubeletCA) || !b[1].Equal(serverCA) {
		t.Errorf("during the transition the kubelet CA bundle holds %d certificates, want the kubelet-serving CA and the server CA", len(b))
	}
	wantText(t, s.output.String(), "Transition to the kubelet-serving CA")
	waitNodeReady(t, s, c.ServerNode)
	// The server's kubelet dropped its certificate from the server CA and
	// got one from the kubelet-serving CA.
	waitServingFrom(t, s, c.ServerNode, kubeletCAPEM, "the kubelet-serving CA")
	logsAndExec(t, s, "upg", "up on srv")
	cm, err := s.client.CoreV1().ConfigMaps(nodeconfig.Namespace).Get(context.Background(), nodeconfig.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Data["kubelet-serving-ca.crt"] != string(kubeletCAPEM) {
		t.Errorf("%s does not publish the kubelet-serving CA", nodeconfig.Name)
	}
	// The old agent still serves its certificate from the server CA, which
	// the API server trusts until the transition ends.
	waitServingFrom(t, s, c.AgentNode, serverCAPEM, "the server CA")
	wantKubeletProxy(t, s, c.AgentNode, "")

	// After the transition: the first start drops the server CA.
	end := kubeletCA.NotBefore.Add(5*time.Minute + transition)
	eventually(t, transition+time.Minute, "the end of the transition at "+end.Format(time.RFC3339), func(context.Context) (bool, error) {
		return time.Now().After(end), nil
	})
	restart()
	if b := pemCerts(t, []byte(readFile(t, filepath.Join(tlsDir, "kubelet-serving-ca-bundle.crt")))); len(b) != 1 || !b[0].Equal(kubeletCA) {
		t.Errorf("after the transition the kubelet CA bundle holds %d certificates, want the kubelet-serving CA only", len(b))
	}
	wantText(t, s.output.String(), "transition to the kubelet-serving CA is over")
	waitNodeReady(t, s, c.ServerNode)
	waitServingFrom(t, s, c.ServerNode, kubeletCAPEM, "the kubelet-serving CA")
	logsAndExec(t, s, "upg", "up on srv")
	wantKubeletProxy(t, s, c.AgentNode, "certificate signed by unknown authority")
}

// waitServingFrom waits until node's kubelet serves a certificate that
// verifies against caPEM (named what) for its InternalIP.
func waitServingFrom(t *testing.T, s *server, node string, caPEM []byte, what string) {
	t.Helper()
	ip, port := kubeletEndpoint(t, s, node)
	eventually(t, 2*time.Minute, node+"'s kubelet serving a certificate from "+what, func(ctx context.Context) (bool, error) {
		c, err := presentedCert(ctx, net.JoinHostPort(ip, strconv.Itoa(port)))
		if ctx.Err() != nil {
			return false, nil // keep the last real error for the report
		}
		if err != nil {
			return false, err
		}
		if err := verifyServing(c, caPEM, ip); err != nil {
			return false, fmt.Errorf("serves %s (issuer %s): %w", c.Subject, c.Issuer, err)
		}
		return true, nil
	})
}

// logsAndExec waits until `kubectl logs` of the pod labelled app shows want
// and `kubectl exec` runs in it: the API server reaches the kubelet and
// verifies its serving certificate.
func logsAndExec(t *testing.T, s *server, app, want string) {
	t.Helper()
	pod := runningPods(t, s, app, 1)[0].Name
	eventually(t, 2*time.Minute, "kubectl logs and exec of "+pod, func(context.Context) (bool, error) {
		out, err := s.kubectl("logs", pod)
		if err != nil || !strings.Contains(out, want) {
			return false, fmt.Errorf("logs: %v: %s", err, out)
		}
		out, err = s.kubectl("exec", pod, "--", "hostname")
		if err != nil || strings.TrimSpace(out) != pod {
			return false, fmt.Errorf("exec: %v: %s", err, out)
		}
		return true, nil
	})
}

// wantKubeletProxy calls node's kubelet through the API server
// (nodes/proxy, which verifies the kubelet's serving certificate as logs
// and exec do): it must answer "ok", or, with refusal set, fail with it.
func wantKubeletProxy(t *testing.T, s *server, node, refusal string) {
	t.Helper()
	eventually(t, time.Minute, node+"'s kubelet through the API server", func(ctx context.Context) (bool, error) {
		body, err := s.client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes/" + node + "/proxy/healthz").DoRaw(ctx)
		if ctx.Err() != nil {
			return false, nil // keep the last real error for the report
		}
		if refusal == "" {
			return err == nil && string(body) == "ok", fmt.Errorf("%v: %s", err, body)
		}
		if err == nil {
			t.Fatalf("the API server reached %s's kubelet (%s), want it refused: %s", node, body, refusal)
		}
		msg := err.Error() + " " + string(body)
		return strings.Contains(msg, refusal), fmt.Errorf("%s, want %q", msg, refusal)
	})
}
